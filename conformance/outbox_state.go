package conformance

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/baton-go/baton/core/outbox"
)

// The outbox's state: keys written by settlements, exactly as given, and
// the transaction counter.

func (s *outboxSuite) stateChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"StateUpsertsAndRemovesKeys", s.stateUpsert},
		subtest[*outboxT]{"SettleRefusesTextNoStoreCanKeep", s.unstorableText},
		subtest[*outboxT]{"SettleKeepsEveryStorableReasonExactly", s.storableReasons},
		subtest[*outboxT]{"NextXIDIsAboveEveryCommittedEntry", s.nextXID},
	)
}

func (s *outboxSuite) stateUpsert(t *testing.T, x *outboxT) {
	x.sameState("a fresh outbox", x.state(), map[string]string{})
	if c := x.cursor(); !c.IsZero() {
		t.Fatalf("a fresh outbox has cursor %v, want the start", cursorText(c))
	}

	to := outbox.Cursor{XID: 42, ID: outbox.NewID()}
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: to, State: map[string]*string{
		outbox.KeyLastError: stateValue("one"), outbox.KeyFailedAttempts: stateValue("1"), outbox.KeyLastScanAt: stateValue("t1"),
	}})
	xid, id := outbox.CursorState(to)
	want := map[string]string{
		outbox.KeyLastScannedXID: xid, outbox.KeyLastScannedID: id,
		outbox.KeyLastError: "one", outbox.KeyFailedAttempts: "1", outbox.KeyLastScanAt: "t1",
	}
	got := x.state()
	x.sameState("after the first settlement", got, want)

	// The returned map is the caller's.
	got[outbox.KeyLastError] = "scribbled"
	delete(got, outbox.KeyLastScanAt)
	x.sameState("after changing a returned map", x.state(), want)

	x.settle(outbox.Settlement{From: to, To: to, State: map[string]*string{
		outbox.KeyLastError: nil, outbox.KeyFailedAttempts: stateValue("2"), outbox.KeyFirstStuckAt: nil,
	}})
	delete(want, outbox.KeyLastError)
	want[outbox.KeyFailedAttempts] = "2"
	x.sameState("after removing and overwriting keys", x.state(), want)

	x.settle(outbox.Settlement{From: to, To: to, State: map[string]*string{
		outbox.KeyFailedAttempts: stateValue("3"), outbox.KeyLastError: stateValue(""),
	}})
	want[outbox.KeyFailedAttempts] = "3"
	want[outbox.KeyLastError] = "" // an empty value is a value, not an absent key
	x.sameState("after writing a key again", x.state(), want)
}

// unstorableText: a park reason or a state value that is not valid UTF-8
// or holds a NUL byte (PostgreSQL's text can hold neither) is refused with
// outbox.ErrInvalidSettlement before anything is written, so the refusal
// says what is wrong instead of surfacing as a database error.
func (s *outboxSuite) unstorableText(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 2)...)
	for _, tc := range []struct {
		name string
		park string
		key  string
		val  string
	}{
		{name: "a reason with a NUL byte", park: "refused: a\x00b"},
		{name: "a reason that is not UTF-8", park: "refused: a\xffb"},
		{name: "a state value with a NUL byte", key: outbox.KeyLastError, val: "a\x00b"},
		{name: "a state value that is not UTF-8", key: outbox.KeyLastError, val: "\xc3("},
		{name: "a state key with a NUL byte", key: "last\x00error", val: "x"},
	} {
		st := outbox.Settlement{From: outbox.Cursor{}, To: es[1].Cursor(), State: map[string]*string{outbox.KeyLastScanAt: stateValue("t1")}}
		if tc.park != "" {
			st.Park = []outbox.Parked{{Entry: es[0], Reason: tc.park}}
		} else {
			st.State[tc.key] = stateValue(tc.val)
		}
		if err := h.Store.Settle(ctx, st); !errors.Is(err, outbox.ErrInvalidSettlement) {
			t.Errorf("Settle with %s: err = %v, want one wrapping outbox.ErrInvalidSettlement", tc.name, err)
		}
		x.sameState("after a refused settlement with "+tc.name, x.state(), map[string]string{})
		x.notDead(es[0].ID)
	}
	x.checkEntries("after refused settlements", x.scan(outbox.Cursor{}, outboxScanAll), es...)
	// The same settlement with storable text applies.
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[1].Cursor(), Park: parkAll("refused", es[0])})
	x.checkDead(x.getDead(es[0].ID), es[0], "refused "+es[0].ID.String(), true)
}

// storableReasons: whatever core may hand a store (valid UTF-8 without
// NUL, up to outbox.MaxReasonLength bytes) comes back byte for byte, as a
// dead letter's error and as a state value: quotes, backslashes, SQL and
// format placeholders, control characters and text in many scripts.
func (s *outboxSuite) storableReasons(t *testing.T, x *outboxT) {
	es := x.visible(outboxEntries(outboxLaneA, 3)...)
	var long strings.Builder
	for piece := 0; long.Len() < outbox.MaxReasonLength; piece++ {
		long.WriteString([]string{"ä", "日本", "🙂", "'", `"`, `\`, "?0", "$1", "%s", "\t", "\u2028", " ", "x"}[piece%13])
	}
	longest := long.String()
	for len(longest) > outbox.MaxReasonLength || !utf8.ValidString(longest) {
		longest = longest[:len(longest)-1]
	}
	reasons := []string{
		longest,
		`409 Conflict: {"error": "it's \"taken\""} \x00 ?1 $2 %d :name`,
		"\x01\x1f\x7f line one\nline two\r\n",
	}
	park := make([]outbox.Parked, len(es))
	for i, e := range es {
		park[i] = outbox.Parked{Entry: e, Reason: reasons[i]}
	}
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[2].Cursor(), Park: park,
		State: map[string]*string{outbox.KeyLastError: stateValue(longest)}})
	for i, e := range es {
		if d := x.getDead(e.ID); d.Error != reasons[i] {
			t.Errorf("dead letter %d kept a reason of %d bytes, want the %d bytes parked; first difference at byte %d",
				i, len(d.Error), len(reasons[i]), firstDifference(d.Error, reasons[i]))
		}
	}
	for _, d := range x.listDead(outbox.ListOptions{}) {
		i := slices.IndexFunc(es, func(e outbox.Entry) bool { return e.ID == d.ID })
		if i < 0 || d.Error != reasons[i] {
			t.Errorf("ListDead shows dead letter %s with a reason of %d bytes, not the one parked", d.ID, len(d.Error))
		}
	}
	if got := x.state()[outbox.KeyLastError]; got != longest {
		t.Errorf("state %s holds %d bytes, want the %d bytes written; first difference at byte %d",
			outbox.KeyLastError, len(got), len(longest), firstDifference(got, longest))
	}
}

// nextXID: the transaction counter is above the xid of every entry
// committed before it was read, and it never goes back. The driver
// compares the stored cursor with it: a cursor at or above it cannot come
// from this database (a logical restore into another cluster).
func (s *outboxSuite) nextXID(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	next := func() uint64 {
		t.Helper()
		n, err := h.Store.NextXID(ctx)
		if err != nil {
			t.Fatalf("NextXID: %v", err)
		}
		return n
	}
	before := next()
	for round := range 3 {
		es := outboxEntries(outboxLaneA, 2)
		for _, e := range es {
			x.commitTx(e)
		}
		all := x.await(outbox.Cursor{}, entryIDs(es)...)
		after := next()
		for _, e := range all {
			if e.XID >= after {
				t.Fatalf("round %d: NextXID is %d, not above the xid %d of entry %s committed before", round, after, e.XID, e.ID)
			}
		}
		if after < before {
			t.Fatalf("round %d: NextXID went back from %d to %d", round, before, after)
		}
		before = after
	}
}

func firstDifference(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
