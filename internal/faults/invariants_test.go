package faults

import (
	"strings"
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

// The checks themselves, on scripted events: these are not fault
// scenarios, so .ci/run leaves them out of the negative controls
// (TestInvariant_ names them).

func deliveredAt(child string, c outbox.Cursor, at int64) event {
	return event{Kind: kindDelivered, Child: child, ID: c.ID.String(), XID: c.XID, At: at}
}

func TestInvariant_FirstDeliveryIsTheEarliestByClockNotByArrival(t *testing.T) {
	e1 := outbox.Cursor{XID: 10, ID: outbox.NewID()}
	e2 := outbox.Cursor{XID: 20, ID: outbox.NewID()}
	// d0 delivers e1 then e2 and dies; d1 takes over and repeats e1, and
	// its repeat reaches the collector before d0's delivery of e1.
	arrived := []event{
		deliveredAt("d1", e1, 300),
		deliveredAt("d0", e1, 100),
		deliveredAt("d0", e2, 200),
	}
	if v := checkFirstDeliveriesInOrder(arrived); len(v) != 0 {
		t.Fatalf("a repeat that arrived first was taken for the first delivery:\n%s", v)
	}
	firsts := firstDeliveries(arrived)
	if len(firsts) != 2 || firsts[0].Child != "d0" || firsts[0].ID != e1.ID.String() || firsts[1].ID != e2.ID.String() {
		t.Fatalf("first deliveries %+v, want d0's e1 then e2", firsts)
	}
}

func TestInvariant_FirstDeliveriesOutOfOrderAreReported(t *testing.T) {
	e1 := outbox.Cursor{XID: 10, ID: outbox.NewID()}
	e2 := outbox.Cursor{XID: 20, ID: outbox.NewID()}
	// e2 reached a processor before anyone delivered e1: whatever the
	// arrival order, that is a violation.
	arrived := []event{
		deliveredAt("d0", e1, 300),
		deliveredAt("d1", e2, 200),
		deliveredAt("d1", e1, 400),
	}
	v := checkFirstDeliveriesInOrder(arrived)
	if len(v) != 1 || !strings.Contains(v[0], e1.ID.String()) {
		t.Fatalf("violations %q, want one naming %s", v, e1.ID)
	}
}
