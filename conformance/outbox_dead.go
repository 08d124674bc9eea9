package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// Dead letters: listing, reading, and requeueing.

func (s *outboxSuite) deadChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"DeadLettersListWithoutPayloadsAndPaginate", s.listDead},
		subtest[*outboxT]{"UnknownDeadLetterIsNotFound", s.unknownDead},
		subtest[*outboxT]{"RequeueAppendsAFreshEntry", s.requeue},
		subtest[*outboxT]{"RequeueTwiceIsAlreadyRequeued", s.requeueTwice},
		subtest[*outboxT]{"RequeueRejectsUsedOrNilIDs", s.requeueBadIDs},
	)
}

// listDead: dead letters list newest parked first (then by id), without
// payloads, and page with Before.
func (s *outboxSuite) listDead(t *testing.T, x *outboxT) {
	es := entriesByID(outboxEntries(outboxLaneA, 5)...)
	x.commitTx(es...)
	es = x.await(outbox.Cursor{}, entryIDs(es)...)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[1].Cursor(), Park: parkAll("early", es[0], es[1])})
	time.Sleep(20 * time.Millisecond) // a later parked_at, at any clock resolution a store is likely to have
	x.settle(outbox.Settlement{From: es[1].Cursor(), To: es[4].Cursor(), Park: parkAll("late", es[2], es[3], es[4])})

	all := x.listDead(outbox.ListOptions{})
	if len(all) != 5 {
		t.Fatalf("ListDead returned %d dead letters, want 5", len(all))
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.ParkedAt.Before(b.ParkedAt) || a.ParkedAt.Equal(b.ParkedAt) && a.ID.Compare(b.ID) >= 0 {
			t.Fatalf("ListDead order: %s parked at %v before %s parked at %v; want newest parked first, then by id", a.ID, a.ParkedAt, b.ID, b.ParkedAt)
		}
	}
	late, early := deadIDs(all[:3]), deadIDs(all[3:])
	slices.SortFunc(late, outbox.ID.Compare)
	slices.SortFunc(early, outbox.ID.Compare)
	if !slices.Equal(late, entryIDs(es[2:])) || !slices.Equal(early, entryIDs(es[:2])) {
		t.Fatalf("ListDead listed %v; want the three parked last (%v) before the two parked first (%v)", deadIDs(all), entryIDs(es[2:]), entryIDs(es[:2]))
	}
	for _, d := range all {
		e := x.find(es, d.ID)
		reason := "late " + e.ID.String()
		if slices.Contains(early, e.ID) {
			reason = "early " + e.ID.String()
		}
		x.checkDead(d, e, reason, false)
	}

	var paged []outbox.DeadLetter
	opts := outbox.ListOptions{Limit: 2}
	for range 4 {
		page := x.listDead(opts)
		paged = append(paged, page...)
		if len(page) == 0 {
			break
		}
		opts.Before = page[len(page)-1].ID
	}
	if !slices.Equal(deadIDs(paged), deadIDs(all)) {
		t.Fatalf("pages of 2 listed %v; want the full listing %v", deadIDs(paged), deadIDs(all))
	}
	if rest := x.listDead(outbox.ListOptions{Before: all[4].ID}); len(rest) != 0 {
		t.Fatalf("ListDead after the oldest dead letter returned %d", len(rest))
	}
	if one := x.listDead(outbox.ListOptions{Limit: 1, Before: all[1].ID}); len(one) != 1 || one[0].ID != all[2].ID {
		t.Fatalf("ListDead(limit 1, before the 2nd) = %v, want the 3rd, %s", deadIDs(one), all[2].ID)
	}
	if got := x.listDead(outbox.ListOptions{Limit: outbox.MaxListLimit}); len(got) != 5 {
		t.Fatalf("ListDead(limit MaxListLimit) returned %d, want 5", len(got))
	}
}

func (s *outboxSuite) unknownDead(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntry(outboxLaneA, 1))
	x.notDead(outbox.NewID())
	x.notDead(es[0].ID) // in the outbox, not dead
	if err := h.Store.Requeue(ctx, outbox.NewID(), outbox.NewID()); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Requeue of an unknown dead letter: err = %v, want one wrapping outbox.ErrNotFound", err)
	}
	if err := h.Store.Requeue(ctx, es[0].ID, outbox.NewID()); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Requeue of an entry that is not a dead letter: err = %v, want one wrapping outbox.ErrNotFound", err)
	}
	got := withoutBarriers(x.barrier())
	x.checkEntries("after requeues of unknown dead letters", got, es...)
}

// requeue: the requeued entry gets the new id and goes to the end of the
// walk, after everything committed before; the dead letter records it.
func (s *outboxSuite) requeue(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.parkFirst(outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2))
	cur := x.cursor()
	newID := outbox.NewID()
	if err := h.Store.Requeue(ctx, es[0].ID, newID); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	got := x.await(cur, newID)
	again := es[0]
	again.ID = newID
	x.checkEntries("after the requeue", got, es[1], again)
	if got[1].XID <= es[1].XID {
		t.Errorf("the requeued entry has xid %d, not above the earlier entry's %d; it must go to the end of the order", got[1].XID, es[1].XID)
	}
	d := x.getDead(es[0].ID)
	x.checkDead(d, es[0], "parked "+es[0].ID.String(), true)
	if d.RequeuedAt.IsZero() || d.RequeuedAt.Before(d.ParkedAt) {
		t.Errorf("the dead letter's RequeuedAt is %v, want the requeue time (parked at %v)", d.RequeuedAt, d.ParkedAt)
	}
	if d.RequeuedAs != newID {
		t.Errorf("the dead letter's RequeuedAs is %s, want the new id %s", d.RequeuedAs, newID)
	}
	listed := x.listDead(outbox.ListOptions{})
	if len(listed) != 1 || listed[0].RequeuedAs != newID {
		t.Errorf("ListDead = %+v, want the one dead letter with RequeuedAs %s", listed, newID)
	}
	// A later entry walks after the requeued one.
	later := outboxEntry(outboxLaneA, 3)
	x.commitTx(later)
	got = x.await(cur, later.ID)
	x.checkEntries("after a later commit", got, es[1], again, later)
}

func (s *outboxSuite) requeueTwice(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.parkFirst(outboxEntry(outboxLaneA, 1))
	first, second := outbox.NewID(), outbox.NewID()
	if err := h.Store.Requeue(ctx, es[0].ID, first); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if err := h.Store.Requeue(ctx, es[0].ID, second); !errors.Is(err, outbox.ErrAlreadyRequeued) {
		t.Fatalf("a second Requeue: err = %v, want one wrapping outbox.ErrAlreadyRequeued", err)
	}
	if d := x.getDead(es[0].ID); d.RequeuedAs != first {
		t.Errorf("after a refused second requeue, RequeuedAs is %s, want the first requeue's %s", d.RequeuedAs, first)
	}
	got := x.beyond(withoutBarriers(x.barrier()))
	again := es[0]
	again.ID = first
	x.checkEntries("after requeueing twice", got, again)
}

func (s *outboxSuite) requeueBadIDs(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.parkFirst(outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2), outboxEntry(outboxLaneA, 3))
	// A second dead letter, whose id is as used as any.
	x.settle(outbox.Settlement{From: es[0].Cursor(), To: es[1].Cursor(), Park: parkAll("parked", es[1])})
	for _, tc := range []struct {
		name  string
		newID outbox.ID
	}{
		{"the nil id", outbox.NilID},
		{"the id of an entry in the outbox", es[2].ID},
		{"the dead letter's own id", es[0].ID},
		{"the id of another dead letter", es[1].ID},
	} {
		if err := h.Store.Requeue(ctx, es[0].ID, tc.newID); err == nil {
			t.Errorf("Requeue with %s as the new id succeeded", tc.name)
		}
	}
	if d := x.getDead(es[0].ID); !d.RequeuedAs.IsNil() {
		t.Fatalf("refused requeues recorded RequeuedAs %s", d.RequeuedAs)
	}
	got := x.beyond(withoutBarriers(x.barrier()))
	x.checkEntries("after refused requeues", got, es[2])

	// Nothing was used up: a good id still works.
	newID := outbox.NewID()
	if err := h.Store.Requeue(ctx, es[0].ID, newID); err != nil {
		t.Fatalf("Requeue after refused ones: %v", err)
	}
	x.await(outbox.Cursor{}, newID)
}

// bulkChecks come last: O43 was numbered after the wake-ups' rules.
func (s *outboxSuite) bulkChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"BulkRequeueKeepsTheOrderAndRefusesRequeued", s.requeueBatch},
	)
}

// requeueBatch: a bulk requeue takes the dead letters the filter matches
// in (xid, id) order, refuses and counts those requeued before, and its
// new entries walk in the order of their dead letters (O43).
func (s *outboxSuite) requeueBatch(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	created := []outbox.Entry{
		outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneA, 2), outboxEntry(outboxLaneB, 3),
		outboxEntry(outboxLaneA, 4), outboxEntry(outboxLaneA, 5),
	}
	// Committed newest id first, so the walk's (xid, id) order is not the
	// ids' order: a store that took them by id would replay them reversed.
	committed := slices.Clone(created)
	slices.Reverse(committed)
	es := x.visible(committed...)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[len(es)-1].Cursor(), Park: parkAll("parked", es...)})
	var laneA []outbox.Entry
	for _, e := range es {
		if e.Lane == outboxLaneA {
			laneA = append(laneA, e)
		}
	}
	single := outbox.NewID()
	if err := h.Store.Requeue(ctx, laneA[1].ID, single); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	start := x.cursor()
	batch := func(b outbox.RequeueBatch) outbox.RequeueBatchResult {
		t.Helper()
		r, err := h.Store.RequeueBatch(ctx, b)
		if err != nil {
			t.Fatalf("RequeueBatch(%+v): %v", b, err)
		}
		return r
	}
	took := func(what string, r outbox.RequeueBatchResult, requeued []outbox.Entry, before int, last outbox.Entry, dry bool) {
		t.Helper()
		var ids []outbox.ID
		for _, q := range r.Requeued {
			ids = append(ids, q.ID)
			if dry != q.RequeuedAs.IsNil() {
				t.Errorf("%s: dead letter %s has RequeuedAs %s (dry run %v)", what, q.ID, q.RequeuedAs, dry)
			}
		}
		if !slices.Equal(ids, entryIDs(requeued)) {
			t.Fatalf("%s: requeued %v, want %v, in (xid, id) order", what, ids, entryIDs(requeued))
		}
		if r.AlreadyRequeued != before || r.Taken != len(requeued)+before || r.Last != last.Cursor() {
			t.Fatalf("%s: AlreadyRequeued %d, Taken %d, Last %v; want %d, %d, %v", what, r.AlreadyRequeued, r.Taken, cursorText(r.Last), before, len(requeued)+before, cursorText(last.Cursor()))
		}
	}

	laneFilter := outbox.RequeueFilter{Lane: outboxLaneA}
	dry := batch(outbox.RequeueBatch{Filter: laneFilter, Limit: 10, DryRun: true})
	took("a dry run of lane a", dry, []outbox.Entry{laneA[0], laneA[2], laneA[3]}, 1, laneA[3], true)
	if got := x.beyond(withoutBarriers(x.barrier())); !slices.Equal(entryIDs(got), []outbox.ID{single}) {
		t.Fatalf("after a dry run the outbox holds %v beyond the cursor, want only the single requeue's %s", entryIDs(got), single)
	}
	if d := x.getDead(laneA[0].ID); !d.RequeuedAs.IsNil() {
		t.Fatalf("a dry run recorded RequeuedAs %s", d.RequeuedAs)
	}
	d0 := x.getDead(es[0].ID)
	if r := batch(outbox.RequeueBatch{Filter: outbox.RequeueFilter{ParkedBefore: d0.ParkedAt}, Limit: 10, DryRun: true}); r.Taken != 0 {
		t.Fatalf("parked before %v (when all were parked) took %d", d0.ParkedAt, r.Taken)
	}
	if r := batch(outbox.RequeueBatch{Filter: outbox.RequeueFilter{ParkedSince: d0.ParkedAt, ParkedBefore: d0.ParkedAt.Add(time.Hour)}, Limit: 10, DryRun: true}); r.Taken != len(es) {
		t.Fatalf("parked since %v (when all were parked) took %d, want %d", d0.ParkedAt, r.Taken, len(es))
	}

	first := batch(outbox.RequeueBatch{Filter: laneFilter, Limit: 2})
	took("the first batch of lane a", first, []outbox.Entry{laneA[0]}, 1, laneA[1], false)
	second := batch(outbox.RequeueBatch{Filter: laneFilter, After: first.Last, Limit: 2})
	took("the second batch of lane a", second, []outbox.Entry{laneA[2], laneA[3]}, 0, laneA[3], false)
	if r := batch(outbox.RequeueBatch{Filter: laneFilter, After: second.Last, Limit: 2}); r.Taken != 0 || !r.Last.IsZero() {
		t.Fatalf("a batch after the last one took %d (Last %v)", r.Taken, cursorText(r.Last))
	}
	waiting := batch(outbox.RequeueBatch{Filter: outbox.RequeueFilter{WaitingOnly: true}, Limit: 10})
	var laneB outbox.Entry
	for _, e := range es {
		if e.Lane == outboxLaneB {
			laneB = e
		}
	}
	took("waiting only, any lane", waiting, []outbox.Entry{laneB}, 0, laneB, false)

	// The replay walks in the dead letters' order, each batch after the
	// one before, with the dead letters' lanes and payloads.
	var want []outbox.Entry
	e1 := laneA[1]
	e1.ID = single
	want = append(want, e1)
	replay := func(orig outbox.Entry, as outbox.ID) {
		e := orig
		e.ID = as
		want = append(want, e)
		if d := x.getDead(orig.ID); d.RequeuedAs != as || d.RequeuedAt.IsZero() {
			t.Errorf("dead letter %s records RequeuedAs %s at %v, want %s", orig.ID, d.RequeuedAs, d.RequeuedAt, as)
		}
	}
	replay(laneA[0], first.Requeued[0].RequeuedAs)
	replay(laneA[2], second.Requeued[0].RequeuedAs)
	replay(laneA[3], second.Requeued[1].RequeuedAs)
	replay(laneB, waiting.Requeued[0].RequeuedAs)
	got := withoutBarriers(x.await(start, entryIDs(want)...))
	x.checkEntries("the replayed entries", got, want...)
}
