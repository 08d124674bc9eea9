package workrow

import (
	"context"
	"errors"
	"time"

	"github.com/baton-go/baton/core/internal/listen"
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

// wake is one Run's listening. The pace is listen's: while Idle answers
// busy (an insert in flight) the loop claims again after 1ms, doubling up
// to 20ms (and never waiting longer than IdleDelay); after the session
// failed, Listen is tried again after 100ms, doubling up to ErrorDelay,
// and meanwhile the loop polls every IdleDelay.
type wake struct {
	waker Waker // nil: poll only
	s     listen.Session[Listener]
	// idle says the session answered idle and has not been woken since.
	idle bool
	busy listen.Pause
}

func (w *Worker[K, R]) newWake() *wake {
	k := &wake{}
	if wk, ok := w.cfg.Store.(Waker); ok && !w.cfg.PollOnly {
		k.waker = wk
	}
	k.s = listen.Session[Listener]{
		Open: func(ctx context.Context) (Listener, error) { return k.waker.Listen(ctx) },
		Failed: func(err error, retryIn time.Duration) {
			k.idle = false
			w.cfg.Logger.Warn("baton: listening for work rows failed; polling every IdleDelay until listening again", "err", err, "retry_in", retryIn)
		},
		ErrorDelay: w.cfg.ErrorDelay,
	}
	return k
}

func (k *wake) close() { k.s.Close() }

// claimed tells the loop found rows: the next idle period starts afresh,
// and a session left idle by the claim that followed Idle gives its idle
// state back, so producers stop signalling while the rows are worked.
func (k *wake) claimed(ctx context.Context) {
	k.busy.Reset()
	l, ok := k.s.Current()
	if !ok || !k.idle {
		return
	}
	k.idle = false
	ictx, cancel := context.WithTimeout(ctx, listen.Timeout)
	err := l.Busy(ictx)
	cancel()
	if err != nil && ctx.Err() == nil {
		k.s.Drop(err)
	}
}

// rest is the pause after a claim that found nothing: up to idle
// (IdleDelay), ended by a signal when listening. It returns false when ctx
// ended. A session newly idle claims once more at once, for the rows
// committed between the empty claim and the answer, which did not signal.
func (k *wake) rest(ctx context.Context, idle time.Duration) bool {
	if k.waker == nil {
		return listen.Sleep(ctx, idle)
	}
	l, ok := k.s.Get(ctx)
	if !ok {
		return listen.Sleep(ctx, min(idle, k.s.UntilRetry()))
	}
	if !k.idle {
		ictx, cancel := context.WithTimeout(ctx, listen.Timeout)
		ok, err := l.Idle(ictx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return false
		case err != nil:
			k.s.Drop(err)
			return listen.Sleep(ctx, min(idle, k.s.UntilRetry()))
		case !ok:
			return listen.Sleep(ctx, k.busy.Next(idle))
		}
		k.idle = true
		k.busy.Reset()
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
		k.s.Drop(err)
	}
	return true
}
