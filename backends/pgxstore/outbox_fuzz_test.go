package pgxstore

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/outboxtest"
	"github.com/baton-go/baton/internal/testenv"
	locksmemory "github.com/baton-go/baton/locks/memory"
)

// FuzzDriver_NothingAProcessorReturnsStallsTheWalk drives the outbox
// driver over PostgreSQL with any outcomes, reasons, errors and panics a
// processor may return: whatever it is, the settlement commits. Plain go
// test runs the seed corpus; go test -fuzz explores further. Every input
// gets the same schema, emptied first.
func FuzzDriver_NothingAProcessorReturnsStallsTheWalk(f *testing.F) {
	env := testenv.Postgres(f)
	ctx := context.Background()
	if err := Migrate(ctx, env.Pool, MigrateOptions{}); err != nil {
		f.Fatal(err)
	}
	st, err := NewOutboxStore(env.Pool, OutboxStoreOptions{})
	if err != nil {
		f.Fatal(err)
	}
	outboxtest.FuzzSeeds(f)
	f.Fuzz(func(t *testing.T, plan []byte) {
		if _, err := env.Pool.Exec(ctx, `TRUNCATE baton_outbox, baton_outbox_state, baton_outbox_dead`); err != nil {
			t.Fatal(err)
		}
		locks, err := locksmemory.NewProvider(locksmemory.Options{})
		if err != nil {
			t.Fatal(err)
		}
		outboxtest.NothingStallsTheWalk(t, outboxtest.WalkHarness{
			Store: st,
			Locks: locks,
			Delay: 5 * time.Millisecond,
			Enqueue: func(ctx context.Context, lane string, n int) ([]outbox.ID, error) {
				tx, err := env.Pool.Begin(ctx)
				if err != nil {
					return nil, err
				}
				defer tx.Rollback(context.WithoutCancel(ctx))
				ids := make([]outbox.ID, n)
				for i := range ids {
					ids[i] = outbox.NewID()
					if err := Enqueue(ctx, tx, ids[i], lane, []byte(`{}`)); err != nil {
						return nil, err
					}
				}
				return ids, tx.Commit(ctx)
			},
		}, plan)
	})
}
