package memory

import (
	"context"

	"github.com/baton-go/baton/core/workrow"
)

var _ workrow.Waker = (*WorkRowStore[int64, struct{ ID int64 }])(nil)

// Listen implements workrow.Waker: every Insert signals the listeners that
// are idle, so a Worker over this store claims at once instead of at its
// next poll.
func (s *WorkRowStore[K, R]) Listen(ctx context.Context) (workrow.Listener, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return workRowListener{s.bus.listen()}, nil
}

type workRowListener struct{ l *listener }

// Idle implements workrow.Listener. An Insert is one step, so Idle never
// answers busy.
func (w workRowListener) Idle(ctx context.Context) (bool, error) {
	if err := w.l.setIdle(ctx, true); err != nil {
		return false, err
	}
	return true, nil
}

// Busy implements workrow.Listener.
func (w workRowListener) Busy(ctx context.Context) error { return w.l.setIdle(ctx, false) }

// Wait implements workrow.Listener.
func (w workRowListener) Wait(ctx context.Context) error {
	_, err := w.l.wait(ctx)
	return err
}

// Close implements workrow.Listener.
func (w workRowListener) Close() error { return w.l.close() }
