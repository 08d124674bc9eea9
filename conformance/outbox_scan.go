package conformance

import (
	"slices"
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

// Scanning: after the cursor, up to the limit and the byte budget.

func (s *outboxSuite) scanChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"ScanHonoursCursorAndLimit", s.scanCursorLimit},
		subtest[*outboxT]{"ScanStopsAtTheByteBudget", s.scanByteBudget},
	)
}

func (s *outboxSuite) scanCursorLimit(t *testing.T, x *outboxT) {
	first := entriesByID(outboxEntries(outboxLaneA, 5)...)
	second := entriesByID(outboxEntries(outboxLaneB, 2)...)
	x.commitTx(first...)
	x.commitTx(second...)
	all := x.await(outbox.Cursor{}, entryIDs(slices.Concat(first, second))...)
	want := slices.Concat(first, second)
	x.checkEntries("everything", all, want...)

	x.checkEntries("Scan(start, 3)", x.scan(outbox.Cursor{}, 3), want[:3]...)
	x.checkEntries("Scan(after the 3rd, 3)", x.scan(all[2].Cursor(), 3), want[3:6]...)
	x.checkEntries("Scan(after the 6th, 3)", x.scan(all[5].Cursor(), 3), want[6:]...)
	x.checkEntries("Scan(after the last, 10)", x.scan(all[6].Cursor(), 10))
	x.checkEntries("Scan(start, 1)", x.scan(outbox.Cursor{}, 1), want[0])
	// Cursors between entries: the order is (xid, id), compared as a pair.
	x.checkEntries("Scan(first xid, nil id)", x.scan(outbox.Cursor{XID: all[0].XID}, outboxScanAll), want...)
	maxID := outbox.ID{}
	for i := range maxID {
		maxID[i] = 0xff
	}
	x.checkEntries("Scan(first xid, largest id)", x.scan(outbox.Cursor{XID: all[0].XID, ID: maxID}, outboxScanAll), want[5:]...)
	x.checkEntries("Scan(second xid, nil id)", x.scan(outbox.Cursor{XID: all[5].XID}, outboxScanAll), want[5:]...)
	// A cursor at an id that is not (or no longer) there still orders.
	gap := outbox.Cursor{XID: all[1].XID, ID: all[1].ID}
	gap.ID[15]++
	if gap.ID.Compare(all[1].ID) > 0 && gap.ID.Compare(all[2].ID) < 0 {
		x.checkEntries("Scan(between the 2nd and 3rd)", x.scan(gap, outboxScanAll), want[2:]...)
	}
}

// scanByteBudget: a scan stops after the entry whose payload brings the
// total to outbox.MaxScanBytes or more, whatever its limit; the next scan
// goes on from there, and the limit still cuts first when it is smaller.
func (s *outboxSuite) scanByteBudget(t *testing.T, x *outboxT) {
	size := outbox.MaxPayloadBytes - 1024
	fit := 0 // entries a scan takes: until the total reaches the budget
	for total := 0; outbox.ScanHasRoom(total); total += size {
		fit++
	}
	es := make([]outbox.Entry, fit+3)
	for i := range es {
		es[i] = outbox.Entry{ID: outbox.NewID(), Lane: outboxLaneA, Payload: outboxBigPayload(size)}
	}
	es = entriesByID(es...)
	x.commitTx(es...)
	x.checkEntries("the whole walk, page by page", x.awaitWalk(entryIDs(es)...), es...)

	first := x.scan(outbox.Cursor{}, outboxScanAll)
	if len(first) != fit {
		t.Fatalf("Scan(start, %d) over %d entries of %d bytes returned %d entries (%d payload bytes); "+
			"want %d: the scan stops once its payloads reach outbox.MaxScanBytes (%d)",
			outboxScanAll, len(es), size, len(first), outbox.ScanBytes(first), fit, outbox.MaxScanBytes)
	}
	x.checkEntries("the first scan", first, es[:fit]...)
	x.checkEntries("the scan after it", x.scan(first[fit-1].Cursor(), outboxScanAll), es[fit:]...)
	x.checkEntries("a limit below the budget", x.scan(outbox.Cursor{}, 2), es[:2]...)
}
