package outboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
)

// CountingStore is a store with the backlog counts.
type CountingStore interface {
	outbox.Store
	outbox.Counter
}

// CheckCounter checks a store's backlog counts over an empty outbox that
// producer writes to: pending entries after a cursor and dead letters not
// requeued, each capped at the limit asked for.
func CheckCounter(t *testing.T, ctx context.Context, st CountingStore, producer conformance.OutboxProducer) {
	t.Helper()
	tx, err := producer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]outbox.ID, 5)
	for i := range ids {
		ids[i] = outbox.NewID()
		if err := tx.Enqueue(ctx, ids[i], "count", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	pending := func(after outbox.Cursor, limit, want int) {
		t.Helper()
		if n, err := st.CountPending(ctx, after, limit); err != nil || n != want {
			t.Errorf("CountPending(after %v, limit %d) = %d, %v; want %d", after, limit, n, err, want)
		}
	}
	dead := func(limit, want int) {
		t.Helper()
		if n, err := st.CountDead(ctx, limit); err != nil || n != want {
			t.Errorf("CountDead(limit %d) = %d, %v; want %d", limit, n, err, want)
		}
	}
	pending(outbox.Cursor{}, 100, 5)
	pending(outbox.Cursor{}, 3, 3)
	dead(100, 0)

	var entries []outbox.Entry
	for len(entries) < 5 { // the horizon passes them once older transactions elsewhere end
		es, err := st.Scan(ctx, outbox.Cursor{}, 5)
		if err != nil {
			t.Fatal(err)
		}
		entries = es
		select {
		case <-ctx.Done():
			t.Fatalf("the 5 committed entries never became visible: %v", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	park := []outbox.Parked{{Entry: entries[0], Reason: "one"}, {Entry: entries[1], Reason: "two"}}
	if err := st.Settle(ctx, outbox.Settlement{To: entries[1].Cursor(), Park: park}); err != nil {
		t.Fatal(err)
	}
	pending(entries[1].Cursor(), 100, 3)
	pending(entries[4].Cursor(), 100, 0)
	dead(100, 2)
	dead(1, 1)
	if err := st.Requeue(ctx, entries[0].ID, outbox.NewID()); err != nil {
		t.Fatal(err)
	}
	dead(100, 1)
	pending(entries[1].Cursor(), 100, 4) // the requeued entry went to the end

	if _, err := st.CountPending(ctx, outbox.Cursor{}, 0); err == nil {
		t.Error("CountPending with limit 0: no error")
	}
	if _, err := st.CountDead(ctx, 0); err == nil {
		t.Error("CountDead with limit 0: no error")
	}
}
