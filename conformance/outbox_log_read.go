package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// Reading the log: order, rollbacks, pinning, positions (R1 to R7), the
// byte budget (R19), and the reader's life: resuming, fencing, a lost log
// (R8, R9, R15).

func (s *outboxLogSuite) readChecks() []check {
	return area(s.start,
		subtest[*logT]{"TransactionsComeInCommitOrder", testLogCommitOrder},
		subtest[*logT]{"EntriesOfOneTransactionComeTogetherInWrittenOrder", testLogWrittenOrder},
		subtest[*logT]{"RolledBackEntriesNeverComeOut", testLogRollback},
		subtest[*logT]{"OpenTransactionHoldsNothingBack", testLogNoPinning},
		subtest[*logT]{"ReadHonoursAfterAndLimit", testLogAfterAndLimit},
		subtest[*logT]{"ReadingAfterAnEntryGoesOnInsideItsTransaction", testLogInsideATransaction},
		subtest[*logT]{"NothingComesOutAtOrBelowReached", testLogReached},
	)
}

// budgetChecks is R19, numbered after the rest: the suite runs its
// subtests in the rules' order.
func (s *outboxLogSuite) budgetChecks() []check {
	return area(s.start,
		subtest[*logT]{"ReadStopsAtTheByteBudget", testLogByteBudget},
	)
}

func (s *outboxLogSuite) readerChecks() []check {
	return area(s.start,
		subtest[*logT]{"ANewReaderStartsAtTheConfirmedPosition", testLogResume},
		subtest[*logT]{"OpenEndsTheReaderOfAnEarlierTerm", testLogOneReader},
	)
}

// testLogCommitOrder: R1. A takes its xid first, B second; B commits
// first, so B comes first.
func testLogCommitOrder(t *testing.T, x *logT) {
	r := x.open(1)
	a, b := outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2)
	txA := x.begin()
	x.enqueue(txA, a)
	txB := x.begin()
	x.enqueue(txB, b)
	x.commit(txB)
	x.commit(txA)
	got, _ := x.readN(r, r.Start(), 2)
	if ids := logIDs(got); !slices.Equal(ids, []outbox.ID{b.ID, a.ID}) {
		t.Fatalf("came out %v, want B %s (committed first) then A %s (older xid)", ids, b.ID, a.ID)
	}
	if got[0].XID <= got[1].XID {
		t.Fatalf("B has xid %d and A %d; the subtest needs A's older", got[0].XID, got[1].XID)
	}
}

// testLogWrittenOrder: R2. Two transactions write in turns, each in
// descending id order; each comes out whole, in the order it wrote.
func testLogWrittenOrder(t *testing.T, x *logT) {
	r := x.open(1)
	one, two := entriesByID(outboxEntries(outboxLaneA, 4)...), entriesByID(outboxEntries(outboxLaneB, 4)...)
	slices.Reverse(one)
	slices.Reverse(two)
	tx1, tx2 := x.begin(), x.begin()
	for i := range one {
		x.enqueue(tx1, one[i])
		x.enqueue(tx2, two[i])
	}
	x.commit(tx2)
	x.commit(tx1)
	got, _ := x.readN(r, r.Start(), 8)
	want := append(entryIDs(two), entryIDs(one)...)
	if ids := logIDs(got); !slices.Equal(ids, want) {
		t.Fatalf("came out %v, want each transaction whole, in written order, the first to commit first: %v", ids, want)
	}
}

// testLogRollback: R3.
func testLogRollback(t *testing.T, x *logT) {
	r := x.open(1)
	gone := outboxEntry(outboxLaneA, 1)
	tx := x.begin()
	x.enqueue(tx, gone)
	if err := tx.Rollback(x.ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	kept := outboxEntry(outboxLaneB, 2)
	x.commitTx(kept)
	got, after := x.readN(r, r.Start(), 1)
	got = append(got, x.readIdle(r, after).Entries...)
	if ids := logIDs(got); !slices.Equal(ids, []outbox.ID{kept.ID}) {
		t.Fatalf("came out %v, want only the committed %s (rolled back: %s)", ids, kept.ID, gone.ID)
	}
}

// testLogNoPinning: R4. A transaction that wrote stays open while another
// commits; the other comes out.
func testLogNoPinning(t *testing.T, x *logT) {
	r := x.open(1)
	open := x.begin()
	x.enqueue(open, outboxEntry(outboxLaneA, 1))
	newer := outboxEntry(outboxLaneB, 2)
	x.commitTx(newer)
	got, _ := x.readN(r, r.Start(), 1)
	if got[0].ID != newer.ID {
		t.Fatalf("came out %s, want %s, committed while an older transaction is open", got[0].ID, newer.ID)
	}
	if err := open.Rollback(x.ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
}

// testLogAfterAndLimit: R5. The five entries commit one per transaction,
// so they come in the order they were enqueued. after never goes back
// between two Reads of one reader (LogReader.Read): the first two are read
// with a limit, then the next two after the second.
func testLogAfterAndLimit(t *testing.T, x *logT) {
	r := x.open(1)
	es := outboxEntries(outboxLaneA, 5)
	for _, e := range es {
		x.commitTx(e)
	}
	// A Read may return before its limit when nothing more is ready at
	// once: read on after the last entry until n have come, each Read
	// within what is left of the limit.
	readUpTo := func(after outbox.LogPosition, n int) ([]outbox.LogEntry, outbox.LogBatch) {
		t.Helper()
		var (
			got []outbox.LogEntry
			b   outbox.LogBatch
		)
		deadline := time.Now().Add(x.wait)
		for len(got) < n {
			var err error
			b, err = r.Read(x.ctx, after, n-len(got), readLogWait)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			x.checkBatch(b, after, n-len(got))
			if len(b.Entries) == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("Reads after %s gave nothing within %v; want %d more entries", after, x.wait, n-len(got))
				}
				continue
			}
			got = append(got, b.Entries...)
			after = b.Entries[len(b.Entries)-1].Pos
		}
		return got, b
	}
	first, _ := readUpTo(r.Start(), 2)
	if ids := logIDs(first); !slices.Equal(ids, entryIDs(es[:2])) {
		t.Fatalf("the first two Reads with limit 2 gave %v, want the first and second entries %v", ids, entryIDs(es[:2]))
	}
	got, b := readUpTo(first[1].Pos, 2)
	if ids := logIDs(got); !slices.Equal(ids, entryIDs(es[2:4])) {
		t.Fatalf("Read after the second entry with limit 2 gave %v, want the third and fourth %v", ids, entryIDs(es[2:4]))
	}
	if b.Reached.Compare(got[1].Pos) != 0 {
		t.Fatalf("Reached %s after a read cut by its limit, want the last entry's position %s", b.Reached, got[1].Pos)
	}
}

// testLogInsideATransaction: R6. A reader opened later, reading after the
// second of a transaction's four entries, goes on with the third.
func testLogInsideATransaction(t *testing.T, x *logT) {
	r := x.open(1)
	es := outboxEntries(outboxLaneA, 4)
	x.commitTx(es...)
	got, _ := x.readN(r, r.Start(), 4)
	ctx := x.ctx
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r2 := x.open(2)
	again, _ := x.readN(r2, got[1].Pos, 2)
	if ids := logIDs(again); !slices.Equal(ids, logIDs(got[2:])) {
		t.Fatalf("read after the second entry of the transaction: %v, want its third and fourth %v", ids, logIDs(got[2:]))
	}
}

// testLogReached: R7. An idle read's Reached lies below what commits
// later; a read cut by its limit reaches only its last entry.
func testLogReached(t *testing.T, x *logT) {
	r := x.open(1)
	first := outboxEntries(outboxLaneA, 3)
	x.commitTx(first...)
	got, _ := x.readN(r, r.Start(), 3)
	b, err := r.Read(x.ctx, r.Start(), 1, readLogWait)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	for _, e := range got[1:] {
		if e.Pos.Compare(b.Reached) <= 0 {
			t.Fatalf("a read cut at one entry reached %s, at or past the entry %s it did not return (at %s)", b.Reached, e.ID, e.Pos)
		}
	}
	idle := x.readIdle(r, got[2].Pos)
	later := outboxEntry(outboxLaneB, 4)
	x.commitTx(later)
	next, _ := x.readN(r, idle.Reached, 1)
	if next[0].ID != later.ID || next[0].Pos.Compare(idle.Reached) <= 0 {
		t.Fatalf("after the idle read reached %s, the log gave %s at %s; want %s, after it", idle.Reached, next[0].ID, next[0].Pos, later.ID)
	}
}

// testLogByteBudget: R19. One transaction commits entries of nearly
// outbox.MaxPayloadBytes, more than the byte budget holds. No Read, however
// large its limit, returns an entry past the one whose payload brings the
// total to outbox.MaxScanBytes; reading on after each Reached, as the driver
// does, every entry comes out once, in the order it was written.
//
// A Read may return fewer, when nothing more is ready at once (a stream
// delivers a large transaction message by message), so only the upper bound
// is checked, and that every cut Read reached no entry it did not return.
func testLogByteBudget(t *testing.T, x *logT) {
	r := x.open(1)
	size := outbox.MaxPayloadBytes - 1024
	fit := 0 // entries a Read takes at most: until the total reaches the budget
	for total := 0; outbox.ScanHasRoom(total); total += size {
		fit++
	}
	es := make([]outbox.Entry, fit+3)
	for i := range es {
		es[i] = outbox.Entry{ID: outbox.NewID(), Lane: outboxLaneA, Payload: outboxBigPayload(size)}
	}
	x.commitTx(es...)

	var got []outbox.LogEntry
	after := r.Start()
	deadline := time.Now().Add(x.wait)
	for len(got) < len(es) {
		b, err := r.Read(x.ctx, after, outboxScanAll, readLogWait)
		if err != nil {
			t.Fatalf("Read after %s: %v", after, err)
		}
		x.checkBatch(b, after, outboxScanAll)
		if n := len(b.Entries); n > fit {
			taken := 0
			for _, e := range b.Entries {
				taken += len(e.Payload)
			}
			t.Fatalf("Read(limit %d) over %d entries of %d bytes returned %d entries (%d payload bytes); "+
				"want at most %d: a Read stops once its payloads reach outbox.MaxScanBytes (%d)",
				outboxScanAll, len(es), size, n, taken, fit, outbox.MaxScanBytes)
		}
		got = append(got, b.Entries...)
		after = b.Reached
		if len(got) < len(es) && time.Now().After(deadline) {
			t.Fatalf("after %v, reading on after each Reached, the log gave %d of %d entries: %v; "+
				"a Read cut by the budget must reach no entry it did not return", x.wait, len(got), len(es), logIDs(got))
		}
	}
	if ids := logIDs(got); !slices.Equal(ids, entryIDs(es)) {
		t.Fatalf("reading on after each Reached gave %v, want every entry once, in written order: %v", ids, entryIDs(es))
	}
}

// testLogResume: R8.
func testLogResume(t *testing.T, x *logT) {
	r := x.open(1)
	one, two := outboxEntries(outboxLaneA, 2), outboxEntries(outboxLaneB, 2)
	x.commitTx(one...)
	x.commitTx(two...)
	got, _ := x.readN(r, r.Start(), 4)
	confirmed := got[1].Pos // the end of the first transaction
	if err := r.Confirm(x.ctx, confirmed); err != nil {
		t.Fatalf("Confirm: %v", err)
	}
	if err := r.Close(x.ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r2 := x.open(2)
	if s := r2.Start(); s.LSN != confirmed.LSN {
		t.Fatalf("a reader opened after Confirm(%s) starts at %s, want LSN %d", confirmed, s, confirmed.LSN)
	}
	again, _ := x.readN(r2, r2.Start(), 2)
	if ids := logIDs(again); !slices.Equal(ids, logIDs(got[2:])) {
		t.Fatalf("reading from the new reader's start gave %v, want the second transaction %v", ids, logIDs(got[2:]))
	}
}

// testLogOneReader: R9.
func testLogOneReader(t *testing.T, x *logT) {
	old := x.open(5)
	first := outboxEntry(outboxLaneA, 1)
	x.commitTx(first)
	got, _ := x.readN(old, old.Start(), 1)

	cur := x.open(6)
	second := outboxEntry(outboxLaneB, 2)
	x.commitTx(second)
	fromCur, _ := x.readN(cur, got[0].Pos, 1)
	if fromCur[0].ID != second.ID {
		t.Fatalf("the later term's reader gave %s, want %s", fromCur[0].ID, second.ID)
	}
	if _, err := old.Read(x.ctx, got[0].Pos, 10, readLogWait); !errors.Is(err, outbox.ErrReaderFenced) {
		t.Errorf("the earlier term's Read after a later Open: err = %v, want one wrapping ErrReaderFenced", err)
	}
	_ = old.Confirm(x.ctx, fromCur[0].Pos)

	if _, err := x.log.Open(x.ctx, 4); !errors.Is(err, outbox.ErrReaderFenced) {
		t.Errorf("Open with a token below the current reader's: err = %v, want one wrapping ErrReaderFenced", err)
	}
	third := outboxEntry(outboxLaneA, 3)
	x.commitTx(third)
	still, _ := x.readN(cur, fromCur[0].Pos, 1)
	if still[0].ID != third.ID {
		t.Fatalf("after a refused Open, the current reader gave %s, want %s", still[0].ID, third.ID)
	}
	if err := cur.Close(x.ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	next := x.open(7)
	if next.Start().Compare(got[0].Pos) > 0 {
		t.Fatalf("the earlier term's Confirm moved the log: a new reader starts at %s, past anything the later term confirmed", next.Start())
	}
}

// testLogLost: R15.
func testLogLost(t *testing.T, x *logT) {
	if x.lose == nil {
		t.Skip("the harness cannot lose its log (OutboxLogHarness.Lose is nil); the adapter tests it on its own")
	}
	r := x.open(1)
	x.commitTx(outboxEntry(outboxLaneA, 1))
	got, _ := x.readN(r, r.Start(), 1)
	x.lose(t)
	if _, err := r.Read(x.ctx, got[0].Pos, 10, readLogWait); !errors.Is(err, outbox.ErrLogLost) {
		t.Errorf("Read of a lost log: err = %v, want one wrapping ErrLogLost", err)
	}
	if _, err := x.log.Open(x.ctx, 2); !errors.Is(err, outbox.ErrLogLost) {
		t.Errorf("Open of a lost log: err = %v, want one wrapping ErrLogLost", err)
	}
}
