// Package benchkit measures baton side by side with what a user would use
// instead: load generators, rate and latency recording, alternation of the
// systems of one cell, and the table of rates and ratios. It runs baton's
// own side of every cell (and the bare baselines, which need nothing beyond
// baton's own dependencies); the peers that would bring new dependencies
// (River, watermill) live in the bench module, which adds them as Systems.
// A Live run is one of baton's systems run once while it reports its
// progress: the baton command's bench.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Sample is what one bounded run of a system did: Ops units of work
// (entries, transactions, rows, acquisitions) in Elapsed, and, where the
// system records them, the latency of each op; where it is measured, the
// CPU each process used.
type Sample struct {
	Ops       int64
	Elapsed   time.Duration
	Latencies []time.Duration
	CPU       *CPUUse
}

// Rate is Ops per second; 0 for an empty sample.
func (s Sample) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// Quantile is the q-quantile (0…1) of the recorded latencies, 0 when none.
func (s Sample) Quantile(q float64) time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	l := slices.Clone(s.Latencies)
	slices.Sort(l)
	i := int(q * float64(len(l)-1))
	return l[i]
}

// Loop runs op from workers goroutines at once, each calling it again as
// soon as it returns, until d has passed, and records every op's latency.
// The first error stops all of them and is returned.
func Loop(ctx context.Context, workers int, d time.Duration, op func(ctx context.Context) error) (Sample, error) {
	if workers < 1 {
		return Sample{}, fmt.Errorf("benchkit: Loop with %d workers; it needs at least 1", workers)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lats    []time.Duration
		firstEr error
	)
	start := time.Now()
	deadline := start.Add(d)
	for range workers {
		wg.Go(func() {
			var mine []time.Duration
			defer func() {
				mu.Lock()
				lats = append(lats, mine...)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				t0 := time.Now()
				if t0.After(deadline) {
					return
				}
				if err := op(ctx); err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						if firstEr == nil {
							firstEr = err
						}
						mu.Unlock()
						cancel()
					}
					return
				}
				mine = append(mine, time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstEr != nil {
		return Sample{}, firstEr
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return Sample{}, err
	}
	return Sample{Ops: int64(len(lats)), Elapsed: elapsed, Latencies: lats}, nil
}

// Counter counts units of work done by a system that works on its own (a
// relay, a queue's workers) and says when a target is reached. It also
// remembers when the first and the latest units were counted, for the
// steady rate that leaves out a system's start-up.
type Counter struct {
	target int64
	done   chan struct{}

	mu              sync.Mutex
	n               int64
	firstN          int64
	firstAt, lastAt time.Time
	onFirst         chan struct{} // closed at the first count, if set
}

// NewCounter returns a Counter whose Done closes at target.
func NewCounter(target int64) *Counter {
	return &Counter{target: target, done: make(chan struct{})}
}

// Add counts k more.
func (c *Counter) Add(k int64) {
	if k == 0 {
		return
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n >= c.target {
		return
	}
	c.n += k
	if c.firstAt.IsZero() {
		c.firstAt, c.firstN = now, c.n
		if c.onFirst != nil {
			close(c.onFirst)
			c.onFirst = nil
		}
	}
	c.lastAt = now
	if c.n >= c.target {
		close(c.done)
	}
}

// Count is the number counted so far.
func (c *Counter) Count() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Done closes when the target is reached.
func (c *Counter) Done() <-chan struct{} { return c.done }

// wait waits until c reaches its target or d has passed since start.
func (c *Counter) wait(ctx context.Context, start time.Time, d time.Duration) error {
	t := time.NewTimer(time.Until(start.Add(d)))
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Await waits until c reaches its target or d has passed since start, and
// returns the sample: what was counted by then, over the time since start.
func (c *Counter) Await(ctx context.Context, start time.Time, d time.Duration) (Sample, error) {
	if err := c.wait(ctx, start, d); err != nil {
		return Sample{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return Sample{Ops: c.n, Elapsed: time.Since(start)}, nil
}

// StartLimit bounds how long AwaitSteady waits for the first count: a
// system that has not done anything by then has failed, not started slow.
const StartLimit = 30 * time.Second

// AwaitSteady measures from the first units counted to the latest: the
// first count and everything before it (connecting, electing, the first
// fetch) are left out, for every system alike. It waits up to StartLimit
// for the first count, then until the target or d after that first count.
func (c *Counter) AwaitSteady(ctx context.Context, start time.Time, d time.Duration) (Sample, error) {
	first := make(chan struct{})
	c.mu.Lock()
	c.onFirst = first
	if !c.firstAt.IsZero() {
		close(first)
		c.onFirst = nil
	}
	c.mu.Unlock()
	t := time.NewTimer(time.Until(start.Add(StartLimit)))
	select {
	case <-first:
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return Sample{}, ctx.Err()
	}
	t.Stop()
	c.mu.Lock()
	firstAt := c.firstAt
	c.mu.Unlock()
	if firstAt.IsZero() {
		return Sample{Elapsed: time.Since(start)}, nil
	}
	if err := c.wait(ctx, firstAt, d); err != nil {
		return Sample{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.lastAt.After(c.firstAt) {
		return Sample{Elapsed: time.Since(start)}, nil
	}
	return Sample{Ops: c.n - c.firstN, Elapsed: c.lastAt.Sub(c.firstAt)}, nil
}

// Stopwatch times units of work that start in one goroutine and end in
// another, by key: an entry from its commit to its delivery. Safe for
// concurrent use.
type Stopwatch[K comparable] struct {
	mu      sync.Mutex
	started map[K]time.Time
	lats    []time.Duration
}

// NewStopwatch returns an empty Stopwatch.
func NewStopwatch[K comparable]() *Stopwatch[K] {
	return &Stopwatch[K]{started: map[K]time.Time{}}
}

// Start records that k starts now.
func (s *Stopwatch[K]) Start(k K) {
	now := time.Now()
	s.mu.Lock()
	s.started[k] = now
	s.mu.Unlock()
}

// Forget drops k, started but never to end (its transaction rolled back).
func (s *Stopwatch[K]) Forget(k K) {
	s.mu.Lock()
	delete(s.started, k)
	s.mu.Unlock()
}

// Stop records the latency of k, ending now, and reports whether k was
// started; a key ends once.
func (s *Stopwatch[K]) Stop(k K) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.started[k]
	if ok {
		s.lats = append(s.lats, now.Sub(at))
		delete(s.started, k)
	}
	return ok
}

// Latencies returns a copy of the latencies recorded so far.
func (s *Stopwatch[K]) Latencies() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lats)
}
