package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/baton-go/baton/core/internal/listen"
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

// streamPause is the pause before walking again when entries committed
// during a pass that delivered: under a steady stream of commits, the
// leader walks every few milliseconds in batches, rather than in a loop of
// passes of one entry each, which costs the producers' database time.
const streamPause = 2 * time.Millisecond

// wake is one leadership term's listening: the session, when the store
// can wake the driver, and what the signals said. The pace of its retries
// and rescans is listen's: a woken pass that finds nothing, because the
// horizon has not passed the signalled xid yet (another transaction
// holding an xid is still open), scans again after 1ms, doubling up to
// 20ms, and a horizon pinned for longer than 2s is scanned every
// hundredth of the time it has been pinned, never less often than
// IdleDelay; the same pace holds while producers are in flight (Idle
// answered busy).
type wake struct {
	waker Waker // nil: poll only
	s     listen.Session[Listener]
	// target is the newest xid known to have committed entries that the
	// walk has not reached: signalled, or reported by Idle.
	target uint64
	back   listen.Pause
	seen   Cursor // the cursor at the last rest, to tell progress
}

func (d *Driver) newWake() *wake {
	k := &wake{}
	// The log's reader waits on the stream itself: only the walk listens.
	if w, ok := d.cfg.Store.(Waker); ok && !d.cfg.PollOnly && d.cfg.Log == nil {
		k.waker = w
	}
	k.s = listen.Session[Listener]{
		Open: func(ctx context.Context) (Listener, error) { return k.waker.Listen(ctx) },
		Failed: func(err error, retryIn time.Duration) {
			d.cfg.Logger.Warn("outbox: listening for commits failed; polling every IdleDelay until listening again",
				"err", err, "retry_in", retryIn)
		},
		ErrorDelay: d.cfg.ErrorDelay,
	}
	return k
}

// close ends the term's listening session.
func (k *wake) close() { k.s.Close() }

// rest is the pause after a pass that asked for delay. After a pass that
// found the walk caught up (w.idle), it waits for a signal instead, up to
// delay (IdleDelay), unless an entry it knows of is still behind the
// horizon or being enqueued: then it scans again soon. false when ctx
// ended.
func (k *wake) rest(ctx context.Context, w *walker, delay time.Duration) bool {
	cur, walking := w.walkCursor()
	if k.waker == nil || !w.idle || !walking {
		return sleep(ctx, nil, delay)
	}
	progress := cur != k.seen
	if progress {
		k.seen = cur
		k.back.Reset()
	}
	if k.target > cur.XID {
		// Committed, signalled or reported, and not walked: the horizon
		// holds it back.
		return sleep(ctx, nil, k.back.Next(delay))
	}
	k.target = 0
	l, ok := k.s.Get(ctx)
	if !ok {
		return sleep(ctx, nil, min(delay, k.s.UntilRetry()))
	}
	ictx, cancel := context.WithTimeout(ctx, listen.Timeout)
	idle, newest, err := l.Idle(ictx, cur)
	cancel()
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		k.s.Drop(err)
		return sleep(ctx, nil, min(delay, k.s.UntilRetry()))
	case newest > cur.XID:
		// Committed since the pass read: walk again, at once after a
		// pass that found nothing; after one that delivered, a stream is
		// flowing, and a moment's pause lets the next pass take more.
		k.target = newest
		if progress {
			return sleep(ctx, nil, min(delay, streamPause))
		}
		return true
	case !idle:
		return sleep(ctx, nil, k.back.Next(delay))
	}
	k.back.Reset()
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
		k.s.Drop(err)
	}
	return true
}

// walkCursor is the walk's cursor, when this term walks the table.
func (w *walker) walkCursor() (Cursor, bool) {
	wf, ok := w.f.(*walkFeed)
	if !ok {
		return Cursor{}, false
	}
	return wf.cur, true
}
