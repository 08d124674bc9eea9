package conformance

import (
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// Retention: deleting delivered entries and replayed dead letters, in
// batches, never anything the walk or an operator still needs.

func (s *outboxSuite) retentionChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"DeleteDeliveredStaysAtOrBelowTheCursor", s.deleteDeliveredBounds},
		subtest[*outboxT]{"DeleteDeliveredHonoursTheWindow", s.deleteDeliveredWindow},
		subtest[*outboxT]{"DeleteRequeuedKeepsUnreplayedDeadLetters", s.deleteRequeued},
	)
}

// deleteDeliveredBounds: with entries below and above the cursor (which
// sits inside a transaction's entries), deletes take at most the batch
// size, only at or below the cursor, and run dry there.
func (s *outboxSuite) deleteDeliveredBounds(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	first := entriesByID(outboxEntries(outboxLaneA, 3)...)
	second := entriesByID(outboxEntries(outboxLaneB, 2)...)
	x.commitTx(first...)
	x.commitTx(second...)
	all := x.await(outbox.Cursor{}, entryIDs(slices.Concat(first, second))...)
	cur := all[1].Cursor()
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: cur})

	if n, err := h.Store.DeleteDelivered(ctx, outbox.Cursor{}, 0, 100); err != nil || n != 0 {
		t.Fatalf("DeleteDelivered(up to the start) = %d, %v; want 0", n, err)
	}
	below := 2 // entries at or below the cursor
	for i, want := range []int{1, 1, 0, 0} {
		n, err := h.Store.DeleteDelivered(ctx, cur, 0, 1)
		if err != nil {
			t.Fatalf("DeleteDelivered #%d: %v", i+1, err)
		}
		if n != want {
			t.Fatalf("DeleteDelivered #%d (limit 1, %d at or below the cursor) deleted %d, want %d", i+1, below, n, want)
		}
		below -= want
		left := x.scan(outbox.Cursor{}, outboxScanAll)
		above := 0
		for _, e := range left {
			if e.Cursor().Compare(cur) > 0 {
				above++
			}
		}
		if above != 3 || len(left) != 3+below {
			t.Fatalf("after DeleteDelivered #%d: %d entries left, %d above the cursor; want %d, of which 3 above", i+1, len(left), above, 3+below)
		}
	}
	x.checkEntries("after draining", x.scan(outbox.Cursor{}, outboxScanAll), all[2:]...)
	if n, err := h.Store.DeleteDelivered(ctx, cur, 0, 100); err != nil || n != 0 {
		t.Fatalf("DeleteDelivered after draining = %d, %v; want 0", n, err)
	}
	// Deleted entries leave no trace anywhere else.
	for _, e := range all[:2] {
		x.notDead(e.ID)
	}
}

func (s *outboxSuite) deleteDeliveredWindow(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 3)...)
	cur := es[2].Cursor()
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: cur})
	if n, err := h.Store.DeleteDelivered(ctx, cur, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("DeleteDelivered(window 1h) of entries just written = %d, %v; want 0", n, err)
	}
	x.checkEntries("after a delete within the window", x.scan(outbox.Cursor{}, outboxScanAll), es...)
	if n, err := h.Store.DeleteDelivered(ctx, cur, 0, 100); err != nil || n != 3 {
		t.Fatalf("DeleteDelivered(window 0) = %d, %v; want all 3", n, err)
	}
	x.checkEntries("after a delete past the window", x.scan(outbox.Cursor{}, outboxScanAll))
}

func (s *outboxSuite) deleteRequeued(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 4)...)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[3].Cursor(), Park: parkAll("parked", es...)})
	requeued := make([]outbox.ID, 3)
	for i := range requeued {
		requeued[i] = outbox.NewID()
		if err := h.Store.Requeue(ctx, es[i].ID, requeued[i]); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
	}
	unreplayed := es[3]

	if n, err := h.Store.DeleteRequeued(ctx, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("DeleteRequeued(window 1h) of dead letters just parked = %d, %v; want 0", n, err)
	}
	for i, want := range []int{2, 1, 0} {
		if n, err := h.Store.DeleteRequeued(ctx, 0, 2); err != nil || n != want {
			t.Fatalf("DeleteRequeued #%d (window 0, limit 2) = %d, %v; want %d", i+1, n, err, want)
		}
	}
	for _, e := range es[:3] {
		x.notDead(e.ID)
	}
	x.checkDead(x.getDead(unreplayed.ID), unreplayed, "parked "+unreplayed.ID.String(), true)
	if ds := x.listDead(outbox.ListOptions{}); len(ds) != 1 || ds[0].ID != unreplayed.ID {
		t.Fatalf("after deleting requeued dead letters ListDead = %v, want only the unreplayed %s", deadIDs(ds), unreplayed.ID)
	}
	// The entries they were requeued as are untouched.
	x.await(es[3].Cursor(), requeued...)
}
