package pgsql

import (
	"context"
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

// A Read whose buffer already holds more than the byte budget returns the
// entries up to the one that fills it (R19), and reaches no further than
// that entry, whatever its limit. RunOutboxLog checks the rule over a live
// stream, where how much is ready at once is the server's to decide; here
// the buffer is full before the Read, so the cut is certain.
func TestLogReader_ABufferPastTheByteBudgetIsCutThere(t *testing.T) {
	const size = outbox.MaxPayloadBytes - 1024
	fit := 0
	for total := 0; outbox.ScanHasRoom(total); total += size {
		fit++
	}
	r := &logReader{streaming: true}
	n := fit + 3
	for i := range n {
		p := outbox.LogPosition{LSN: 100, Seq: uint32(i + 1)}
		if i == n-1 {
			p = outbox.LogPosition{LSN: 200}
		}
		r.place(outbox.Entry{ID: outbox.NewID(), Lane: "a", Payload: make([]byte, size)}, p, outbox.LogPosition{})
	}

	b, err := r.Read(context.Background(), outbox.LogPosition{}, n, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(b.Entries) != fit {
		t.Fatalf("Read(limit %d) of a buffer of %d entries of %d bytes returned %d; want %d, up to the one that fills outbox.MaxScanBytes",
			n, n, size, len(b.Entries), fit)
	}
	if last := b.Entries[fit-1].Pos; b.Reached != last {
		t.Fatalf("Reached %s after a Read cut by the budget, want its last entry's position %s", b.Reached, last)
	}

	// The next Read, after that Reached, goes on with the rest (its limit
	// is what the buffer holds: this reader has no stream to read more).
	rest, err := r.Read(context.Background(), b.Reached, n-fit, 0)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(rest.Entries) != n-fit || rest.Entries[0].Pos.Compare(b.Reached) <= 0 {
		t.Fatalf("the Read after the cut returned %d entries from %s; want the %d left, after %s",
			len(rest.Entries), rest.Entries[0].Pos, n-fit, b.Reached)
	}
	if r.bufBytes != (n-fit)*size {
		t.Fatalf("the reader counts %d buffered payload bytes, want %d", r.bufBytes, (n-fit)*size)
	}
}
