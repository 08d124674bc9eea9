package memory

import (
	"context"

	"github.com/baton-go/baton/core/outbox"
)

var _ outbox.Waker = (*OutboxStore)(nil)

// Listen implements outbox.Waker: every commit of a transaction that
// enqueued signals the listeners that are idle, with its xid, so a driver
// over this store delivers at once instead of at its next poll.
func (s *OutboxStore) Listen(ctx context.Context) (outbox.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return outboxListener{s: s, l: s.bus.listen()}, nil
}

type outboxListener struct {
	s *OutboxStore
	l *listener
}

// Idle implements outbox.Listener. A memory commit is one step, so Idle
// never answers busy for a producer in flight; it answers not idle, with
// the newest entry, when there is one after the cursor to walk first.
// Commits hold the store's mutex while they signal, so none can slip
// between the read and the idle state.
func (o outboxListener) Idle(ctx context.Context, after outbox.Cursor) (bool, uint64, error) {
	o.s.mu.Lock()
	defer o.s.mu.Unlock()
	if n := len(o.s.entries); n > 0 && o.s.entries[n-1].Cursor().Compare(after) > 0 {
		return false, o.s.entries[n-1].XID, o.l.setIdle(ctx, false)
	}
	if err := o.l.setIdle(ctx, true); err != nil {
		return false, 0, err
	}
	return true, 0, nil
}

// Wait implements outbox.Listener.
func (o outboxListener) Wait(ctx context.Context) (uint64, error) { return o.l.wait(ctx) }

// Close implements outbox.Listener.
func (o outboxListener) Close() error { return o.l.close() }
