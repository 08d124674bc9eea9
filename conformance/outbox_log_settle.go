package conformance

import (
	"errors"
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

	for what, p := range map[string]outbox.Parked{
		"parked before":     parked,
		"not in the outbox": {Entry: outboxEntry(outboxLaneB, 9), Reason: "unknown"},
	} {
		state := map[string]*string{"conformance.marker": stateValue(what)}
		err := x.log.SettleLog(x.ctx, outbox.LogSettlement{From: got[0].Pos, To: got[1].Pos, Park: []outbox.Parked{p}, State: state})
		if err == nil || errors.Is(err, outbox.ErrCursorMoved) {
			t.Errorf("parking an entry %s: err = %v, want an error other than ErrCursorMoved", what, err)
		}
		if pos := x.logPosition(); pos != got[0].Pos {
			t.Errorf("parking an entry %s moved the log position to %s", what, pos)
		}
		if _, ok := x.state()["conformance.marker"]; ok {
			t.Errorf("parking an entry %s wrote the state", what)
		}
	}
	x.notDead(got[1].ID)
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
