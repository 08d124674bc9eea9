package outbox

import (
	"context"
	"errors"
	"time"
)

// Waker is what a Store implements, besides Store, when its producers
// signal their commits: the leading driver then listens and walks as soon
// as an entry commits, instead of at its next poll. It is optional; a
// Store without it, or a driver with PollOnly, is polled every IdleDelay.
//
// A producer signals only while a listener is idle (it asked with Idle and
// has not been woken since), so producers under load, whose entries the
// busy leader reads anyway, pay nothing for it.
//
// The rules a Waker keeps are numbered O37 to O42; conformance.
// RunOutboxStore checks them when the harness's Store is a Waker.
//
//   - O37 wake: once Idle has answered idle, the commit of a transaction
//     that enqueued makes Wait return, with that transaction's xid or a
//     larger one.
//   - O38 rollback: a transaction that rolls back wakes nobody; Wait
//     returns only the xids of transactions that committed.
//   - O39 in flight: an entry enqueued before Idle, in a transaction that
//     commits after Idle answered, is never missed: Idle answers busy
//     while that transaction is open, or its commit makes Wait return.
//   - O40 newest: Idle reports the largest xid of the entries committed
//     after the given cursor before it answered, whether or not they are
//     below the horizon yet, and then does not answer idle; with none, it
//     reports 0.
//   - O41 timeout: a Wait whose ctx ends first returns an error wrapping
//     ctx's, and the listener goes on working: a later commit makes the
//     next Wait return.
//   - O42 own channel: commits into another outbox (another schema of the
//     same database) do not make Wait return.
type Waker interface {
	// Listen opens a listening session, on a connection of its own where
	// the store is a database, and returns once it listens. The session
	// is not idle yet: call Idle.
	Listen(ctx context.Context) (Listener, error)
}

// Listener is one listening session of a Waker. It is used by one
// goroutine at a time.
type Listener interface {
	// Idle tells producers that this listener waits: from an idle answer
	// on, every commit of an entry signals it, until Wait returns a
	// signal (which may end the idle state again).
	//
	// It answers not idle in two cases. newest is the largest xid of the
	// entries after the cursor after that committed before the answer:
	// those will not signal, so the caller walks them first (and asks
	// again). Or newest is 0 and the answer is busy: an entry is being
	// enqueued by a transaction that might commit without signalling;
	// ask again shortly, after walking once more.
	Idle(ctx context.Context, after Cursor) (idle bool, newest uint64, err error)

	// Wait blocks until at least one signal has arrived, ctx ends (an
	// error wrapping ctx's; the session stays usable) or the session
	// fails (then Close it and Listen again). It takes every signal that
	// has arrived and returns the largest xid among them.
	Wait(ctx context.Context) (xid uint64, err error)

	// Close ends the session.
	Close() error
}

// The pace of the driver's listening. A woken pass that finds nothing,
// because the horizon has not passed the signalled xid yet (another
// transaction holding an xid is still open), scans again after
// wakeRetryFirst, then twice as long each time up to wakeRetryCap; a
// horizon pinned for longer than wakeRetryShare×wakeRetryCap is scanned
// every 1/wakeRetryShare of the time it has been pinned, and never less
// often than IdleDelay. So an entry behind a short transaction goes out
// within milliseconds of its end, and one behind a long transaction costs
// a few scans a second at most. The same pace applies while producers are
// in flight (Idle answered busy).
const (
	wakeRetryFirst = time.Millisecond
	wakeRetryCap   = 20 * time.Millisecond
	wakeRetryShare = 100
	// listenRetryFirst is the pause before listening again after the
	// session failed or could not be opened; it doubles up to ErrorDelay.
	listenRetryFirst = 100 * time.Millisecond
	// sessionTimeout bounds opening a session and asking it Idle: a
	// connection that hangs (a dropped route) must not stall the walk.
	sessionTimeout = 10 * time.Second
)

// retry is a growing pause: retryFirst, doubling up to retryCap, and
// beyond that a share of the time since the first.
type retry struct {
	gap   time.Duration
	since time.Time
}

func (r *retry) reset() { r.gap = 0 }

func (r *retry) next(limit time.Duration) time.Duration {
	now := time.Now()
	if r.gap == 0 {
		r.gap, r.since = wakeRetryFirst, now
	} else {
		r.gap = min(2*r.gap, max(wakeRetryCap, now.Sub(r.since)/wakeRetryShare))
	}
	return min(r.gap, limit)
}

// wake is one leadership term's listening: the listener, when the store
// can wake the driver, and what the signals said.
type wake struct {
	d     *Driver
	waker Waker    // nil: poll only
	l     Listener // nil: not listening now
	// retryAt is when to try listening again; retryGap the pause after
	// the next failure.
	retryAt  time.Time
	retryGap time.Duration
	// target is the newest xid known to have committed entries that the
	// walk has not reached: signalled, or reported by Idle.
	target uint64
	back   retry
	seen   Cursor // the cursor at the last rest, to tell progress
}

func (d *Driver) newWake() *wake {
	k := &wake{d: d}
	if w, ok := d.cfg.Store.(Waker); ok && !d.cfg.PollOnly {
		k.waker = w
	}
	return k
}

// close ends the term's listening session.
func (k *wake) close() {
	if k.l != nil {
		_ = k.l.Close()
		k.l = nil
	}
}

// drop closes a failed session; the walk polls until listening again.
func (k *wake) drop(err error) {
	k.d.cfg.Logger.Warn("outbox: listening for commits failed; polling every IdleDelay until listening again",
		"err", err, "retry_in", k.retryGap)
	k.close()
	k.retryAt = time.Now().Add(k.retryGap)
	k.retryGap = min(2*k.retryGap, k.d.cfg.ErrorDelay)
}

// listener returns the session, opening it when none is open and the
// retry pause has passed; nil when not listening.
func (k *wake) listener(ctx context.Context) Listener {
	if k.l != nil || time.Now().Before(k.retryAt) {
		return k.l
	}
	if k.retryGap == 0 {
		k.retryGap = min(listenRetryFirst, k.d.cfg.ErrorDelay)
	}
	lctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	l, err := k.waker.Listen(lctx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			k.drop(err)
		}
		return nil
	}
	k.l, k.retryGap = l, min(listenRetryFirst, k.d.cfg.ErrorDelay)
	return l
}

// untilRetry is the pause before trying to listen again (IdleDelay when
// not listening, or no store to listen to).
func (k *wake) untilRetry() time.Duration {
	if k.waker == nil {
		return k.d.cfg.IdleDelay
	}
	return max(time.Until(k.retryAt), 0)
}

// rest is the pause after a pass that asked for delay. After a pass that
// found the walk caught up (w.idle), it waits for a signal instead, up to
// delay (IdleDelay), unless an entry it knows of is still behind the
// horizon or being enqueued: then it scans again soon. false when ctx
// ended.
func (k *wake) rest(ctx context.Context, w *walker, delay time.Duration) bool {
	if k.waker == nil || !w.idle {
		return sleep(ctx, nil, delay)
	}
	if w.cur != k.seen {
		k.seen = w.cur
		k.back.reset()
	}
	if k.target > w.cur.XID {
		// Committed, signalled or reported, and not walked: the horizon
		// holds it back.
		return sleep(ctx, nil, k.back.next(delay))
	}
	k.target = 0
	l := k.listener(ctx)
	if l == nil {
		return sleep(ctx, nil, min(delay, k.untilRetry()))
	}
	ictx, cancel := context.WithTimeout(ctx, sessionTimeout)
	idle, newest, err := l.Idle(ictx, w.cur)
	cancel()
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		k.drop(err)
		return sleep(ctx, nil, min(delay, k.untilRetry()))
	case newest > w.cur.XID:
		k.target = newest
		return true // committed since the pass read: walk again at once
	case !idle:
		return sleep(ctx, nil, k.back.next(delay))
	}
	k.back.reset()
	wctx, cancel := context.WithTimeout(ctx, delay)
	xid, err := l.Wait(wctx)
	timedOut := wctx.Err() != nil
	cancel()
	switch {
	case ctx.Err() != nil:
		return false
	case err == nil:
		k.target = xid
	case timedOut && errors.Is(err, context.DeadlineExceeded):
		// IdleDelay passed without a signal: poll, still listening.
	default:
		k.drop(err)
	}
	return true
}
