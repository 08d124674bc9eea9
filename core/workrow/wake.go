package workrow

import (
	"context"
	"errors"
	"time"
)

// Waker is what a Store implements, besides Store, when the inserts into
// its table can signal: a Worker's Run then listens while it finds
// nothing to claim, and claims as soon as a signalled insert commits,
// instead of at its next poll. It is optional; a Store without it, or a
// Worker with PollOnly, is polled every IdleDelay. The producer signals
// with the adapter's helper, in the transaction that inserts the rows.
//
// A producer signals only while some listener of the table is idle, so
// producers under load, whose rows busy workers claim anyway, pay nothing
// for it. Every listener of the table hears every signal.
//
// The rules a Waker keeps are numbered W16 to W20; conformance.RunWorkRows
// checks them when the harness's Store is a Waker and the harness can
// signal.
//
//   - W16 wake: once Idle has answered idle, the commit of a transaction
//     that signalled makes Wait return, and the rows it inserted can be
//     claimed.
//   - W17 rollback: a transaction that signalled and rolled back wakes
//     nobody.
//   - W18 in flight: a signal given before Idle, in a transaction that
//     commits after Idle answered, is never missed: Idle answers busy
//     while that transaction is open, or its commit makes Wait return.
//   - W19 own table: signals for another table (another schema of the
//     same database included) do not make Wait return.
//   - W20 busy: after Busy, Idle starts a new idle state, in which a
//     signalled commit makes Wait return again.
type Waker interface {
	// Listen opens a listening session, on a connection of its own where
	// the store is a database, and returns once it listens. The session
	// is not idle yet: call Idle.
	Listen(ctx context.Context) (Listener, error)
}

// Listener is one listening session of a Waker. It is used by one
// goroutine at a time.
type Listener interface {
	// Idle tells producers that this listener waits: from its answer on,
	// every commit that signals the table wakes it, until Wait returns a
	// signal (which may end the idle state again). It answers busy (false)
	// while a transaction that signalled before might commit unheard;
	// claim again shortly.
	Idle(ctx context.Context) (bool, error)

	// Busy ends the idle state: producers need not signal while the
	// caller works (the claim that followed Idle found rows). The next
	// Idle starts a new one.
	Busy(ctx context.Context) error

	// Wait blocks until at least one signal has arrived, ctx ends (an
	// error wrapping ctx's; the session stays usable) or the session
	// fails (then Close it and Listen again). It takes every signal that
	// has arrived.
	Wait(ctx context.Context) error

	// Close ends the session.
	Close() error
}

// The pace of a listening Run. While Idle answers busy (an insert in
// flight) the loop claims again after wakeRetryFirst, doubling up to
// wakeRetryCap (and never waiting longer than IdleDelay). After the
// session failed, Listen is tried again after listenRetryFirst, doubling
// up to ErrorDelay; meanwhile the loop polls every IdleDelay.
const (
	wakeRetryFirst   = time.Millisecond
	wakeRetryCap     = 20 * time.Millisecond
	listenRetryFirst = 100 * time.Millisecond
	// sessionTimeout bounds opening a session and asking it Idle.
	sessionTimeout = 10 * time.Second
)

// wake is one Run's listening.
type wake struct {
	log   func(msg string, args ...any)
	waker Waker    // nil: poll only
	l     Listener // nil: not listening now
	// idle says the session answered idle and has not been woken since.
	idle     bool
	retryAt  time.Time
	retryGap time.Duration
	errDelay time.Duration
	busyGap  time.Duration
}

func (w *Worker[K, R]) newWake() *wake {
	k := &wake{log: w.cfg.Logger.Warn, errDelay: w.cfg.ErrorDelay}
	if wk, ok := w.cfg.Store.(Waker); ok && !w.cfg.PollOnly {
		k.waker = wk
	}
	return k
}

func (k *wake) close() {
	if k.l != nil {
		_ = k.l.Close()
		k.l, k.idle = nil, false
	}
}

// claimed tells the loop found rows: the next idle period starts afresh,
// and a session left idle by the claim that followed Idle gives its idle
// state back, so producers stop signalling while the rows are worked.
func (k *wake) claimed(ctx context.Context) {
	k.busyGap = 0
	if k.l == nil || !k.idle {
		return
	}
	k.idle = false
	ictx, cancel := context.WithTimeout(ctx, sessionTimeout)
	err := k.l.Busy(ictx)
	cancel()
	if err != nil && ctx.Err() == nil {
		k.drop(err)
	}
}

func (k *wake) drop(err error) {
	k.log("baton: listening for work rows failed; polling every IdleDelay until listening again", "err", err, "retry_in", k.retryGap)
	k.close()
	k.retryAt = time.Now().Add(k.retryGap)
	k.retryGap = min(2*k.retryGap, k.errDelay)
}

func (k *wake) listener(ctx context.Context) Listener {
	if k.l != nil || time.Now().Before(k.retryAt) {
		return k.l
	}
	if k.retryGap == 0 {
		k.retryGap = min(listenRetryFirst, k.errDelay)
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
	k.l, k.retryGap = l, min(listenRetryFirst, k.errDelay)
	return l
}

// rest is the pause after a claim that found nothing: up to idle
// (IdleDelay), ended by a signal when listening. It returns false when ctx
// ended. A session newly idle claims once more at once, for the rows
// committed between the empty claim and the answer, which did not signal.
func (k *wake) rest(ctx context.Context, idle time.Duration) bool {
	if k.waker == nil {
		return waitFor(ctx, idle)
	}
	l := k.listener(ctx)
	if l == nil {
		return waitFor(ctx, min(idle, max(time.Until(k.retryAt), 0)))
	}
	if !k.idle {
		ictx, cancel := context.WithTimeout(ctx, sessionTimeout)
		ok, err := l.Idle(ictx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return false
		case err != nil:
			k.drop(err)
			return waitFor(ctx, min(idle, max(time.Until(k.retryAt), 0)))
		case !ok:
			if k.busyGap == 0 {
				k.busyGap = wakeRetryFirst
			} else {
				k.busyGap = min(2*k.busyGap, wakeRetryCap)
			}
			return waitFor(ctx, min(idle, k.busyGap))
		}
		k.idle, k.busyGap = true, 0
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, idle)
	err := l.Wait(wctx)
	timedOut := wctx.Err() != nil
	cancel()
	switch {
	case ctx.Err() != nil:
		return false
	case err == nil:
		k.idle = false
	case timedOut && errors.Is(err, context.DeadlineExceeded):
		// IdleDelay passed without a signal: poll, still idle.
	default:
		k.drop(err)
	}
	return true
}

// waitFor waits d; false when ctx ended first.
func waitFor(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
