package outbox

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"sync"
	"time"

	probes "github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/lock"
)

// Driver walks the outbox and delivers it. Every instance runs one; the one
// holding LeaderLockName works, the others stand by.
type Driver struct {
	cfg    Config
	procs  map[string]Processor
	status probes.Tracker
}

// NewDriver validates cfg and returns a Driver that has not started.
func NewDriver(cfg Config) (*Driver, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	procs := make(map[string]Processor, len(cfg.Processors))
	for _, p := range cfg.Processors {
		procs[p.Lane()] = p
	}
	return &Driver{cfg: cfg, procs: procs}, nil
}

// Run competes for leadership and, while leader, walks the outbox; it also
// runs the retention loop unless disabled. It returns when ctx ends, after
// its goroutines have stopped and its locks are released.
func (d *Driver) Run(ctx context.Context) error {
	d.started()
	defer d.status.Stopped()
	var wg sync.WaitGroup
	if !d.cfg.RetentionDisabled {
		wg.Go(func() { d.retentionLoop(ctx) })
	}
	d.leaderLoop(ctx)
	wg.Wait()
	return nil
}

func (d *Driver) leaderLoop(ctx context.Context) {
	for ctx.Err() == nil {
		lk, err := d.cfg.Locks.Acquire(ctx, d.cfg.LeaderLockName, lock.AcquireOptions{Wait: d.cfg.LeaderWait})
		switch {
		case errors.Is(err, lock.ErrNotAcquired):
			d.standby(nil)
			continue // standby is the normal state
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			d.standby(err)
			d.cfg.Logger.Warn("outbox: acquiring the leader lock failed", "lock", d.cfg.LeaderLockName, "err", err)
			if !sleep(ctx, nil, d.cfg.ErrorDelay) {
				return
			}
			continue
		}
		d.lead(ctx, lk)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = lk.Release(rctx)
		cancel()
	}
}

// lead walks the outbox until ctx ends, the lock is lost, or another
// leader's settlement shows this one was deposed.
func (d *Driver) lead(parent context.Context, lk lock.Lock) {
	// Every call under this term carries the term's fencing token.
	ctx, cancel := context.WithCancel(WithFencingToken(parent, lk.Token()))
	defer cancel()
	d.leaderChanged(parent, lk, true)
	defer d.leaderChanged(parent, lk, false)
	go func() { // owned: ends with ctx, which lead cancels on return
		select {
		case <-lk.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()

	w := &walker{d: d, lk: lk, f: d.newFeed(lk)}
	defer w.f.close(ctx)
	k := d.newWake() // the leader alone listens, for as long as it leads
	defer k.close()
	for ctx.Err() == nil {
		pctx := w.startPass(ctx)
		if !w.loaded {
			if err := w.load(pctx); err != nil {
				w.t.failure = "reading the outbox state: " + err.Error()
				if ctx.Err() != nil {
					w.endPass(pctx, 0, false)
					return
				}
				if isRefused(err) {
					// Waiting cannot mend it: say so at once, and try again
					// after ErrorDelay in case an operator acted.
					d.cfg.Logger.Error("outbox: refusing to read", "err", err)
					w.settleFailure(ctx, time.Now(), stopInfo{reason: err.Error()}, true)
					if !sleep(ctx, nil, d.cfg.ErrorDelay) {
						return
					}
					continue
				}
				d.cfg.Logger.Warn("outbox: reading state failed", "err", err)
				// Nothing can be stored, but the streak goes on in memory.
				now := time.Now()
				w.h.fail(now, Entry{}, w.t.failure, false)
				d.notifyStuck(ctx, &w.h, now, false)
				w.endPass(pctx, d.cfg.ErrorDelay, false)
				if !sleep(ctx, nil, d.cfg.ErrorDelay) {
					return
				}
				continue
			}
		}
		delay, deposed := w.pass(pctx)
		w.endPass(pctx, delay, deposed)
		if deposed {
			return
		}
		if !k.rest(ctx, w, delay) {
			return
		}
	}
}

// sleep waits d, or until ctx ends (false) or wake fires.
func sleep(ctx context.Context, wake <-chan struct{}, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-wake:
		return true
	case <-t.C:
		return true
	}
}

// walker is one leadership term's view of the walk.
type walker struct {
	d  *Driver
	lk lock.Lock
	// f is where passes read and settle: the walk, or the log.
	f feed
	// loaded says f's position was read from the store; it is read again
	// after a settlement that failed, since the stored position is the
	// truth.
	loaded bool
	// h is the term's health, kept in memory (see health); merged says the
	// stored stamps were folded into it.
	h      health
	merged bool
	// idle says the last pass caught up: it settled without a stop and
	// read less than a full batch, so its pause may end at a signal.
	idle bool
	// t is the pass in progress, for the hooks and the health; sampled is
	// when the backlog was last counted.
	t       passTally
	sampled time.Time
	// stored is the state as this term last read or settled it, and
	// scanStampAt when it last wrote last_scan_at: a settlement writes
	// only the stamps that changed (changedStamps).
	stored      map[string]string
	scanStampAt time.Time
}

// newFeed is the term's feed: the log when Config.Log is set, otherwise
// the walk.
func (d *Driver) newFeed(lk lock.Lock) feed {
	if d.cfg.Log != nil {
		return &logFeed{ls: d.cfg.Log, s: d.cfg.Store, token: lk.Token(), wait: d.cfg.IdleDelay, timeout: d.cfg.StoreTimeout, logger: d.cfg.Logger}
	}
	cs, ok := d.cfg.Store.(ConcurrentScanner)
	return &walkFeed{s: d.cfg.Store, timeout: d.cfg.StoreTimeout, back: true, counterEvery: d.cfg.IdleDelay,
		readAhead: ok && cs.ScansConcurrently(), settledAll: true}
}

func (w *walker) load(ctx context.Context) error {
	st, err := withinValue(ctx, w.d.cfg.StoreTimeout, w.d.cfg.Store.State)
	if err != nil {
		return err
	}
	if !w.merged {
		w.h.merge(storedHealth(st))
		w.merged = true
	}
	if err := w.f.load(ctx, st); err != nil {
		return err
	}
	w.loaded, w.stored, w.scanStampAt = true, maps.Clone(st), time.Time{}
	return nil
}

// stopInfo is where and why a pass stopped early.
type stopInfo struct {
	entry      Entry
	reason     string
	retryAfter time.Duration
}

// pass is one bounded scan, its delivery and its settlement. It returns the
// pause before the next pass, and whether this leader was deposed.
func (w *walker) pass(ctx context.Context) (delay time.Duration, deposed bool) {
	d := w.d
	cfg := &d.cfg
	w.idle = false
	if len(d.procs) == 0 {
		cfg.Logger.Warn("outbox: no processors registered; not scanning (entries would be parked as unknown lanes)")
		return cfg.IdleDelay, false
	}
	now := time.Now()
	entries, err := w.f.scan(ctx, cfg.BatchSize)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return 0, false
	case errors.Is(err, ErrReaderFenced):
		cfg.Logger.Warn("outbox: a reader of a later leadership term has the log; giving up leadership", "err", err)
		return 0, true
	case isRefused(err):
		// Waiting cannot mend it: notify at once, and check again next
		// pass, in case an operator repaired it meanwhile.
		cfg.Logger.Error("outbox: refusing to walk", "err", err)
		return w.settleFailure(ctx, now, stopInfo{reason: err.Error()}, true)
	default:
		cfg.Logger.Warn("outbox: scan failed", "err", err)
		return w.settleFailure(ctx, now, stopInfo{reason: err.Error()}, false)
	}
	w.t.scanned = len(entries)

	var (
		parked    []Parked
		delivered int
		settled   int // entries of the batch delivered or parked, a prefix
		stop      *stopInfo
	)
	for run := range splitRuns(entries) {
		if ctx.Err() != nil {
			return 0, false // lost or shutting down: settle nothing
		}
		if !w.trusted("delivering a run") {
			return 0, true
		}
		proc, ok := d.procs[run[0].Lane]
		if !ok {
			reason := fmt.Sprintf("no processor is registered for lane %q", run[0].Lane)
			for _, e := range run {
				parked = append(parked, Parked{Entry: e, Reason: reason})
			}
			settled += len(run)
			w.parkRun(ctx, run, reason)
			continue
		}
		outcomes, err := w.deliver(ctx, proc, run)
		if ctx.Err() != nil {
			return 0, false
		}
		if errors.Is(err, ErrFenced) {
			cfg.Logger.Warn("outbox: the destination refused this leader's fencing token; settling nothing and giving up leadership",
				"lane", run[0].Lane, "token", w.lk.Token(), "err", err)
			return 0, true
		}
		if err == nil && len(outcomes) != len(run) {
			err = fmt.Errorf("processor defect: %d outcomes for a run of %d entries", len(outcomes), len(run))
			cfg.Logger.Error("outbox: processor returned the wrong number of outcomes; retrying the whole run",
				"lane", run[0].Lane, "outcomes", len(outcomes), "entries", len(run))
		}
		if err != nil {
			stop = &stopInfo{entry: run[0], reason: err.Error()}
			break
		}
		for i, o := range outcomes {
			e := run[i]
			switch o.Kind {
			case KindDelivered:
				delivered++
				settled++
			case KindPark:
				parked = append(parked, Parked{Entry: e, Reason: StorableReason(o.Reason)})
				settled++
			default:
				stop = &stopInfo{entry: e, reason: o.Reason, retryAfter: o.RetryAfter}
			}
			if stop != nil {
				break
			}
		}
		if stop != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return 0, false
	}
	for _, p := range parked {
		cfg.Logger.Warn("outbox: entry parked", "id", p.Entry.ID, "lane", p.Entry.Lane, "reason", p.Reason)
	}

	next := w.h
	if stop != nil {
		next.fail(now, stop.entry, stop.reason, delivered > 0)
		d.notifyStuck(ctx, &next, now, false)
	} else {
		next.ok() // progress, or nothing to do: the failing streak is over
	}
	if len(parked) > 0 {
		d.notifyDeadLetters(ctx, &next, now, parked)
	}
	if !w.trusted("settling") {
		return 0, true
	}
	stamps := w.changedStamps(next, now)
	err = w.f.settle(ctx, settled, stop == nil, parked, stamps)
	switch {
	case errors.Is(err, ErrCursorMoved), errors.Is(err, ErrReaderFenced):
		cfg.Logger.Warn("outbox: another leader settled meanwhile; this pass is discarded and leadership given up")
		w.loaded = false
		return 0, true
	case err != nil:
		if ctx.Err() != nil {
			return 0, false
		}
		cfg.Logger.Warn("outbox: settling the pass failed; its entries will be delivered again", "err", err)
		w.t.failure = "settling the pass failed: " + err.Error()
		// Nothing of this pass counts as progress, but the notices it sent
		// do: the next pass must not send them again.
		failed := w.h
		failed.stuckNotice, failed.deadLetterAt, failed.deadNotice = next.stuckNotice, next.deadLetterAt, next.deadNotice
		at := Entry{}
		if stop != nil {
			at = stop.entry
		}
		failed.fail(now, at, "settling the pass failed: "+err.Error(), false)
		// Judged when the settlement failed, not when the pass began: a
		// settlement given up on after StoreTimeout took that long.
		d.notifyStuck(ctx, &failed, time.Now(), false)
		w.h = failed
		w.loaded = false // re-read: the stored cursor is the truth
		return cfg.ErrorDelay, false
	}
	w.h = next
	w.stamped(stamps, now)
	w.t.settled, w.t.retry = true, stop != nil

	switch {
	case stop != nil && stop.retryAfter > 0:
		return stop.retryAfter, false
	case stop != nil:
		return cfg.ErrorDelay, false
	case len(entries) == cfg.BatchSize, !ScanHasRoom(ScanBytes(entries)):
		return 0, false // a full batch, by count or by bytes: more may be waiting, straight on
	default:
		w.idle = true
		return w.f.idleDelay(cfg.IdleDelay), false
	}
}

// settleFailure records a failed pass that delivered nothing (the scan
// itself failed, or the walk was refused) without moving the cursor;
// atOnce raises the stuck notice without waiting for StuckAfter.
func (w *walker) settleFailure(ctx context.Context, now time.Time, s stopInfo, atOnce bool) (time.Duration, bool) {
	d := w.d
	w.t.failure = s.reason
	next := w.h
	next.fail(now, s.entry, s.reason, false)
	// Judged when the pass failed, not when it began: a scan given up on
	// after StoreTimeout took that long.
	d.notifyStuck(ctx, &next, time.Now(), atOnce)
	w.h = next // a failure whether or not it can be stored
	if !w.trusted("settling") {
		return 0, true
	}
	if !w.loaded {
		// Nothing was read, so no position to settle at: the streak is
		// in memory and notified; it is stored once a pass can settle.
		return d.cfg.ErrorDelay, false
	}
	stamps := w.changedStamps(next, now)
	err := w.f.settle(ctx, 0, false, nil, stamps)
	if errors.Is(err, ErrCursorMoved) || errors.Is(err, ErrReaderFenced) {
		w.loaded = false
		return 0, true
	}
	if err == nil {
		w.stamped(stamps, now)
	}
	return d.cfg.ErrorDelay, false
}

// trusted asks the lock, synchronously, whether this leader may still act:
// Lost is closed by a timer, which a goroutine resumed after a pause can
// outrun. When the answer is no, the pass ends without settling and the
// leader steps down.
func (w *walker) trusted(before string) bool {
	if w.lk.Trusted() {
		return true
	}
	w.d.cfg.Logger.Warn("outbox: the leader lock can no longer be trusted; giving up leadership without "+before,
		"lock", w.lk.Name(), "token", w.lk.Token())
	return false
}

// deliver calls the processor, turning a panic into an error.
func deliver(ctx context.Context, p Processor, run []Entry) (outcomes []Outcome, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("processor for lane %q panicked: %v", p.Lane(), r)
		}
	}()
	return p.Deliver(ctx, run)
}

// splitRuns yields a batch's maximal runs of consecutive same-lane
// entries, in order, as subslices of entries. It builds no list of them:
// where lanes interleave, a batch of 1 000 is hundreds of runs.
func splitRuns(entries []Entry) iter.Seq[[]Entry] {
	return func(yield func([]Entry) bool) {
		for start := 0; start < len(entries); {
			end := start + 1
			for end < len(entries) && entries[end].Lane == entries[start].Lane {
				end++
			}
			if !yield(entries[start:end]) {
				return
			}
			start = end
		}
	}
}

// Stamps are RFC 3339 with nanoseconds, in UTC.
func stamp(t time.Time) *string { return ptr(t.UTC().Format(time.RFC3339Nano)) }

func parseStamp(s string) (time.Time, bool) {
	if s == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

func ptr(s string) *string { return &s }
