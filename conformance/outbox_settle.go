package conformance

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

// Settling: the cursor's compare-and-set, and parking.

func (s *outboxSuite) settleChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"SettleIsCompareAndSet", s.settleCAS},
		subtest[*outboxT]{"StaleSettleLoses", s.staleSettle},
		subtest[*outboxT]{"CursorNeverGoesBackwards", s.cursorForward},
		subtest[*outboxT]{"ConcurrentFirstSettlesOneWins", s.concurrentSettles},
		subtest[*outboxT]{"ParkingMovesEntriesToDeadLetters", s.parking},
		subtest[*outboxT]{"ParkingAnUnknownEntryWritesNothing", s.parkingUnknown},
	)
}

// settleCAS: two settlements from the same cursor; the second finds it
// moved and writes nothing, neither its parking nor its state.
func (s *outboxSuite) settleCAS(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 3)...)

	x.settle(outbox.Settlement{
		From: outbox.Cursor{}, To: es[0].Cursor(), State: map[string]*string{outbox.KeyLastError: stateValue("first")},
	})
	before := x.state()
	err := h.Store.Settle(ctx, outbox.Settlement{
		From: outbox.Cursor{}, To: es[2].Cursor(), Park: parkAll("second", es[1]),
		State: map[string]*string{outbox.KeyLastError: stateValue("second"), outbox.KeyFailedAttempts: stateValue("9")},
	})
	if !errors.Is(err, outbox.ErrCursorMoved) {
		t.Fatalf("a second settlement from the same cursor: err = %v, want one wrapping outbox.ErrCursorMoved", err)
	}
	x.sameState("after the lost settlement", x.state(), before)
	if c := x.cursor(); c != es[0].Cursor() {
		t.Fatalf("the stored cursor is %v, want the winner's %v", cursorText(c), cursorText(es[0].Cursor()))
	}
	x.notDead(es[1].ID)
	x.checkEntries("after the lost settlement", x.scan(outbox.Cursor{}, outboxScanAll), es...)

	// From the winner's cursor, the same settlement applies.
	x.settle(outbox.Settlement{From: es[0].Cursor(), To: es[2].Cursor(), Park: parkAll("second", es[1])})
	x.checkDead(x.getDead(es[1].ID), es[1], "second "+es[1].ID.String(), true)
	if c := x.cursor(); c != es[2].Cursor() {
		t.Fatalf("the stored cursor is %v, want %v", cursorText(c), cursorText(es[2].Cursor()))
	}

	// The cursor is compared whole: two entries of one transaction share
	// their xid, and a pass that began at one of them did not begin at
	// the other.
	pair := entriesByID(outboxEntry(outboxLaneA, 4), outboxEntry(outboxLaneB, 5))
	x.commitTx(pair...)
	got := x.await(es[2].Cursor(), entryIDs(pair)...)
	x.settle(outbox.Settlement{From: es[2].Cursor(), To: got[0].Cursor()})
	before = x.state()
	err = h.Store.Settle(ctx, outbox.Settlement{From: got[1].Cursor(), To: got[1].Cursor(),
		State: map[string]*string{outbox.KeyLastError: stateValue("same xid, other id")}})
	if !errors.Is(err, outbox.ErrCursorMoved) {
		t.Fatalf("a settlement from %v while the cursor is at %v, an entry of the same transaction: err = %v, want one wrapping outbox.ErrCursorMoved",
			cursorText(got[1].Cursor()), cursorText(got[0].Cursor()), err)
	}
	x.sameState("after the settlement from the other entry of the transaction", x.state(), before)

	// And the other way round: the stored entry's id under another xid, as
	// a cursor read before a rebase moved the stored one has it.
	// With and without parking: stores may settle the two another way.
	from := outbox.Cursor{XID: got[0].XID - 1, ID: got[0].ID}
	for _, park := range [][]outbox.Parked{nil, parkAll("same id, other xid", got[1])} {
		err = h.Store.Settle(ctx, outbox.Settlement{From: from, To: got[1].Cursor(), Park: park,
			State: map[string]*string{outbox.KeyLastError: stateValue("same id, other xid")}})
		if !errors.Is(err, outbox.ErrCursorMoved) {
			t.Fatalf("a settlement parking %d entries from %v while the cursor is at %v, the same id under another xid: err = %v, want one wrapping outbox.ErrCursorMoved",
				len(park), cursorText(from), cursorText(got[0].Cursor()), err)
		}
		x.sameState("after the settlement from the stored id under another xid", x.state(), before)
		x.notDead(got[1].ID)
	}
}

// staleSettle: once the cursor has moved on, settlements from any cursor
// but the stored one lose, whether behind it or ahead of it.
func (s *outboxSuite) staleSettle(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 4)...)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[0].Cursor()})
	x.settle(outbox.Settlement{From: es[0].Cursor(), To: es[1].Cursor()})
	before := x.state()
	for _, from := range []outbox.Cursor{{}, es[0].Cursor(), es[2].Cursor()} {
		err := h.Store.Settle(ctx, outbox.Settlement{
			From: from, To: es[3].Cursor(), Park: parkAll("stale", es[3]),
			State: map[string]*string{outbox.KeyLastError: stateValue("stale")},
		})
		if !errors.Is(err, outbox.ErrCursorMoved) {
			t.Errorf("a settlement from %v while the cursor is at %v: err = %v, want one wrapping outbox.ErrCursorMoved", cursorText(from), cursorText(es[1].Cursor()), err)
		}
	}
	x.sameState("after stale settlements", x.state(), before)
	x.notDead(es[3].ID)
	x.checkEntries("after stale settlements", x.scan(outbox.Cursor{}, outboxScanAll), es...)
}

func (s *outboxSuite) cursorForward(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 3)...)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[1].Cursor()})
	before := x.state()
	for _, to := range []outbox.Cursor{es[0].Cursor(), {}, {XID: es[1].XID}} {
		err := h.Store.Settle(ctx, outbox.Settlement{
			From: es[1].Cursor(), To: to, State: map[string]*string{outbox.KeyLastError: stateValue("backwards")},
		})
		if err == nil {
			t.Errorf("a settlement from %v back to %v succeeded; the cursor never goes backwards", cursorText(es[1].Cursor()), cursorText(to))
		}
	}
	x.sameState("after backward settlements", x.state(), before)
	// Standing still is allowed: a pass that made no progress.
	x.settle(outbox.Settlement{
		From: es[1].Cursor(), To: es[1].Cursor(), State: map[string]*string{outbox.KeyFailedAttempts: stateValue("1")},
	})
	if c := x.cursor(); c != es[1].Cursor() {
		t.Fatalf("the stored cursor is %v after a settlement that stood still, want %v", cursorText(c), cursorText(es[1].Cursor()))
	}
}

// concurrentSettles: many leaders settle at once, first from the absent
// state (a fresh outbox every round), then from a stored cursor. Exactly
// one wins each race; the others get ErrCursorMoved.
func (s *outboxSuite) concurrentSettles(t *testing.T, x *outboxT) {
	ctx := testCtx(t)
	for round := range outboxSettleRounds {
		h := s.harness(t)
		from := outbox.Cursor{}
		for phase := range 2 {
			type result struct {
				to  outbox.Cursor
				who string
				err error
			}
			var (
				wg      sync.WaitGroup
				start   = make(chan struct{})
				results = make(chan result, outboxSettlers)
			)
			for i := range outboxSettlers {
				to := outbox.Cursor{XID: from.XID + uint64(1+i), ID: outbox.NewID()}
				who := fmt.Sprintf("round %d phase %d settler %d", round, phase, i)
				wg.Go(func() {
					<-start
					err := h.Store.Settle(ctx, outbox.Settlement{
						From: from, To: to, State: map[string]*string{outbox.KeyLastError: stateValue(who)},
					})
					results <- result{to, who, err}
				})
			}
			close(start)
			wg.Wait()
			close(results)
			var winners []result
			for r := range results {
				switch {
				case r.err == nil:
					winners = append(winners, r)
				case !errors.Is(r.err, outbox.ErrCursorMoved):
					t.Errorf("%s: err = %v, want nil or one wrapping outbox.ErrCursorMoved", r.who, r.err)
				}
			}
			if len(winners) != 1 {
				what := "a stored cursor"
				if phase == 0 {
					what = "the absent state"
				}
				t.Fatalf("round %d: %d of %d concurrent settlements from %s won, want exactly 1", round, len(winners), outboxSettlers, what)
			}
			st := (&outboxT{t: t, ctx: ctx, h: h}).state()
			c, err := outbox.CursorFromState(st)
			if err != nil {
				t.Fatal(err)
			}
			if c != winners[0].to || st[outbox.KeyLastError] != winners[0].who {
				t.Fatalf("round %d: the state holds cursor %v and last_error %q, want the winner's %v and %q", round, cursorText(c), st[outbox.KeyLastError], cursorText(winners[0].to), winners[0].who)
			}
			from = c
		}
	}
}

func (s *outboxSuite) parking(t *testing.T, x *outboxT) {
	p1, d1 := outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneA, 2)
	p2 := outboxEntry(outboxLaneB, 3)
	x.commitTx(p1, d1)
	x.commitTx(p2)
	all := x.await(outbox.Cursor{}, p1.ID, d1.ID, p2.ID)
	sp1, sd1, sp2 := x.find(all, p1.ID), x.find(all, d1.ID), x.find(all, p2.ID)

	x.settle(outbox.Settlement{
		From: outbox.Cursor{}, To: all[len(all)-1].Cursor(),
		Park:  []outbox.Parked{{Entry: sp1, Reason: "no processor for lane a"}, {Entry: sp2, Reason: "rejected: 422"}},
		State: map[string]*string{outbox.KeyLastDeadLetterAt: stateValue("2030-01-02T03:04:05Z")},
	})
	// Parked entries leave the walk with the cursor; whether a store keeps
	// them below it until retention, as delivered ones, is its own choice.
	x.checkEntries("the outbox after parking, parked entries aside",
		slices.DeleteFunc(x.scan(outbox.Cursor{}, outboxScanAll), func(e outbox.Entry) bool { return e.ID == p1.ID || e.ID == p2.ID }), sd1)
	x.checkDead(x.getDead(p1.ID), sp1, "no processor for lane a", true)
	x.checkDead(x.getDead(p2.ID), sp2, "rejected: 422", true)
	for _, id := range []outbox.ID{p1.ID, p2.ID} {
		if d := x.getDead(id); !d.RequeuedAs.IsNil() {
			t.Errorf("a fresh dead letter %s has RequeuedAs %s", id, d.RequeuedAs)
		}
	}
	x.notDead(d1.ID)
	listed := x.listDead(outbox.ListOptions{})
	if len(listed) != 2 {
		t.Fatalf("ListDead returned %d dead letters, want the 2 parked", len(listed))
	}
	for _, d := range listed {
		e, reason := sp1, "no processor for lane a"
		if d.ID == p2.ID {
			e, reason = sp2, "rejected: 422"
		}
		x.checkDead(d, e, reason, false)
	}
	if st := x.state(); st[outbox.KeyLastDeadLetterAt] != "2030-01-02T03:04:05Z" {
		t.Errorf("state %s = %q, want the settlement's value", outbox.KeyLastDeadLetterAt, st[outbox.KeyLastDeadLetterAt])
	}
}

// parkingUnknown: a settlement that parks an entry the outbox does not
// hold (never there, or parked before) is an error and writes nothing.
func (s *outboxSuite) parkingUnknown(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 3)...)
	ghost := es[1]
	ghost.ID = outbox.NewID()
	err := h.Store.Settle(ctx, outbox.Settlement{
		From: outbox.Cursor{}, To: es[1].Cursor(),
		Park:  []outbox.Parked{{Entry: es[0], Reason: "real"}, {Entry: ghost, Reason: "ghost"}},
		State: map[string]*string{outbox.KeyLastError: stateValue("ghost")},
	})
	if err == nil || errors.Is(err, outbox.ErrCursorMoved) {
		t.Fatalf("a settlement parking an entry that is not in the outbox: err = %v, want an error other than ErrCursorMoved", err)
	}
	x.sameState("after the refused settlement", x.state(), map[string]string{})
	x.notDead(es[0].ID)
	x.checkEntries("after the refused settlement", x.scan(outbox.Cursor{}, outboxScanAll), es...)

	// An entry parked once is no longer in the outbox either.
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[0].Cursor(), Park: parkAll("once", es[0])})
	before := x.state()
	err = h.Store.Settle(ctx, outbox.Settlement{
		From: es[0].Cursor(), To: es[1].Cursor(), Park: parkAll("again", es[0], es[1]),
	})
	if err == nil || errors.Is(err, outbox.ErrCursorMoved) {
		t.Fatalf("a settlement parking an entry parked before: err = %v, want an error other than ErrCursorMoved", err)
	}
	x.sameState("after the refused settlement", x.state(), before)
	x.notDead(es[1].ID)
	x.checkDead(x.getDead(es[0].ID), es[0], "once "+es[0].ID.String(), true)

	// Nor is one above the new cursor part of the pass: parked, it would
	// be a dead letter and still walked.
	err = h.Store.Settle(ctx, outbox.Settlement{
		From: es[0].Cursor(), To: es[1].Cursor(), Park: parkAll("ahead", es[1], es[2]),
	})
	if err == nil || errors.Is(err, outbox.ErrCursorMoved) {
		t.Fatalf("a settlement to %v parking an entry above it: err = %v, want an error other than ErrCursorMoved", cursorText(es[1].Cursor()), err)
	}
	x.sameState("after the refused settlement", x.state(), before)
	x.notDead(es[1].ID)
	x.notDead(es[2].ID)
}
