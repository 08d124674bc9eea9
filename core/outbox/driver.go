package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/baton-go/baton/core/lock"
)

// Driver walks the outbox and delivers it. Every instance runs one; the one
// holding LeaderLockName works, the others stand by.
type Driver struct {
	cfg   Config
	procs map[string]Processor
}

// New validates cfg and returns a Driver that has not started.
func New(cfg Config) (*Driver, error) {
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
			continue // standby is the normal state
		case err != nil:
			if ctx.Err() != nil {
				return
			}
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
func (d *Driver) lead(ctx context.Context, lk lock.Lock) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // owned: ends with ctx, which lead cancels on return
		select {
		case <-lk.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()

	w := &walker{d: d}
	for ctx.Err() == nil {
		if !w.loaded {
			if err := w.load(ctx); err != nil {
				if ctx.Err() == nil {
					d.cfg.Logger.Warn("outbox: reading state failed", "err", err)
				}
				if !sleep(ctx, nil, d.cfg.ErrorDelay) {
					return
				}
				continue
			}
		}
		delay, deposed := w.pass(ctx)
		if deposed {
			return
		}
		if !sleep(ctx, nil, delay) {
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
	d      *Driver
	loaded bool
	cur    Cursor
	state  map[string]string
}

func (w *walker) load(ctx context.Context) error {
	st, err := w.d.cfg.Store.State(ctx)
	if err != nil {
		return err
	}
	cur, err := CursorFromState(st)
	if err != nil {
		return err
	}
	if st == nil {
		st = map[string]string{}
	}
	w.cur, w.state, w.loaded = cur, st, true
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
	if len(d.procs) == 0 {
		cfg.Logger.Warn("outbox: no processors registered; not scanning (entries would be parked as unknown lanes)")
		return cfg.IdleDelay, false
	}
	now := time.Now()
	entries, err := cfg.Store.Scan(ctx, w.cur, cfg.BatchSize)
	if err != nil {
		if ctx.Err() != nil {
			return 0, false
		}
		cfg.Logger.Warn("outbox: scan failed", "err", err)
		return w.settleFailure(ctx, now, stopInfo{reason: "scan: " + err.Error()})
	}

	to := w.cur
	var (
		parked    []Parked
		delivered int
		stop      *stopInfo
	)
	for _, run := range splitRuns(entries) {
		if ctx.Err() != nil {
			return 0, false // lost or shutting down: settle nothing
		}
		proc, ok := d.procs[run[0].Lane]
		if !ok {
			reason := fmt.Sprintf("no processor is registered for lane %q", run[0].Lane)
			for _, e := range run {
				parked = append(parked, Parked{Entry: e, Reason: reason})
				to = e.Cursor()
			}
			continue
		}
		outcomes, err := deliver(ctx, proc, run)
		if ctx.Err() != nil {
			return 0, false
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
				to = e.Cursor()
			case KindPark:
				parked = append(parked, Parked{Entry: e, Reason: o.Reason})
				to = e.Cursor()
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

	stamps := map[string]*string{KeyLastScanAt: stamp(now)}
	if stop != nil {
		w.failureStamps(ctx, stamps, now, *stop, delivered > 0)
	} else {
		// Progress, or nothing to do: the failing streak is over.
		stamps[KeyFirstStuckAt] = nil
		stamps[KeyFailedAttempts] = nil
	}
	if len(parked) > 0 {
		w.deadLetterStamps(ctx, stamps, now, parked)
	}
	err = cfg.Store.Settle(ctx, Settlement{From: w.cur, To: to, Park: parked, State: stamps})
	switch {
	case errors.Is(err, ErrCursorMoved):
		cfg.Logger.Warn("outbox: another leader settled meanwhile; this pass is discarded and leadership given up")
		w.loaded = false
		return 0, true
	case err != nil:
		if ctx.Err() != nil {
			return 0, false
		}
		cfg.Logger.Warn("outbox: settling the pass failed; its entries will be delivered again", "err", err)
		w.loaded = false // re-read: the stored cursor is the truth
		return cfg.ErrorDelay, false
	}
	w.apply(stamps, to)

	switch {
	case stop != nil && stop.retryAfter > 0:
		return stop.retryAfter, false
	case stop != nil:
		return cfg.ErrorDelay, false
	case len(entries) == cfg.BatchSize, !ScanHasRoom(ScanBytes(entries)):
		return 0, false // a full batch, by count or by bytes: more may be waiting, straight on
	default:
		return cfg.IdleDelay, false
	}
}

// settleFailure records a failed pass that delivered nothing (the scan
// itself failed) without moving the cursor.
func (w *walker) settleFailure(ctx context.Context, now time.Time, s stopInfo) (time.Duration, bool) {
	stamps := map[string]*string{}
	w.failureStamps(ctx, stamps, now, s, false)
	err := w.d.cfg.Store.Settle(ctx, Settlement{From: w.cur, To: w.cur, State: stamps})
	switch {
	case errors.Is(err, ErrCursorMoved):
		w.loaded = false
		return 0, true
	case err == nil:
		w.apply(stamps, w.cur)
	}
	return w.d.cfg.ErrorDelay, false
}

// failureStamps records a pass that ended in a retry, and raises the stuck
// notice when the streak is old enough and the last one long enough ago.
func (w *walker) failureStamps(ctx context.Context, stamps map[string]*string, now time.Time, s stopInfo, progressed bool) {
	cfg := &w.d.cfg
	failed, _ := strconv.Atoi(w.state[KeyFailedAttempts])
	stamps[KeyFailedAttempts] = ptr(strconv.Itoa(failed + 1))
	reason := s.reason
	if s.entry.Lane != "" {
		reason = fmt.Sprintf("lane %s, entry %s: %s", s.entry.Lane, s.entry.ID, s.reason)
	}
	stamps[KeyLastError] = ptr(reason)

	since, ok := parseStamp(w.state[KeyFirstStuckAt])
	if !ok || progressed {
		// A new streak: the first retry after progress, or the first ever.
		since = now
	}
	stamps[KeyFirstStuckAt] = stamp(since)
	if now.Sub(since) < cfg.StuckAfter {
		return
	}
	if last, ok := parseStamp(w.state[KeyLastStuckNotificationAt]); ok && now.Sub(last) < cfg.StuckNoticeEvery {
		return
	}
	n := Notice{Kind: NoticeStuck, Lane: s.entry.Lane, EntryID: s.entry.ID, Since: since, LastError: s.reason, At: now}
	if err := cfg.Notify(ctx, n); err != nil {
		cfg.Logger.Warn("outbox: the stuck notice could not be sent", "err", err)
		return
	}
	stamps[KeyLastStuckNotificationAt] = stamp(now)
}

// deadLetterStamps records parked entries and raises the (throttled)
// dead-letter notice.
func (w *walker) deadLetterStamps(ctx context.Context, stamps map[string]*string, now time.Time, parked []Parked) {
	cfg := &w.d.cfg
	stamps[KeyLastDeadLetterAt] = stamp(now)
	if last, ok := parseStamp(w.state[KeyLastDeadLetterNotificationAt]); ok && now.Sub(last) < cfg.DeadLetterNoticeEvery {
		return
	}
	first := parked[0]
	n := Notice{Kind: NoticeDeadLetter, Lane: first.Entry.Lane, EntryID: first.Entry.ID, LastError: first.Reason, Parked: len(parked), At: now}
	if err := cfg.Notify(ctx, n); err != nil {
		cfg.Logger.Warn("outbox: the dead-letter notice could not be sent", "err", err)
		return
	}
	stamps[KeyLastDeadLetterNotificationAt] = stamp(now)
}

// apply mirrors a successful settlement in the walker's view.
func (w *walker) apply(stamps map[string]*string, to Cursor) {
	for k, v := range stamps {
		if v == nil {
			delete(w.state, k)
		} else {
			w.state[k] = *v
		}
	}
	w.cur = to
	w.state[KeyLastScannedXID], w.state[KeyLastScannedID] = CursorState(to)
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

// splitRuns cuts a batch into maximal runs of consecutive same-lane entries.
func splitRuns(entries []Entry) [][]Entry {
	var runs [][]Entry
	for start := 0; start < len(entries); {
		end := start + 1
		for end < len(entries) && entries[end].Lane == entries[start].Lane {
			end++
		}
		runs = append(runs, entries[start:end])
		start = end
	}
	return runs
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
