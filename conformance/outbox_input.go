package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// What every method refuses: bad arguments, an ended context, a database
// without the tables.

func (s *outboxSuite) inputChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"InvalidArgumentsAreErrors", s.invalidArguments},
		subtest[*outboxT]{"CancelledContextIsRecognisable", s.cancelled},
		subtest[*outboxT]{"MissingTablesAreASchemaMismatch", s.unmigrated},
	)
}

func (s *outboxSuite) invalidArguments(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	for _, limit := range []int{0, -1} {
		if got, err := h.Store.Scan(ctx, outbox.Cursor{}, limit); err == nil {
			t.Errorf("Scan with limit %d returned %d entries and no error", limit, len(got))
		}
		if n, err := h.Store.DeleteDelivered(ctx, outbox.Cursor{XID: 1}, time.Hour, limit); err == nil {
			t.Errorf("DeleteDelivered with limit %d returned %d and no error", limit, n)
		}
		if n, err := h.Store.DeleteRequeued(ctx, time.Hour, limit); err == nil {
			t.Errorf("DeleteRequeued with limit %d returned %d and no error", limit, n)
		}
	}
	if n, err := h.Store.DeleteDelivered(ctx, outbox.Cursor{XID: 1}, -time.Second, 10); err == nil {
		t.Errorf("DeleteDelivered with a negative window returned %d and no error", n)
	}
	if n, err := h.Store.DeleteRequeued(ctx, -time.Second, 10); err == nil {
		t.Errorf("DeleteRequeued with a negative window returned %d and no error", n)
	}
	for _, limit := range []int{0, -1, outbox.MaxRequeueBatch + 1} {
		if r, err := h.Store.RequeueBatch(ctx, outbox.RequeueBatch{Limit: limit, DryRun: true}); err == nil {
			t.Errorf("RequeueBatch with limit %d took %d and no error", limit, r.Taken)
		}
	}
	for _, limit := range []int{-1, outbox.MaxListLimit + 1} {
		if ds, err := h.Store.ListDead(ctx, outbox.ListOptions{Limit: limit}); err == nil {
			t.Errorf("ListDead with limit %d returned %d and no error", limit, len(ds))
		}
	}
}

// cancelled: every method called with an ended context fails with an
// error that still wraps the context's.
func (s *outboxSuite) cancelled(t *testing.T, x *outboxT) {
	es := x.visible(outboxEntry(outboxLaneA, 1))
	st := x.h.Store
	tx := x.begin()
	checkCancelled(t, outboxCalls(st, x.h.Producer, es[0])...)
	if err := tx.Enqueue(cancelledCtx(), outbox.NewID(), outboxLaneA, []byte(`{}`)); !errors.Is(err, context.Canceled) {
		t.Errorf("Enqueue with a cancelled context: err = %v, want one wrapping context.Canceled", err)
	}
	x.sameState("after calls with a cancelled context", x.state(), map[string]string{})
	x.notDead(es[0].ID)
}

func cancelledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// unmigrated: over a database without the outbox tables, every method, and
// the producer's Enqueue, fails with the adapter's schema-mismatch error.
func (s *outboxSuite) unmigrated(t *testing.T, x *outboxT) {
	if x.h.Unmigrated == nil {
		t.Skip("the harness has no Unmigrated store (OutboxHarness.Unmigrated)")
	}
	u := x.h.Unmigrated(t)
	if u.Store == nil || u.Producer == nil {
		t.Fatal("conformance: Unmigrated returned no Store or no Producer")
	}
	e := outboxEntry(outboxLaneA, 1)
	e.XID = 1
	// NextXID reads only the transaction counter, which every database
	// has, tables or not.
	calls := slices.DeleteFunc(outboxCalls(u.Store, nil, e), func(c call) bool { return c.what == "NextXID" })
	calls = append(calls, call{"Enqueue", func(ctx context.Context) error {
		tx, err := u.Producer.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		return tx.Enqueue(ctx, e.ID, e.Lane, e.Payload)
	}})
	checkSchemaMismatch(t, x.h.SchemaMismatch, calls...)
}

// outboxCalls makes one call of every Store method, around entry e; with a
// producer, Begin too.
func outboxCalls(st outbox.Store, p OutboxProducer, e outbox.Entry) []call {
	calls := []call{
		{"Scan", func(ctx context.Context) error { return ignore(st.Scan(ctx, outbox.Cursor{}, 10)) }},
		{"Settle", func(ctx context.Context) error {
			return st.Settle(ctx, outbox.Settlement{To: e.Cursor(), Park: []outbox.Parked{{Entry: e, Reason: "r"}}})
		}},
		{"State", func(ctx context.Context) error { return ignore(st.State(ctx)) }},
		{"NextXID", func(ctx context.Context) error { return ignore(st.NextXID(ctx)) }},
		{"ListDead", func(ctx context.Context) error { return ignore(st.ListDead(ctx, outbox.ListOptions{})) }},
		{"GetDead", func(ctx context.Context) error { return ignore(st.GetDead(ctx, e.ID)) }},
		{"Requeue", func(ctx context.Context) error { return st.Requeue(ctx, e.ID, outbox.NewID()) }},
		{"RequeueBatch", func(ctx context.Context) error { return ignore(st.RequeueBatch(ctx, outbox.RequeueBatch{Limit: 10})) }},
		{"DeleteDelivered", func(ctx context.Context) error {
			return ignore(st.DeleteDelivered(ctx, e.Cursor(), time.Hour, 10))
		}},
		{"DeleteRequeued", func(ctx context.Context) error { return ignore(st.DeleteRequeued(ctx, time.Hour, 10)) }},
	}
	if p != nil {
		calls = append(calls, call{"Begin", func(ctx context.Context) error {
			tx, err := p.Begin(ctx)
			if err == nil {
				_ = tx.Rollback(context.WithoutCancel(ctx))
			}
			return err
		}})
	}
	return calls
}
