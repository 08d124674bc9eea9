package memory_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/outboxtest"
	locksmemory "github.com/baton-go/baton/locks/memory"
)

// FuzzDriver_NothingAProcessorReturnsStallsTheWalk drives the outbox
// driver over the memory store with any outcomes, reasons, errors and
// panics a processor may return. Plain go test runs the seed corpus; go
// test -fuzz explores further.
func FuzzDriver_NothingAProcessorReturnsStallsTheWalk(f *testing.F) {
	outboxtest.FuzzSeeds(f)
	f.Fuzz(func(t *testing.T, plan []byte) {
		synctest.Test(t, func(t *testing.T) {
			st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
			if err != nil {
				t.Fatal(err)
			}
			locks, err := locksmemory.NewProvider(locksmemory.Options{})
			if err != nil {
				t.Fatal(err)
			}
			outboxtest.NothingStallsTheWalk(t, outboxtest.WalkHarness{
				Store: st,
				Locks: locks,
				Delay: time.Second,
				Enqueue: func(ctx context.Context, lane string, n int) ([]outbox.ID, error) {
					tx, err := st.Begin(ctx)
					if err != nil {
						return nil, err
					}
					ids := make([]outbox.ID, n)
					for i := range ids {
						ids[i] = outbox.NewID()
						if err := tx.Enqueue(ctx, ids[i], lane, []byte(`{}`)); err != nil {
							return nil, err
						}
					}
					return ids, tx.Commit(ctx)
				},
			}, plan)
		})
	})
}
