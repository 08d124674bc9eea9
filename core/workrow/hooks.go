package workrow

import (
	"context"
	"time"

	"github.com/baton-go/baton/core/health"
)

// Hooks observe a Worker's store calls: claims, finalizes (releases of
// rows never started included) and renewals, with what each found.
// Config.Hooks nil costs nothing.
//
// The worker calls them synchronously from the goroutine that made the
// call (its claim loop, a batch's keeper or its finalizer), possibly from
// several at once: keep them quick, safe for concurrent use, and never
// blocking. Embed NopHooks to implement only some.
type Hooks interface {
	// ClaimEnded is called after every claim.
	ClaimEnded(ctx context.Context, c Claim)
	// FinalizeEnded is called after every finalize, and after every
	// release of rows whose handler never ran.
	FinalizeEnded(ctx context.Context, f Finalize)
	// RenewEnded is called after every renewal of a batch's lease.
	RenewEnded(ctx context.Context, r Renew)
}

// NopHooks implements Hooks with methods that do nothing.
type NopHooks struct{}

// ClaimEnded implements Hooks.
func (NopHooks) ClaimEnded(context.Context, Claim) {}

// FinalizeEnded implements Hooks.
func (NopHooks) FinalizeEnded(context.Context, Finalize) {}

// RenewEnded implements Hooks.
func (NopHooks) RenewEnded(context.Context, Renew) {}

// Claim describes one claim.
type Claim struct {
	// Rows is how many rows it took (0 when nothing was due).
	Rows int
	Took time.Duration
	Err  error
}

// Finalize describes one finalize or release call. The counts are of the
// rows the store applied it to, by outcome (a Fail at MaxAttempts counts
// as parked, an interrupted one as released); Stale counts those it
// refused because another claim held them by then.
type Finalize struct {
	Completed, Failed, Parked, Released int
	Stale                               int
	Took                                time.Duration
	// Err is the call's failure; the counts are then 0.
	Err error
}

// Renew describes one renewal of a batch's lease.
type Renew struct {
	// Rows is how many rows it renewed; Lost how many another claim had
	// taken (their handlers are cancelled, their outcomes dropped).
	Rows, Lost int
	Took       time.Duration
	Err        error
}

// Status reports the worker's health: running while a Run is in progress,
// when its last store call succeeded (a claim, even of nothing, a renewal,
// a finalize) and when the next is due (after IdleDelay or RenewEvery,
// whichever is longer), and the streak of failed store calls. A worker has
// no roles: every instance works.
func (w *Worker[K, R]) Status() health.Status { return w.status.Status() }

// pace is the longest pause between two store calls of a running worker.
func (w *Worker[K, R]) pace() time.Duration { return max(w.cfg.IdleDelay, w.cfg.RenewEvery) }

// called records a store call that began at began, for the health.
func (w *Worker[K, R]) called(began time.Time, err error) time.Time {
	now := time.Now()
	if err != nil {
		w.status.Failed(now, err.Error())
	} else {
		w.status.Reached(now, now.Add(w.pace()))
	}
	return now
}

// claimed reports a claim.
func (w *Worker[K, R]) claimed(ctx context.Context, rows int, began time.Time, err error) {
	now := w.called(began, err)
	if h := w.cfg.Hooks; h != nil {
		h.ClaimEnded(ctx, Claim{Rows: rows, Took: now.Sub(began), Err: err})
	}
}

// finalized reports a finalize of the rows idx of the batch (nil idx:
// a release of rows never started).
func (b *batch[K, R]) finalized(ctx context.Context, idx []int, owned []bool, began time.Time, err error) {
	now := b.w.called(began, err)
	h := b.w.cfg.Hooks
	if h == nil {
		return
	}
	f := Finalize{Took: now.Sub(began), Err: err}
	if err == nil {
		for j, ok := range owned {
			kind := KindRelease
			if idx != nil {
				kind = b.kinds[idx[j]]
			}
			switch {
			case !ok:
				f.Stale++
			case kind == KindComplete:
				f.Completed++
			case kind == KindFail:
				f.Failed++
			case kind == KindPark:
				f.Parked++
			default:
				f.Released++
			}
		}
	}
	h.FinalizeEnded(ctx, f)
}

// kinds is a batch's record of outcomes, when there are hooks to tell.
func (w *Worker[K, R]) kinds(n int) []Kind {
	if w.cfg.Hooks == nil {
		return nil
	}
	return make([]Kind, n)
}

// renewed reports a renewal.
func (b *batch[K, R]) renewed(ctx context.Context, owned []bool, began time.Time, err error) {
	now := b.w.called(began, err)
	h := b.w.cfg.Hooks
	if h == nil {
		return
	}
	r := Renew{Took: now.Sub(began), Err: err}
	if err == nil {
		for _, ok := range owned {
			if ok {
				r.Rows++
			} else {
				r.Lost++
			}
		}
	}
	h.RenewEnded(ctx, r)
}
