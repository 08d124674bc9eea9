package outbox

import (
	"context"
	"errors"
	"time"

	probes "github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/lock"
)

// Hooks observe a Driver: its passes, the runs it delivers, its leadership,
// the stuck notices it raises and the backlog it samples. Config.Hooks nil
// costs nothing: every call site tests it first and builds no event.
//
// The driver calls the hooks synchronously, on its own goroutine, between
// the steps they describe: keep them quick and never block. The contexts a
// Started hook returns must be ctx or derived from it (a tracing hook puts
// its span there); the driver carries them to the store calls of the pass
// and to Processor.Deliver. Embed NopHooks to implement only some.
//
// Hooks report; they never decide. Gate leader-only work on the lock, as
// the driver does, not on LeaderChanged.
type Hooks interface {
	// PassStarted is called as a leader's pass begins; PassEnded gets the
	// context it returns.
	PassStarted(ctx context.Context, p PassStart) context.Context
	// PassEnded is called once for every PassStarted.
	PassEnded(ctx context.Context, p PassEnd)
	// RunStarted is called before a run is handed to its processor (or
	// parked for want of one); RunEnded gets the context it returns, as
	// does Processor.Deliver.
	RunStarted(ctx context.Context, r RunStart) context.Context
	// RunEnded is called once for every RunStarted.
	RunEnded(ctx context.Context, r RunEnd)
	// Stuck is called when the driver raises a stuck notice, with the
	// notice, before Config.Notify gets it.
	Stuck(ctx context.Context, n Notice)
	// LeaderChanged is called when this driver's leadership term begins
	// (the leader lock acquired) and when it ends.
	LeaderChanged(ctx context.Context, c LeaderChange)
	// BacklogSampled is called by a leader after a pass that settled, at
	// most once per BacklogEvery, with the counts of a Store that is also a
	// Counter. The counts describe the moment they were taken: a standby
	// samples nothing.
	BacklogSampled(ctx context.Context, b Backlog)
}

// NopHooks implements Hooks with methods that do nothing; embed it to
// implement only some of them.
type NopHooks struct{}

// PassStarted implements Hooks.
func (NopHooks) PassStarted(ctx context.Context, _ PassStart) context.Context { return ctx }

// PassEnded implements Hooks.
func (NopHooks) PassEnded(context.Context, PassEnd) {}

// RunStarted implements Hooks.
func (NopHooks) RunStarted(ctx context.Context, _ RunStart) context.Context { return ctx }

// RunEnded implements Hooks.
func (NopHooks) RunEnded(context.Context, RunEnd) {}

// Stuck implements Hooks.
func (NopHooks) Stuck(context.Context, Notice) {}

// LeaderChanged implements Hooks.
func (NopHooks) LeaderChanged(context.Context, LeaderChange) {}

// BacklogSampled implements Hooks.
func (NopHooks) BacklogSampled(context.Context, Backlog) {}

// PassStart describes a pass about to begin.
type PassStart struct {
	// Cursor is where the walk stands (zero when the log is the source).
	Cursor Cursor
	// Token is the leader lock's fencing token (0 when it cannot fence).
	Token uint64
}

// PassOutcome is how a pass ended.
type PassOutcome string

// The outcomes of a pass.
const (
	// PassIdle: it settled and found nothing to deliver (or no processor
	// is registered, and it did not scan).
	PassIdle PassOutcome = "idle"
	// PassProgress: it settled after delivering or parking everything it
	// found.
	PassProgress PassOutcome = "progress"
	// PassRetry: it settled, stopped at an entry to retry.
	PassRetry PassOutcome = "retry"
	// PassFailed: the store failed it (state, counter, scan or settlement),
	// or the walk was refused (ErrCursorAhead). Its failure is Reason.
	PassFailed PassOutcome = "failed"
	// PassDeposed: the leader stepped down without settling (lock lost or
	// untrusted, fenced, or another leader settled).
	PassDeposed PassOutcome = "deposed"
	// PassStopped: the driver's context ended during the pass.
	PassStopped PassOutcome = "stopped"
)

// PassEnd describes a pass that ended.
type PassEnd struct {
	Outcome PassOutcome
	// Cursor is where the walk stands after the pass: moved only by a
	// pass that settled.
	Cursor Cursor
	// Scanned is how many entries the scan returned.
	Scanned int
	// Delivered, Parked and Retried add up the pass's runs (RunEnd).
	Delivered, Parked, Retried int
	// Reason is why the pass failed or stopped at a retry ("" otherwise).
	Reason string
	// Took is how long the pass ran.
	Took time.Duration
}

// RunStart describes a run about to be delivered.
type RunStart struct {
	Lane string
	// Entries is the run, in walk order. Hooks must not change or keep it.
	Entries []Entry
}

// RunEnd describes the outcome of a run.
type RunEnd struct {
	Lane string
	// Entries is the run's length.
	Entries int
	// Delivered and Parked count the entries that the walk moves past;
	// Retried those it does not, from the first retry on, which the next
	// pass delivers again (all of them when Err is set).
	Delivered, Parked, Retried int
	// Err is the processor's error (a panic, a wrong number of outcomes,
	// ErrFenced, a context that ended), or nil.
	Err error
	// Reason is why the walk stopped at the run's retry, or why its
	// entries were parked for want of a processor.
	Reason string
	// Took is how long the processor took.
	Took time.Duration
}

// LeaderChange describes the beginning or the end of a leadership term.
type LeaderChange struct {
	// Lock is the leader lock's name.
	Lock string
	// Leader is true as the term begins, false as it ends.
	Leader bool
	// Token is the term's fencing token.
	Token uint64
}

// Backlog is what a leader counted after a pass, each count at most
// BacklogLimit.
type Backlog struct {
	// Lock is the leader lock's name: it tells drivers apart.
	Lock string
	// Pending counts the entries after the cursor: committed and not yet
	// walked past, below the horizon or not. It is an entry count, never a
	// distance between xids (which says nothing about how many entries
	// wait, nor for how long).
	Pending int
	// Dead counts the dead letters not requeued.
	Dead int
	// At is when the counts were taken.
	At time.Time
}

// Backlog sampling bounds.
const (
	// BacklogEvery is the least time between two backlog samples of one
	// leader.
	BacklogEvery = 5 * time.Second
	// BacklogLimit caps each count, so a sample costs one bounded index
	// scan however far the walk is behind.
	BacklogLimit = 10_000
)

// Counter is what a Store may also do for the backlog gauges. Both counts
// stop at limit.
type Counter interface {
	// CountPending counts the entries after the cursor, at most limit.
	CountPending(ctx context.Context, after Cursor, limit int) (int, error)
	// CountDead counts the dead letters not requeued, at most limit.
	CountDead(ctx context.Context, limit int) (int, error)
}

// Status reports the driver's health: running, leader or standby for its
// leader lock, when its last pass (or a standby's attempt at the lock)
// reached the store and when the next is due, and its failing streak (the
// stored one while leader: passes that ended in a retry or failed).
func (d *Driver) Status() probes.Status { return d.status.Status() }

// passTally is what the hooks and the health need to know about the pass
// in progress.
type passTally struct {
	began                      time.Time
	scanned                    int
	delivered, parked, retried int
	settled, retry             bool
	failure                    string
}

// startPass opens a pass: its tally, and the hook's context.
func (w *walker) startPass(ctx context.Context) context.Context {
	w.t = passTally{}
	h := w.d.cfg.Hooks
	if h == nil {
		return ctx
	}
	w.t.began = time.Now()
	cur, _ := w.walkCursor()
	return h.PassStarted(ctx, PassStart{Cursor: cur, Token: w.lk.Token()})
}

// endPass closes the pass opened by startPass: the health, the backlog
// sample and the hook. delay is the pause before the next pass.
func (w *walker) endPass(ctx context.Context, delay time.Duration, deposed bool) {
	now := time.Now()
	switch {
	case w.t.settled:
		w.d.status.Touched(now, now.Add(delay))
		fallthrough
	case w.t.failure != "":
		w.d.status.Streak(w.h.failed, w.h.since, w.h.lastError)
	}
	h := w.d.cfg.Hooks
	if h == nil {
		return
	}
	outcome := PassIdle
	switch {
	case deposed:
		outcome = PassDeposed
	case ctx.Err() != nil:
		outcome = PassStopped
	case w.t.failure != "":
		outcome = PassFailed
	case w.t.retry:
		outcome = PassRetry
	case w.t.delivered+w.t.parked > 0:
		outcome = PassProgress
	}
	if w.t.settled {
		w.sampleBacklog(ctx, h, now)
	}
	reason := w.t.failure
	if outcome == PassRetry {
		reason = w.h.reason
	}
	cur, _ := w.walkCursor()
	h.PassEnded(ctx, PassEnd{Outcome: outcome, Cursor: cur, Scanned: w.t.scanned,
		Delivered: w.t.delivered, Parked: w.t.parked, Retried: w.t.retried, Reason: reason, Took: now.Sub(w.t.began)})
}

// sampleBacklog counts the backlog, at most once per BacklogEvery, when
// the store can.
func (w *walker) sampleBacklog(ctx context.Context, h Hooks, now time.Time) {
	// The log source has no cursor to count above: its backlog is the
	// slot's retained WAL (baton outbox slot status).
	cur, walking := w.walkCursor()
	c, ok := w.d.cfg.Store.(Counter)
	if !ok || !walking || (!w.sampled.IsZero() && now.Sub(w.sampled) < BacklogEvery) {
		return
	}
	w.sampled = now
	limit := w.d.cfg.StoreTimeout
	pending, err := withinValue(ctx, limit, func(ctx context.Context) (int, error) { return c.CountPending(ctx, cur, BacklogLimit) })
	if err != nil {
		w.d.cfg.Logger.Debug("outbox: counting the pending entries failed", "err", err)
		return
	}
	dead, err := withinValue(ctx, limit, func(ctx context.Context) (int, error) { return c.CountDead(ctx, BacklogLimit) })
	if err != nil {
		w.d.cfg.Logger.Debug("outbox: counting the dead letters failed", "err", err)
		return
	}
	h.BacklogSampled(ctx, Backlog{Lock: w.d.cfg.LeaderLockName, Pending: pending, Dead: dead, At: now})
}

// deliver hands a run to its processor, between the run hooks.
func (w *walker) deliver(ctx context.Context, p Processor, run []Entry) ([]Outcome, error) {
	h := w.d.cfg.Hooks
	if h == nil {
		return deliver(ctx, p, run)
	}
	began := time.Now()
	rctx := h.RunStarted(ctx, RunStart{Lane: run[0].Lane, Entries: run})
	outcomes, err := deliver(rctx, p, run)
	end := RunEnd{Lane: run[0].Lane, Entries: len(run), Err: err, Took: time.Since(began)}
	if err == nil && len(outcomes) != len(run) {
		end.Err = errors.New("processor defect: the number of outcomes differs from the run's")
	}
	end.Retried = len(run)
	if end.Err == nil {
		end.Retried = 0
		for i, o := range outcomes {
			if o.Kind == KindDelivered {
				end.Delivered++
				continue
			}
			if o.Kind == KindPark {
				end.Parked++
				continue
			}
			end.Retried, end.Reason = len(run)-i, o.Reason
			break
		}
	}
	w.endRun(rctx, h, end)
	return outcomes, err
}

// parkRun reports a run parked for want of a processor.
func (w *walker) parkRun(ctx context.Context, run []Entry, reason string) {
	h := w.d.cfg.Hooks
	if h == nil {
		return
	}
	rctx := h.RunStarted(ctx, RunStart{Lane: run[0].Lane, Entries: run})
	w.endRun(rctx, h, RunEnd{Lane: run[0].Lane, Entries: len(run), Parked: len(run), Reason: reason})
}

func (w *walker) endRun(ctx context.Context, h Hooks, end RunEnd) {
	w.t.delivered += end.Delivered
	w.t.parked += end.Parked
	w.t.retried += end.Retried
	h.RunEnded(ctx, end)
}

// leaderChanged reports a term's beginning or end, to the health and the
// hook.
func (d *Driver) leaderChanged(ctx context.Context, lk lock.Lock, leader bool) {
	role := probes.Role{Name: d.cfg.LeaderLockName, State: probes.Standby}
	if leader {
		role.State, role.Token = probes.Leader, lk.Token()
	}
	d.status.SetRoles(role)
	if h := d.cfg.Hooks; h != nil {
		h.LeaderChanged(ctx, LeaderChange{Lock: d.cfg.LeaderLockName, Leader: leader, Token: lk.Token()})
	}
}

// started records a Run beginning, in standby, its first attempt at the
// lock due within LeaderWait.
func (d *Driver) started() {
	d.status.Started(time.Now().Add(d.cfg.LeaderWait))
	d.status.SetRoles(probes.Role{Name: d.cfg.LeaderLockName, State: probes.Standby})
}

// standby records an attempt at the leader lock that reached the store
// (err nil: another instance leads) or failed.
func (d *Driver) standby(err error) {
	now := time.Now()
	if err != nil {
		d.status.Failed(now, "acquiring the leader lock: "+err.Error())
		return
	}
	d.status.Reached(now, now.Add(d.cfg.LeaderWait))
}

// stuck reports a stuck notice to the hook.
func (d *Driver) stuck(ctx context.Context, n Notice) {
	if h := d.cfg.Hooks; h != nil {
		h.Stuck(ctx, n)
	}
}
