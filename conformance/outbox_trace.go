package conformance

import (
	"maps"
	"slices"
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

// The producer's trace context: carried by Enqueue's context, kept with the
// entry, its dead letter and the entry a requeue makes of it.

// traceChecks come last: O44 was numbered after the bulk requeue.
func (s *outboxSuite) traceChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"TraceContextTravelsWithTheEntry", s.traceContext},
	)
}

// Trace contexts of the subtests: W3C headers, one with a tracestate that
// has the spaces and punctuation a tracestate may hold.
var (
	outboxTraceA = outbox.TraceContext{
		TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		TraceState:  "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7,a/b@c=x:y;z",
	}
	outboxTraceB = outbox.TraceContext{TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"}
	outboxTraceC = outbox.TraceContext{TraceParent: "00-11111111111111111111111111111111-2222222222222222-01", TraceState: "k=v"}
)

// traced is e enqueued with tc on its context.
func traced(e outbox.Entry, tc outbox.TraceContext) outbox.Entry {
	e.TraceContext = tc
	return e
}

// traceContext: an entry enqueued with a trace context on its context
// scans with it, exactly, and one without with none, even in the same
// transaction; the dead letters keep them, in GetDead and in listings; a
// requeue, single or bulk, passes them on (O44).
func (s *outboxSuite) traceContext(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	a := traced(outboxEntry(outboxLaneA, 1), outboxTraceA)
	b := outboxEntry(outboxLaneA, 2)
	c := traced(outboxEntry(outboxLaneB, 3), outboxTraceB)
	d := traced(outboxEntry(outboxLaneB, 4), outboxTraceC)
	tx := x.begin()
	x.enqueue(tx, a, b, c) // c after b: a store must not carry a's over to b
	x.commit(tx)
	x.commitTx(d)
	es := x.await(outbox.Cursor{}, a.ID, b.ID, c.ID, d.ID)
	want := append(entriesByID(a, b, c), d)
	x.checkEntries("the scan", es, want...) // checkEntries compares trace contexts too

	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[len(es)-1].Cursor(), Park: parkAll("parked", es...)})
	for _, e := range es {
		x.checkDead(x.getDead(e.ID), e, "parked "+e.ID.String(), true)
	}
	listed := x.listDead(outbox.ListOptions{})
	if len(listed) != len(es) {
		t.Fatalf("ListDead listed %d dead letters, want %d", len(listed), len(es))
	}
	for _, dl := range listed {
		x.checkDead(dl, x.find(es, dl.ID), "parked "+dl.ID.String(), false)
	}

	cur := x.cursor()
	single := outbox.NewID()
	if err := h.Store.Requeue(ctx, a.ID, single); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	r, err := h.Store.RequeueBatch(ctx, outbox.RequeueBatch{Filter: outbox.RequeueFilter{WaitingOnly: true}, Limit: 10})
	if err != nil {
		t.Fatalf("RequeueBatch: %v", err)
	}
	// again maps each new entry to the entry its dead letter was.
	again := map[outbox.ID]outbox.Entry{single: a}
	for _, q := range r.Requeued {
		i := slices.IndexFunc(want, func(e outbox.Entry) bool { return e.ID == q.ID })
		if i < 0 || q.RequeuedAs.IsNil() {
			t.Fatalf("RequeueBatch requeued %s as %s; want only the dead letters %v, each with a new id", q.ID, q.RequeuedAs, entryIDs(want))
		}
		again[q.RequeuedAs] = want[i]
	}
	if len(again) != len(es) {
		t.Fatalf("the requeues made %d entries, want %d", len(again), len(es))
	}
	got := x.await(cur, slices.Collect(maps.Keys(again))...)
	for _, e := range got {
		from, ok := again[e.ID]
		if !ok {
			continue
		}
		if e.TraceContext != from.TraceContext {
			t.Errorf("the requeue of %s has trace context %+v, want its dead letter's %+v", from.ID, e.TraceContext, from.TraceContext)
		}
	}
}
