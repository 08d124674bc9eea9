package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// The outbox subtests' entries and their checked operations.

// Lanes of the subtests; each subtest has an outbox of its own.
const (
	outboxLaneA = "conformance.a"
	outboxLaneB = "conformance.b"
	// outboxLaneBarrier is the lane of barrier entries.
	outboxLaneBarrier = "conformance.barrier"
)

// outboxEntry makes an entry to enqueue. Its payload has spaces and a key
// order that a jsonb column normalises, so the suite compares payloads as
// JSON values, never as bytes.
func outboxEntry(lane string, n int) outbox.Entry {
	return outbox.Entry{
		ID:      outbox.NewID(),
		Lane:    lane,
		Payload: json.RawMessage(fmt.Sprintf(`{ "z": %q,  "n": %d, "nested": {"list": [1, 2, 3]} }`, lane, n)),
	}
}

func outboxEntries(lane string, n int) []outbox.Entry {
	es := make([]outbox.Entry, n)
	for i := range es {
		es[i] = outboxEntry(lane, i)
	}
	return es
}

// entriesByID returns es sorted by id, as one transaction's entries walk.
func entriesByID(es ...outbox.Entry) []outbox.Entry {
	out := slices.Clone(es)
	slices.SortFunc(out, func(a, b outbox.Entry) int { return a.ID.Compare(b.ID) })
	return out
}

func entryIDs(es []outbox.Entry) []outbox.ID {
	out := make([]outbox.ID, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func deadIDs(ds []outbox.DeadLetter) []outbox.ID {
	out := make([]outbox.ID, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func samePayload(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// beyond keeps the entries of a scan that lie after the stored cursor:
// what the walk has still to deliver. A store may keep parked entries
// below the cursor until retention, as delivered ones.
func (x *outboxT) beyond(es []outbox.Entry) []outbox.Entry {
	x.t.Helper()
	cur := x.cursor()
	return slices.DeleteFunc(slices.Clone(es), func(e outbox.Entry) bool { return e.Cursor().Compare(cur) <= 0 })
}

// withoutBarriers drops barrier entries from a scan.
func withoutBarriers(es []outbox.Entry) []outbox.Entry {
	return slices.DeleteFunc(slices.Clone(es), func(e outbox.Entry) bool { return e.Lane == outboxLaneBarrier })
}

func stateValue(s string) *string { return &s }

// cursorText prints a cursor as (xid, id).
func cursorText(c outbox.Cursor) string { return fmt.Sprintf("(%d, %s)", c.XID, c.ID) }

// parkAll parks es, each with the reason followed by its id.
func parkAll(reason string, es ...outbox.Entry) []outbox.Parked {
	out := make([]outbox.Parked, len(es))
	for i, e := range es {
		out[i] = outbox.Parked{Entry: e, Reason: reason + " " + e.ID.String()}
	}
	return out
}

func (x *outboxT) begin() OutboxTx {
	x.t.Helper()
	tx, err := x.h.Producer.Begin(x.ctx)
	if err != nil {
		x.t.Fatalf("Begin: %v", err)
	}
	if tx == nil {
		x.t.Fatal("Begin returned a nil transaction and no error")
	}
	x.t.Cleanup(func() {
		// Never leave a transaction open: on PostgreSQL it would hold the
		// horizon back for every test on the server. After Commit or
		// Rollback this fails, and nobody needs to hear about it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(ctx)
	})
	return tx
}

// enqueue enqueues es in tx, each with its TraceContext on the context
// when it has one.
func (x *outboxT) enqueue(tx OutboxTx, es ...outbox.Entry) {
	x.t.Helper()
	for _, e := range es {
		ctx := x.ctx
		if !e.TraceContext.IsZero() {
			ctx = outbox.WithTraceContext(ctx, e.TraceContext)
		}
		if err := tx.Enqueue(ctx, e.ID, e.Lane, e.Payload); err != nil {
			x.t.Fatalf("Enqueue(%s, %q): %v", e.ID, e.Lane, err)
		}
	}
}

func (x *outboxT) commit(tx OutboxTx) {
	x.t.Helper()
	if err := tx.Commit(x.ctx); err != nil {
		x.t.Fatalf("Commit: %v", err)
	}
}

// commitTx enqueues es in one transaction and commits it.
func (x *outboxT) commitTx(es ...outbox.Entry) {
	x.t.Helper()
	tx := x.begin()
	x.enqueue(tx, es...)
	x.commit(tx)
}

// scan scans and checks what every scan must satisfy: at most limit
// entries, all strictly after the cursor, in strictly increasing (xid, id)
// order, each with its fields set.
func (x *outboxT) scan(after outbox.Cursor, limit int) []outbox.Entry {
	x.t.Helper()
	got, err := x.h.Store.Scan(x.ctx, after, limit)
	if err != nil {
		x.t.Fatalf("Scan(after %v, %d): %v", cursorText(after), limit, err)
	}
	if len(got) > limit {
		x.t.Fatalf("Scan(after %v, %d) returned %d entries, more than the limit", cursorText(after), limit, len(got))
	}
	prev := after
	for i, e := range got {
		if e.Cursor().Compare(prev) <= 0 {
			if i == 0 {
				x.t.Fatalf("Scan(after %v) returned entry %s at %v, which is not after the cursor", cursorText(after), e.ID, cursorText(e.Cursor()))
			}
			x.t.Fatalf("Scan returned entry %s at %v after %v: not in strictly increasing (xid, id) order", e.ID, cursorText(e.Cursor()), cursorText(prev))
		}
		if e.XID == 0 || e.Lane == "" || len(e.Payload) == 0 || e.CreatedAt.IsZero() {
			x.t.Fatalf("Scan returned an entry with an unset field: %+v", e)
		}
		prev = e.Cursor()
	}
	return got
}

// await scans from after until every id in want is in the result, or
// fails after x.wait; it returns the last result.
func (x *outboxT) await(after outbox.Cursor, want ...outbox.ID) []outbox.Entry {
	x.t.Helper()
	deadline := time.Now().Add(x.wait)
	pause := 5 * time.Millisecond
	for {
		got := x.scan(after, outboxScanAll)
		missing := 0
		for _, id := range want {
			if !slices.Contains(entryIDs(got), id) {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("%d of %d committed entries did not appear to Scan within %v; the last scan had %d entries", missing, len(want), x.wait, len(got))
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// barrier commits one more entry and waits for it to appear. Whatever was
// committed before the barrier began has an older xid, so it is below the
// horizon too: the returned scan from the start shows it if it exists.
// The barrier entry is last.
func (x *outboxT) barrier() []outbox.Entry {
	x.t.Helper()
	b := outboxEntry(outboxLaneBarrier, 0)
	x.commitTx(b)
	got := x.await(outbox.Cursor{}, b.ID)
	if last := got[len(got)-1]; last.ID != b.ID {
		x.t.Fatalf("the barrier entry %s is not the last in the walk; %s at %v follows it", b.ID, last.ID, cursorText(last.Cursor()))
	}
	return got
}

// visible commits es, each in a transaction of its own, and returns them
// as scanned, in walk order.
func (x *outboxT) visible(es ...outbox.Entry) []outbox.Entry {
	x.t.Helper()
	for _, e := range es {
		x.commitTx(e)
	}
	got := x.await(outbox.Cursor{}, entryIDs(es)...)
	x.checkEntries("setup", got, es...)
	return got
}

// parkFirst commits es (one transaction each), and parks the first of
// them with reason "parked", settling the cursor at it.
func (x *outboxT) parkFirst(es ...outbox.Entry) []outbox.Entry {
	x.t.Helper()
	got := x.visible(es...)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: got[0].Cursor(), Park: parkAll("parked", got[0])})
	return got
}

// checkEntries compares a scan with the expected entries, in order.
func (x *outboxT) checkEntries(what string, got []outbox.Entry, want ...outbox.Entry) {
	x.t.Helper()
	if !slices.Equal(entryIDs(got), entryIDs(want)) {
		x.t.Fatalf("%s: got ids %v, want %v", what, entryIDs(got), entryIDs(want))
	}
	for i := range got {
		if got[i].Lane != want[i].Lane {
			x.t.Errorf("%s: entry %s has lane %q, want %q", what, got[i].ID, got[i].Lane, want[i].Lane)
		}
		if !samePayload(got[i].Payload, want[i].Payload) {
			x.t.Errorf("%s: entry %s has payload %s, want the JSON value %s", what, got[i].ID, got[i].Payload, want[i].Payload)
		}
		if got[i].TraceContext != want[i].TraceContext {
			x.t.Errorf("%s: entry %s has trace context %+v, want %+v", what, got[i].ID, got[i].TraceContext, want[i].TraceContext)
		}
	}
}

// find returns the scanned entry with id.
func (x *outboxT) find(es []outbox.Entry, id outbox.ID) outbox.Entry {
	x.t.Helper()
	for _, e := range es {
		if e.ID == id {
			return e
		}
	}
	x.t.Fatalf("entry %s is not in the scan", id)
	return outbox.Entry{}
}

func (x *outboxT) settle(s outbox.Settlement) {
	x.t.Helper()
	if err := x.h.Store.Settle(x.ctx, s); err != nil {
		x.t.Fatalf("Settle(from %v to %v, %d parked): %v", cursorText(s.From), cursorText(s.To), len(s.Park), err)
	}
}

func (x *outboxT) state() map[string]string {
	x.t.Helper()
	m, err := x.h.Store.State(x.ctx)
	if err != nil {
		x.t.Fatalf("State: %v", err)
	}
	return m
}

func (x *outboxT) cursor() outbox.Cursor {
	x.t.Helper()
	c, err := outbox.CursorFromState(x.state())
	if err != nil {
		x.t.Fatalf("the stored cursor: %v", err)
	}
	return c
}

// sameState fails unless the state is exactly want.
func (x *outboxT) sameState(what string, got, want map[string]string) {
	x.t.Helper()
	if !maps.Equal(got, want) {
		x.t.Fatalf("%s: state is %v, want %v", what, got, want)
	}
}

func (x *outboxT) getDead(id outbox.ID) outbox.DeadLetter {
	x.t.Helper()
	d, err := x.h.Store.GetDead(x.ctx, id)
	if err != nil {
		x.t.Fatalf("GetDead(%s): %v", id, err)
	}
	if d.ID != id {
		x.t.Fatalf("GetDead(%s) returned dead letter %s", id, d.ID)
	}
	return d
}

func (x *outboxT) notDead(id outbox.ID) {
	x.t.Helper()
	if d, err := x.h.Store.GetDead(x.ctx, id); !errors.Is(err, outbox.ErrNotFound) {
		x.t.Fatalf("GetDead(%s) = %+v, %v; want an error wrapping outbox.ErrNotFound", id, d, err)
	}
}

func (x *outboxT) listDead(opts outbox.ListOptions) []outbox.DeadLetter {
	x.t.Helper()
	ds, err := x.h.Store.ListDead(x.ctx, opts)
	if err != nil {
		x.t.Fatalf("ListDead(%+v): %v", opts, err)
	}
	limit := opts.Limit
	if limit == 0 {
		limit = outbox.DefaultListLimit
	}
	if len(ds) > limit {
		x.t.Fatalf("ListDead(%+v) returned %d dead letters, more than the limit %d", opts, len(ds), limit)
	}
	for _, d := range ds {
		if len(d.Payload) != 0 {
			x.t.Fatalf("ListDead returned dead letter %s with its payload %s; listings carry no payloads", d.ID, d.Payload)
		}
	}
	return ds
}

// checkDead compares a dead letter with the entry it was parked from.
func (x *outboxT) checkDead(d outbox.DeadLetter, e outbox.Entry, reason string, withPayload bool) {
	x.t.Helper()
	if d.ID != e.ID || d.XID != e.XID || d.Lane != e.Lane {
		x.t.Errorf("dead letter (id %s, xid %d, lane %q), want the parked entry's (id %s, xid %d, lane %q)", d.ID, d.XID, d.Lane, e.ID, e.XID, e.Lane)
	}
	if d.Error != reason {
		x.t.Errorf("dead letter %s has error %q, want the park reason %q", d.ID, d.Error, reason)
	}
	if d.ParkedAt.IsZero() {
		x.t.Errorf("dead letter %s has no ParkedAt", d.ID)
	}
	if d.TraceContext != e.TraceContext {
		x.t.Errorf("dead letter %s has trace context %+v, want the parked entry's %+v", d.ID, d.TraceContext, e.TraceContext)
	}
	if withPayload && !samePayload(d.Payload, e.Payload) {
		x.t.Errorf("dead letter %s has payload %s, want the JSON value %s", d.ID, d.Payload, e.Payload)
	}
}

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
// x.wait.
func (x *outboxT) awaitWalk(want ...outbox.ID) []outbox.Entry {
	x.t.Helper()
	deadline := time.Now().Add(x.wait)
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
			x.t.Fatalf("%d of %d committed entries did not appear to Scan within %v", missing, len(want), x.wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
