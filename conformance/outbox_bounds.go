package conformance

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// The size rules of the outbox: a payload is at most
// outbox.MaxPayloadBytes, and one Scan holds at most outbox.MaxScanBytes
// of payloads plus one.

// outboxBigPayload is a payload of exactly n bytes, one JSON string, whose
// text a jsonb column returns unchanged (so its size is the same in every
// store).
func outboxBigPayload(n int) []byte {
	return []byte(`"` + strings.Repeat("p", n-2) + `"`)
}

// walkAll scans from the start to the end, page after page, and returns
// every visible entry; a page may be cut short by the byte budget.
func (x *outboxT) walkAll() []outbox.Entry {
	x.t.Helper()
	var all []outbox.Entry
	cur := outbox.Cursor{}
	for {
		page := x.scan(cur, outboxScanAll)
		if len(page) == 0 {
			return all
		}
		all = append(all, page...)
		cur = page[len(page)-1].Cursor()
	}
}

// awaitWalk walks until every id in want is visible, or fails after
// outboxVisibilityWait.
func (x *outboxT) awaitWalk(want ...outbox.ID) []outbox.Entry {
	x.t.Helper()
	deadline := time.Now().Add(outboxVisibilityWait)
	for {
		got := x.walkAll()
		ids := entryIDs(got)
		missing := 0
		for _, id := range want {
			if !slices.Contains(ids, id) {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("%d of %d committed entries did not appear to Scan within %v", missing, len(want), outboxVisibilityWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// oversizedPayloads: a payload of outbox.MaxPayloadBytes is written; one
// byte more is refused with outbox.ErrInvalidEntry before anything is
// written, and the transaction stays usable.
func (s *outboxSuite) oversizedPayloads(t *testing.T) {
	x := s.start(t)
	largest := outbox.Entry{ID: outbox.NewID(), Lane: outboxLaneA, Payload: outboxBigPayload(outbox.MaxPayloadBytes)}
	tx := x.begin()
	tooLarge := outboxBigPayload(outbox.MaxPayloadBytes + 1)
	if err := tx.Enqueue(x.ctx, outbox.NewID(), outboxLaneA, tooLarge); !errors.Is(err, outbox.ErrInvalidEntry) {
		t.Errorf("Enqueue of a %d-byte payload: err = %v, want one wrapping outbox.ErrInvalidEntry", len(tooLarge), err)
	}
	x.enqueue(tx, largest)
	x.commit(tx)
	b := outboxEntry(outboxLaneBarrier, 0)
	x.commitTx(b)
	got := withoutBarriers(x.awaitWalk(largest.ID, b.ID))
	x.checkEntries("after the refused enqueue", got, largest)
}

// scanByteBudget: a scan stops after the entry whose payload brings the
// total to outbox.MaxScanBytes or more, whatever its limit; the next scan
// goes on from there, and the limit still cuts first when it is smaller.
func (s *outboxSuite) scanByteBudget(t *testing.T) {
	x := s.start(t)
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
