package faults

import (
	"strings"
	"testing"
	"time"

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

func TestInvariant_ATermRepeatingMoreThanOnePassIsReported(t *testing.T) {
	var es []event
	deliver := func(child string, token uint64, at int64, ids []outbox.ID) {
		for i, id := range ids {
			es = append(es, event{Kind: kindDelivered, Child: child, ID: id.String(), Token: token, At: at + int64(i)})
		}
	}
	pass := func(n int) []outbox.ID {
		ids := make([]outbox.ID, n)
		for i := range ids {
			ids[i] = outbox.NewID()
		}
		return ids
	}
	// d0 (token 1) delivers two passes of 3, settles the first and dies;
	// d1 (token 2) repeats the second, as a takeover may; d2 (token 3)
	// repeats the second again and the first too, which was settled.
	first, second := pass(3), pass(3)
	deliver("d0", 1, 100, first)
	deliver("d0", 1, 200, second)
	deliver("d1", 2, 300, second)
	deliver("d1", 2, 400, pass(2))
	if v := checkRepeatsBoundedByOnePass(es, 3); len(v) != 0 {
		t.Fatalf("a takeover repeating one pass was reported:\n%s", v)
	}
	deliver("d2", 3, 500, append(second, first[0]))
	v := checkRepeatsBoundedByOnePass(es, 3)
	if len(v) != 1 || !strings.Contains(v[0], "token 3 delivered 4 entries again") {
		t.Fatalf("violations %q, want one for token 3's 4 repeats", v)
	}
	if got := repeatsPerTerm(es); got[1] != 0 || got[2] != 3 || got[3] != 4 {
		t.Fatalf("repeats per term %v, want none for token 1, 3 for token 2, 4 for token 3", got)
	}
}

func grantedAt(child string, token uint64, at int64) event {
	return event{Kind: kindGranted, Child: child, Token: token, Since: at - 1, At: at}
}

func deliveredUnder(child string, token uint64, at int64) event {
	return event{Kind: kindDelivered, Child: child, ID: outbox.NewID().String(), XID: 1, Token: token, At: at}
}

func TestInvariant_ADeliveryUnderATokenBelowAnEarlierGrantIsReported(t *testing.T) {
	late := deliveredUnder("d0", 5, 300)
	arrived := []event{
		grantedAt("d0", 5, 100),
		deliveredUnder("d0", 5, 150), // its own term
		grantedAt("d1", 6, 200),
		deliveredUnder("d1", 6, 250),
		// Sent before d1's grant, arrived after it: not deposed yet.
		deliveredUnder("d0", 5, 190),
		late, // sent after d1 was granted a greater token
		deliveredUnder("d1", 6, 400),
	}
	v := checkNoDeliveryByDeposedLeader(arrived)
	if len(v) != 1 || !strings.Contains(v[0], late.ID) || !strings.Contains(v[0], "token 5") || !strings.Contains(v[0], "d1 was granted token 6") {
		t.Fatalf("violations %q, want exactly one, naming %s, delivered under token 5 after d1 was granted 6", v, late.ID)
	}
}

func TestInvariant_TheDestinationRefusesATokenBelowTheHighestGrant(t *testing.T) {
	col := newCollector(t)
	d := newFencingDestination(t, col)
	run := func(child string, token uint64) deliveryRequest {
		return deliveryRequest{Child: child, Token: token, At: time.Now().UnixNano(), Entries: []deliveredEntry{{ID: outbox.NewID().String(), XID: 1}}}
	}
	if ans := d.admit(run("d0", 5)); !ans.Accepted {
		t.Fatalf("the first token was refused: %+v", ans)
	}
	col.mu.Lock()
	col.granted = 6 // d1's grant, reported
	col.mu.Unlock()
	if ans := d.admit(run("d0", 5)); ans.Accepted || ans.Highest != 6 {
		t.Fatalf("a token below a grant the destination knows of: %+v, want refused with 6", ans)
	}
	if ans := d.admit(run("d1", 6)); !ans.Accepted {
		t.Fatalf("the granted token was refused: %+v", ans)
	}
	col.mu.Lock()
	col.granted = 0 // as if no grant were known: the token accepted still fences
	col.mu.Unlock()
	if ans := d.admit(run("d0", 5)); ans.Accepted {
		t.Fatalf("a token below one the destination accepted was accepted: %+v", ans)
	}
	es := col.snapshot()
	_, deliveries, _, fenced := outboxCounts(es)
	if deliveries != 2 || fenced != 2 {
		t.Fatalf("%d deliveries and %d refused runs recorded, want 2 and 2", deliveries, fenced)
	}
}
