package memory

import (
	"context"
	"fmt"

	"github.com/baton-go/baton/core/outbox"
)

var _ outbox.Counter = (*OutboxStore)(nil)

// CountPending implements outbox.Counter: the committed entries after the
// cursor, at most limit.
func (s *OutboxStore) CountPending(ctx context.Context, after outbox.Cursor, limit int) (int, error) {
	if err := countArgs(ctx, "count pending entries", limit); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return min(len(s.entries)-s.after(after), limit), nil
}

// CountDead implements outbox.Counter: the dead letters not requeued, at
// most limit.
func (s *OutboxStore) CountDead(ctx context.Context, limit int) (int, error) {
	if err := countArgs(ctx, "count dead letters", limit); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, d := range s.dead {
		if d.RequeuedAs.IsNil() && n < limit {
			n++
		}
	}
	return n, nil
}

func countArgs(ctx context.Context, op string, limit int) error {
	if limit < 1 {
		return fmt.Errorf("baton/memory: %s: limit is %d; it must be at least 1", op, limit)
	}
	return ctx.Err()
}
