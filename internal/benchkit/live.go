package benchkit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/outbox"
)

// Bound says how long a live run goes on: through a backlog of Count units
// loaded before it starts, until every one is done; or for Duration, with
// the load kept up while it runs. Exactly one of them is set.
type Bound struct {
	Count    int
	Duration time.Duration
}

func (b Bound) validate() error {
	switch {
	case b.Count < 0 || b.Duration < 0:
		return fmt.Errorf("benchkit: Bound %+v: Count and Duration must not be negative", b)
	case (b.Count == 0) == (b.Duration == 0):
		return fmt.Errorf("benchkit: Bound %+v: set exactly one of Count and Duration", b)
	}
	return nil
}

// unbounded is the time bound of a run bounded by its count only.
const unbounded = time.Duration(1 << 62)

// Live is one run of one of baton's systems that reports while it goes
// (the baton command's bench): Prepare loads it, outside the measurement;
// Run runs it, once; Progress, from any goroutine, says how far it is.
type Live struct {
	Name string // what runs, e.g. "outbox relay"
	Unit string // what it counts, e.g. "entries"
	// LatencyOf says what the recorded latencies measure; "" when the run
	// records none.
	LatencyOf string

	done    *Counter
	added   atomic.Int64 // units loaded or enqueued so far
	started atomic.Int64 // Run's start, in Unix nanoseconds; 0 before
	prepare func(ctx context.Context) error
	run     func(ctx context.Context) (Sample, error)
}

func newLive(name, unit string, b Bound) *Live {
	target := int64(b.Count)
	if b.Duration > 0 {
		target = 1 << 62
	}
	return &Live{Name: name, Unit: unit, done: NewCounter(target)}
}

// Progress is how far a live run is.
type Progress struct {
	Done    int64         // units done
	Backlog int64         // units loaded or enqueued, not done yet
	Elapsed time.Duration // since Run started; 0 before
}

// Progress says how far the run is.
func (l *Live) Progress() Progress {
	p := Progress{Done: l.done.Count()}
	p.Backlog = max(0, l.added.Load()-p.Done)
	if at := l.started.Load(); at != 0 {
		p.Elapsed = time.Since(time.Unix(0, at))
	}
	return p
}

// LiveResult is what a live run did: Ops units done in Elapsed (from the
// start of Run, start-up included), the Latencies if the run records
// them, and how many units were loaded or enqueued and left undone.
type LiveResult struct {
	Sample
	Added   int64
	Backlog int64
}

// Prepare loads the run (a backlog to work through, the first rows of a
// table kept topped up); nothing is measured.
func (l *Live) Prepare(ctx context.Context) error {
	if l.prepare == nil {
		return nil
	}
	return l.prepare(ctx)
}

// Run runs it, once.
func (l *Live) Run(ctx context.Context) (LiveResult, error) {
	if !l.started.CompareAndSwap(0, time.Now().UnixNano()) {
		return LiveResult{}, fmt.Errorf("benchkit: %s runs once", l.Name)
	}
	s, err := l.run(ctx)
	if err != nil {
		return LiveResult{}, err
	}
	added := l.added.Load()
	return LiveResult{Sample: s, Added: added, Backlog: max(0, added-s.Ops)}, nil
}

// LiveRelay is the outbox relay: the real outbox.Driver, BatchSize batch,
// with a no-op processor per lane. With b.Count it delivers a backlog of
// that many entries loaded by Prepare (Load); with b.Duration, producers
// goroutines enqueue entries for that long, each in a transaction with a
// business row (Producers.Tx, pgxstore.Enqueue) while the relay delivers
// them, and the latency of each from its commit to its delivery is
// recorded. p may be nil with b.Count.
func (o *Outbox) LiveRelay(p *Producers, batch, producers int, b Bound) (*Live, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	l := newLive("outbox relay", "entries", b)
	cfg := outbox.Config{Store: o.Store, BatchSize: batch}
	if b.Count > 0 {
		l.prepare = func(ctx context.Context) error {
			if err := o.ResetCursor(ctx); err != nil {
				return err
			}
			if err := o.Load(ctx, b.Count); err != nil {
				return err
			}
			l.added.Store(int64(b.Count))
			return nil
		}
		l.run = func(ctx context.Context) (Sample, error) {
			return runDriver(ctx, cfg, l.done, unbounded, false, nil)
		}
		return l, nil
	}
	if p == nil || producers < 1 {
		return nil, fmt.Errorf("benchkit: LiveRelay for a duration needs Producers and at least 1 producer (got %d)", producers)
	}
	l.LatencyOf = "commit to delivery"
	l.run = func(ctx context.Context) (Sample, error) {
		watch := NewStopwatch[outbox.ID]()
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		produced := make(chan error, 1)
		go func() {
			var n atomic.Int64
			_, err := Loop(pctx, producers, b.Duration, func(ctx context.Context) error {
				id, lane := outbox.NewID(), Lanes[int(n.Add(1))%len(Lanes)]
				err := p.Tx(ctx, func(ctx context.Context, tx pgx.Tx) error {
					if err := pgxstore.Enqueue(ctx, tx, id, lane, Payload); err != nil {
						return err
					}
					// Before the commit: the relay may deliver the entry
					// as soon as it is committed.
					watch.Start(id)
					return nil
				})
				if err != nil {
					watch.Forget(id)
					return err
				}
				l.added.Add(1)
				return nil
			})
			produced <- err
		}()
		s, err := runDriver(ctx, cfg, l.done, b.Duration, false, func(run []outbox.Entry) {
			for _, e := range run {
				watch.Stop(e.ID)
			}
		})
		cancel()
		if perr := <-produced; perr != nil && ctx.Err() == nil {
			err = errors.Join(err, fmt.Errorf("benchkit: enqueue: %w", perr))
		}
		if err != nil {
			return Sample{}, err
		}
		s.Latencies = watch.Latencies()
		return s, nil
	}
	return l, nil
}

// Topping up a work table during a run bounded by time: a chunk of rows is
// added whenever fewer than a chunk wait.
const (
	minTopUp = 10_000
	maxTopUp = 100_000
)

// LiveBurnDown is the work-row burn-down: one Worker running concurrency
// no-op handlers, claiming batch rows at a time. With b.Count it works
// through that many fresh rows filled by Prepare; with b.Duration it works
// for that long on a table topped up while it runs, so that it never runs
// dry. No latency is recorded: a row's wait in the table is the load's,
// not the worker's.
func (w *WorkRows) LiveBurnDown(concurrency, batch int, b Bound) (*Live, error) {
	if err := b.validate(); err != nil {
		return nil, err
	}
	l := newLive("work-row burn-down", "rows", b)
	chunk := int64(b.Count)
	if b.Duration > 0 {
		chunk = min(max(minTopUp, int64(4*batch*concurrency)), maxTopUp)
	}
	l.prepare = func(ctx context.Context) error {
		n := chunk
		if b.Duration > 0 {
			n = 2 * chunk
		}
		if err := w.Fill(ctx, int(n)); err != nil {
			return err
		}
		l.added.Store(n)
		return nil
	}
	bound := unbounded
	if b.Duration > 0 {
		bound = b.Duration
	}
	l.run = func(ctx context.Context) (Sample, error) {
		wk, err := w.worker(l.done, concurrency, batch, nil)
		if err != nil {
			return Sample{}, err
		}
		rctx, stop := context.WithCancel(ctx)
		worked := make(chan struct{})
		go func() { defer close(worked); _ = wk.Run(rctx) }()
		fed := make(chan error, 1)
		if b.Duration > 0 {
			go func() { fed <- l.topUp(rctx, w, chunk) }()
		} else {
			fed <- nil
		}
		s, err := l.done.Await(ctx, time.Unix(0, l.started.Load()), bound)
		stop()
		<-worked
		if ferr := <-fed; ferr != nil && err == nil {
			err = ferr
		}
		return s, err
	}
	return l, nil
}

// topUp adds chunk rows to w's table whenever fewer than chunk wait, until
// ctx ends.
func (l *Live) topUp(ctx context.Context, w *WorkRows, chunk int64) error {
	for {
		added := l.added.Load()
		if added-l.done.Count() < chunk {
			if err := w.add(ctx, added+1, chunk); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("benchkit: top the work table up: %w", err)
			}
			l.added.Add(chunk)
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Millisecond):
		}
	}
}
