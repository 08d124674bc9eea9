package conformance

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

// Settling a log position, and the marks (R10 to R14).

func (s *outboxLogSuite) logSettleChecks() []check {
	return area(s.start,
		subtest[*logT]{"SettleLogIsCompareAndSet", testSettleLogCAS},
		subtest[*logT]{"LogPositionNeverGoesBackwards", testSettleLogForward},
		subtest[*logT]{"SettleLogParksIntoTheDeadLetters", testSettleLogPark},
		subtest[*logT]{"SettleLogWritesTheState", testSettleLogState},
		subtest[*logT]{"MarkBoundsEndedTransactionsAndCommittedEntries", testLogMark},
	)
}

func (x *logT) settleLog(s outbox.LogSettlement) {
	x.t.Helper()
	if err := x.log.SettleLog(x.ctx, s); err != nil {
		x.t.Fatalf("SettleLog(%s → %s): %v", s.From, s.To, err)
	}
}

func (x *logT) logPosition() outbox.LogPosition {
	x.t.Helper()
	p, err := outbox.LogPositionFromState(x.state())
	if err != nil {
		x.t.Fatal(err)
	}
	return p
}

// testSettleLogCAS: R10.
func testSettleLogCAS(t *testing.T, x *logT) {
	p1 := outbox.LogPosition{LSN: 100, Seq: 2}
	x.settleLog(outbox.LogSettlement{To: p1})
	if got := x.logPosition(); got != p1 {
		t.Fatalf("stored log position %s, want %s", got, p1)
	}
	stale := []outbox.LogPosition{{}, {LSN: 100, Seq: 1}, {LSN: 100, Seq: 3}, {LSN: 101}}
	for _, from := range stale {
		err := x.log.SettleLog(x.ctx, outbox.LogSettlement{From: from, To: outbox.LogPosition{LSN: 500}})
		if !errors.Is(err, outbox.ErrCursorMoved) {
			t.Errorf("SettleLog from %s with %s stored: err = %v, want ErrCursorMoved", from, p1, err)
		}
	}
	if got := x.logPosition(); got != p1 {
		t.Fatalf("stale settlements moved the log position to %s", got)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		wins int
	)
	for i := range outboxSettlers {
		wg.Go(func() {
			err := x.log.SettleLog(x.ctx, outbox.LogSettlement{From: p1, To: outbox.LogPosition{LSN: 200 + uint64(i)}})
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
			case !errors.Is(err, outbox.ErrCursorMoved):
				t.Errorf("concurrent SettleLog: %v", err)
			}
		})
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d of %d concurrent settlements from one position won, want exactly 1", wins, outboxSettlers)
	}
}

// testSettleLogForward: R11.
func testSettleLogForward(t *testing.T, x *logT) {
	p := outbox.LogPosition{LSN: 300, Seq: 1}
	x.settleLog(outbox.LogSettlement{To: p})
	err := x.log.SettleLog(x.ctx, outbox.LogSettlement{From: p, To: outbox.LogPosition{LSN: 299, Seq: 9}})
	if !errors.Is(err, outbox.ErrInvalidSettlement) {
		t.Fatalf("SettleLog backwards: err = %v, want one wrapping ErrInvalidSettlement", err)
	}
	if got := x.logPosition(); got != p {
		t.Fatalf("a backward settlement moved the log position to %s", got)
	}
	x.settleLog(outbox.LogSettlement{From: p, To: p}) // no progress applies
}

// testSettleLogPark: R12.
func testSettleLogPark(t *testing.T, x *logT) {
	r := x.open(1)
	es := outboxEntries(outboxLaneA, 2)
	x.commitTx(es...)
	got, _ := x.readN(r, r.Start(), 2)
	parked := outbox.Parked{Entry: got[0].Entry, Reason: "cannot be delivered"}
	x.settleLog(outbox.LogSettlement{To: got[0].Pos, Park: []outbox.Parked{parked}})
	x.checkDead(x.getDead(got[0].ID), got[0].Entry, parked.Reason, true)

	unknown := outbox.Parked{Entry: outboxEntry(outboxLaneB, 9), Reason: "unknown"}
	state := map[string]*string{"conformance.marker": stateValue("not in the outbox")}
	err := x.log.SettleLog(x.ctx, outbox.LogSettlement{From: got[0].Pos, To: got[1].Pos, Park: []outbox.Parked{unknown}, State: state})
	if err == nil || errors.Is(err, outbox.ErrCursorMoved) {
		t.Errorf("parking an entry not in the outbox: err = %v, want an error other than ErrCursorMoved", err)
	}
	if pos := x.logPosition(); pos != got[0].Pos {
		t.Errorf("parking an entry not in the outbox moved the log position to %s", pos)
	}
	if _, ok := x.state()["conformance.marker"]; ok {
		t.Errorf("parking an entry not in the outbox wrote the state")
	}
	x.notDead(got[1].ID)
	x.notDead(unknown.Entry.ID)
}

// testSettleLogState: R13.
func testSettleLogState(t *testing.T, x *logT) {
	p1 := outbox.LogPosition{LSN: 40, Seq: 3}
	x.settleLog(outbox.LogSettlement{To: p1, State: map[string]*string{
		"conformance.kept": stateValue("one"), "conformance.gone": stateValue("two"), "conformance.empty": stateValue(""),
		outbox.KeyLogLSN: stateValue("ignored: the position keys come from To"),
	}})
	p2 := outbox.LogPosition{LSN: 41}
	x.settleLog(outbox.LogSettlement{From: p1, To: p2, State: map[string]*string{"conformance.gone": nil}})
	st := x.state()
	if st["conformance.kept"] != "one" {
		t.Errorf("state %v: the kept key is not \"one\"", st)
	}
	if v, ok := st["conformance.empty"]; !ok || v != "" {
		t.Errorf("state %v: the empty value is not kept", st)
	}
	if _, ok := st["conformance.gone"]; ok {
		t.Errorf("state %v: a nil value did not remove its key", st)
	}
	if got := x.logPosition(); got != p2 {
		t.Errorf("stored log position %s, want %s", got, p2)
	}
}

// testLogMark: R14. A transaction that wrote is open, another committed:
// the mark's xid is at or below the open one's, and the committed entries
// lie at or below its LSN.
func testLogMark(t *testing.T, x *logT) {
	r := x.open(1)
	open := x.begin()
	older := outboxEntry(outboxLaneA, 1)
	x.enqueue(open, older)
	done := outboxEntries(outboxLaneB, 2)
	x.commitTx(done...)
	m, err := x.log.Mark(x.ctx)
	if err != nil {
		t.Fatalf("Mark: %v", err)
	}
	x.commit(open)
	got, _ := x.readN(r, r.Start(), 3)
	for _, e := range got {
		switch {
		case e.ID == older.ID && e.XID < m.XID:
			t.Errorf("the mark's xid %d is above the xid %d of a transaction still open when it was read", m.XID, e.XID)
		case e.ID != older.ID && e.Pos.Compare(outbox.LogPosition{LSN: m.LSN}) > 0:
			t.Errorf("entry %s, committed before the mark, lies at %s, above the mark's LSN %d", e.ID, e.Pos, m.LSN)
		}
	}
}

// logReplaceChecks come last: R20 was numbered last.
func (s *outboxLogSuite) logReplaceChecks() []check {
	return area(s.start,
		subtest[*logT]{"AParkReplacesTheDeadLetterOfItsID", testParkReplaces},
	)
}

// testParkReplaces: R20. Rows carry no log position, so the log cannot
// tell a park repeated from a first one: an entry parked and requeued is
// parked again by SettleLog, then once more by the walk's Settle, as a
// driver taking the outbox back from the log does with what the log parked
// after its last mark. Each park replaces the dead letter, requeue and
// all, instead of failing the settlement (and every one after it).
func testParkReplaces(t *testing.T, x *logT) {
	r := x.open(1)
	es := outboxEntries(outboxLaneA, 2)
	x.commitTx(es...)
	got, _ := x.readN(r, r.Start(), 2)
	e := got[0].Entry
	x.settleLog(outbox.LogSettlement{To: got[0].Pos, Park: []outbox.Parked{{Entry: e, Reason: "first"}}})
	prev := x.getDead(e.ID)
	if err := x.h.Store.Requeue(x.ctx, e.ID, outbox.NewID()); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	replaced := func(by, reason string) {
		t.Helper()
		d := x.getDead(e.ID)
		if d.XID != e.XID || d.Lane != e.Lane || !samePayload(d.Payload, e.Payload) || d.TraceContext != e.TraceContext {
			t.Errorf("after %s: dead letter (xid %d, lane %q, payload %s, trace context %+v), want the parked entry's (xid %d, lane %q, payload %s, trace context %+v)",
				by, d.XID, d.Lane, d.Payload, d.TraceContext, e.XID, e.Lane, e.Payload, e.TraceContext)
		}
		if !strings.HasPrefix(d.Error, reason) {
			t.Errorf("after %s: dead letter has error %q; want one that begins with the new reason, %q", by, d.Error, reason)
		}
		if d.RequeuedAs != outbox.NilID || !d.RequeuedAt.IsZero() {
			t.Errorf("after %s: the replaced dead letter is still requeued (as %s at %v); want one parked afresh", by, d.RequeuedAs, d.RequeuedAt)
		}
		if d.ParkedAt.Before(prev.ParkedAt) {
			t.Errorf("after %s: the replaced dead letter was parked at %v, before the park it replaced, at %v", by, d.ParkedAt, prev.ParkedAt)
		}
		prev = d
	}

	state := map[string]*string{"conformance.marker": stateValue("parked again")}
	if err := x.log.SettleLog(x.ctx, outbox.LogSettlement{From: got[0].Pos, To: got[1].Pos, Park: []outbox.Parked{{Entry: e, Reason: "second"}}, State: state}); err != nil {
		t.Fatalf("SettleLog parking an entry whose id has a dead letter: %v; it must replace the dead letter, not fail", err)
	}
	if pos := x.logPosition(); pos != got[1].Pos {
		t.Errorf("the SettleLog that parked again left the log position at %s, want %s", pos, got[1].Pos)
	}
	if x.state()["conformance.marker"] == "" {
		t.Errorf("the SettleLog that parked again did not write the state")
	}
	replaced("SettleLog", "second")

	if err := x.h.Store.Settle(x.ctx, outbox.Settlement{To: e.Cursor(), Park: []outbox.Parked{{Entry: e, Reason: "third"}}}); err != nil {
		t.Fatalf("the walk's Settle parking an entry the log parked: %v; it must replace the dead letter, not fail", err)
	}
	replaced("the walk's Settle", "third")
	x.notDead(got[1].ID)
}
