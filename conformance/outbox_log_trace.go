package conformance

import (
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

// The producer's trace context, read from the log and parked from it.

// logTraceChecks come last: R18 was numbered after the inputs' rules.
func (s *outboxLogSuite) logTraceChecks() []check {
	return area(s.start,
		subtest[*logT]{"LogEntriesCarryTheirTraceContext", testLogTraceContext},
	)
}

// testLogTraceContext: R18. Two entries of one transaction, one traced and
// one not, and a traced one of another: each comes out with its own, and
// the dead letter SettleLog parks keeps it.
func testLogTraceContext(t *testing.T, x *logT) {
	r := x.open(1)
	a := traced(outboxEntry(outboxLaneA, 1), outboxTraceA)
	b := outboxEntry(outboxLaneA, 2)
	c := traced(outboxEntry(outboxLaneB, 3), outboxTraceB)
	tx := x.begin()
	x.enqueue(tx, a, b)
	x.commit(tx)
	x.commitTx(c)
	got, _ := x.readN(r, r.Start(), 3)
	want := []outbox.Entry{a, b, c}
	for i, e := range got {
		if e.ID != want[i].ID {
			t.Fatalf("came out %v, want %v", logIDs(got), entryIDs(want))
		}
		if e.TraceContext != want[i].TraceContext {
			t.Errorf("entry %s came with trace context %+v, want %+v", e.ID, e.TraceContext, want[i].TraceContext)
		}
	}
	x.settleLog(outbox.LogSettlement{To: got[2].Pos, Park: parkAll("parked", got[0].Entry, got[1].Entry, got[2].Entry)})
	for _, e := range want {
		if d := x.getDead(e.ID); d.TraceContext != e.TraceContext {
			t.Errorf("the dead letter of %s has trace context %+v, want %+v", e.ID, d.TraceContext, e.TraceContext)
		}
	}
}
