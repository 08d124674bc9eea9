package conformance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// Order and visibility: entries walk in (xid, id) order, and only from
// below the horizon, whatever order transactions begin, write and end in.

func (s *outboxSuite) orderChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"OpenOlderTransactionHoldsBackNewer", s.openOlderHoldsBack},
		subtest[*outboxT]{"EntriesOfOneTransactionComeOutInIDOrder", s.idOrderWithinTx},
		subtest[*outboxT]{"TransactionsComeOutInXIDOrderNotCommitOrder", s.xidOrder},
		subtest[*outboxT]{"TransactionWithoutWritesHoldsNothingBack", s.readOnlyTxHoldsNothing},
		subtest[*outboxT]{"RolledBackEntriesNeverAppear", s.rolledBack},
		subtest[*outboxT]{"ConcurrentProducersAreWalkedWithoutGaps", s.walkWithoutGaps},
	)
}

// openOlderHoldsBack: A writes first and stays open; B writes later and
// commits. B's entry is above the horizon until A ends; then both walk,
// A's first.
func (s *outboxSuite) openOlderHoldsBack(t *testing.T, x *outboxT) {
	a1, a2, b1 := outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneA, 2), outboxEntry(outboxLaneB, 1)

	txA := x.begin()
	x.enqueue(txA, a1)
	txB := x.begin()
	x.enqueue(txB, b1)
	x.commit(txB)
	for range 3 {
		if got := x.scan(outbox.Cursor{}, outboxScanAll); len(got) != 0 {
			t.Fatalf("while an older transaction is open, Scan returned %v; the newer committed entry %s is above the horizon (and the open one's %s is uncommitted)", entryIDs(got), b1.ID, a1.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	x.enqueue(txA, a2)
	x.commit(txA)

	got := x.await(outbox.Cursor{}, a1.ID, a2.ID, b1.ID)
	x.checkEntries("after the older transaction committed", got, append(entriesByID(a1, a2), b1)...)
	if got[0].XID != got[1].XID || got[1].XID >= got[2].XID {
		t.Errorf("xids %d, %d, %d: the older transaction's two entries must share an xid below the newer one's", got[0].XID, got[1].XID, got[2].XID)
	}
}

// idOrderWithinTx: entries of one transaction share its xid and walk in id
// order, whatever order they were written in.
func (s *outboxSuite) idOrderWithinTx(t *testing.T, x *outboxT) {
	es := entriesByID(outboxEntries(outboxLaneA, 6)...)
	written := slices.Clone(es)
	slices.Reverse(written)
	written[1], written[4] = written[4], written[1]
	x.commitTx(written...)

	got := x.await(outbox.Cursor{}, entryIDs(es)...)
	x.checkEntries("one transaction", got, es...)
	for _, e := range got[1:] {
		if e.XID != got[0].XID {
			t.Fatalf("entries of one transaction have xids %d and %d; they share the transaction's", got[0].XID, e.XID)
		}
	}
}

// xidOrder: C begins first but writes last, A writes first, B second; they
// commit B, C, A. The walk follows the first writes: A, B, C.
func (s *outboxSuite) xidOrder(t *testing.T, x *outboxT) {
	a, b, c := outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2), outboxEntry(outboxLaneA, 3)
	a2, b2 := outboxEntry(outboxLaneA, 4), outboxEntry(outboxLaneB, 5)

	txC := x.begin()
	txA := x.begin()
	x.enqueue(txA, a)
	txB := x.begin()
	x.enqueue(txB, b)
	x.enqueue(txC, c)
	x.enqueue(txA, a2) // later writes keep the first write's place
	x.enqueue(txB, b2)
	x.commit(txB)
	x.commit(txC)
	x.commit(txA)

	got := x.await(outbox.Cursor{}, a.ID, a2.ID, b.ID, b2.ID, c.ID)
	want := slices.Concat(entriesByID(a, a2), entriesByID(b, b2), []outbox.Entry{c})
	x.checkEntries("transactions that began C, A, B, wrote A, B, C and committed B, C, A", got, want...)
	if got[0].XID != got[1].XID || got[2].XID != got[3].XID || !(got[1].XID < got[2].XID && got[3].XID < got[4].XID) {
		t.Errorf("xids %d %d %d %d %d: each transaction needs an xid of its own, in the order of their first writes",
			got[0].XID, got[1].XID, got[2].XID, got[3].XID, got[4].XID)
	}
}

// readOnlyTxHoldsNothing: a transaction that has begun but not written has
// no xid yet, so it holds nothing back.
func (s *outboxSuite) readOnlyTxHoldsNothing(t *testing.T, x *outboxT) {
	idle := x.begin()
	e := outboxEntry(outboxLaneA, 1)
	x.commitTx(e)
	got := x.await(outbox.Cursor{}, e.ID)
	x.checkEntries("while an older transaction without writes is open", got, e)

	// Its first write comes after e, so it walks after e.
	late := outboxEntry(outboxLaneB, 2)
	x.enqueue(idle, late)
	x.commit(idle)
	got = x.await(outbox.Cursor{}, late.ID)
	x.checkEntries("after it wrote and committed", got, e, late)
}

func (s *outboxSuite) rolledBack(t *testing.T, x *outboxT) {
	ctx := x.ctx
	kept := outboxEntry(outboxLaneA, 1)
	gone := outboxEntries(outboxLaneB, 3)

	// One rolled back after its writes, one rolled back while a later
	// transaction committed, one rolled back without having written.
	tx1 := x.begin()
	x.enqueue(tx1, gone[0], gone[1])
	if err := tx1.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	tx2 := x.begin()
	x.enqueue(tx2, gone[2])
	x.commitTx(kept)
	if err := tx2.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	tx3 := x.begin()
	if err := tx3.Rollback(ctx); err != nil {
		t.Fatalf("Rollback of a transaction without writes: %v", err)
	}

	got := withoutBarriers(x.barrier())
	x.checkEntries("after rollbacks", got, kept)
}

// walkWithoutGaps: producers commit and roll back concurrently, holding
// their transactions open for a moment, while a walker scans in small
// batches and moves its cursor to the last entry of each. Every committed
// entry must be walked exactly once and no rolled-back one ever: a store
// walkWithoutGaps: with several transactions open at once, the walk never
// passes one of them. First a staircase, step by step: X writes, Y writes,
// Z writes, Y commits; Y is above the horizon, which X holds, and nothing
// shows until X ends, whatever Z does. Then producers commit and roll back
// concurrently, holding their transactions open for a moment, while a
// walker scans in small batches and moves its cursor to the last entry of
// each. Every committed entry must be walked exactly once and no
// rolled-back one ever: a store whose scan passes a transaction that is
// still open loses its entries.
func (s *outboxSuite) walkWithoutGaps(t *testing.T, x *outboxT) {
	h, ctx := x.h, x.ctx
	stairs := x.staircase()

	type txRecord struct {
		ids       []outbox.ID
		committed bool
	}
	var (
		mu      sync.Mutex
		txs     []txRecord
		wg      sync.WaitGroup
		errs    = make(chan error, outboxWalkProducers)
		stopped = make(chan struct{})
	)
	for g := range outboxWalkProducers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range outboxWalkTxs {
				tx, err := h.Producer.Begin(ctx)
				if err != nil {
					errs <- fmt.Errorf("producer %d, tx %d: Begin: %w", g, i, err)
					return
				}
				rec := txRecord{committed: rng.IntN(5) != 0}
				for k := range 1 + rng.IntN(3) {
					e := outboxEntry(outboxLaneA, g*1000+i*10+k)
					if err := tx.Enqueue(ctx, e.ID, e.Lane, e.Payload); err != nil {
						_ = tx.Rollback(ctx)
						errs <- fmt.Errorf("producer %d, tx %d: Enqueue: %w", g, i, err)
						return
					}
					rec.ids = append(rec.ids, e.ID)
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				if rec.committed {
					err = tx.Commit(ctx)
				} else {
					err = tx.Rollback(ctx)
				}
				if err != nil {
					errs <- fmt.Errorf("producer %d, tx %d: end: %w", g, i, err)
					return
				}
				mu.Lock()
				txs = append(txs, rec)
				mu.Unlock()
			}
		})
	}
	t.Cleanup(wg.Wait) // a failing walk still waits for its producers
	go func() { wg.Wait(); close(stopped) }()

	// The walker moves its cursor to the last entry of every batch, as the
	// driver does after a pass that delivered everything.
	var (
		cur  = stairs[len(stairs)-1].Cursor()
		seen = map[outbox.ID]outbox.Entry{}
	)
	for _, e := range stairs {
		seen[e.ID] = e
	}
	step := func() int {
		got := x.scan(cur, outboxWalkBatch)
		for _, e := range got {
			if _, twice := seen[e.ID]; twice {
				t.Fatalf("the walk met entry %s twice", e.ID)
			}
			seen[e.ID] = e
		}
		if len(got) > 0 {
			cur = got[len(got)-1].Cursor()
		}
		return len(got)
	}
	for running := true; running; {
		select {
		case <-stopped:
			running = false
		default:
		}
		if step() < outboxWalkBatch {
			time.Sleep(500 * time.Microsecond)
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	var committed []outbox.ID
	for _, rec := range txs {
		if rec.committed {
			committed = append(committed, rec.ids...)
		}
	}
	// Every producer has ended: the walk must catch up with all of it. An
	// unwalked entry that Scan shows behind the cursor never will be.
	deadline := time.Now().Add(x.wait)
	for {
		for step() == outboxWalkBatch {
		}
		missing := 0
		for _, id := range committed {
			if _, ok := seen[id]; !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		behind := 0
		for _, e := range x.scan(outbox.Cursor{}, outboxScanAll) {
			if _, ok := seen[e.ID]; !ok && e.Cursor().Compare(cur) < 0 {
				behind++
			}
		}
		if behind > 0 {
			t.Fatalf("%d committed entries are in the outbox behind the walk's cursor and were never walked: a scan passed them while their transaction was still open", behind)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d committed entries did not appear to Scan within %v", missing, len(committed), x.wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, rec := range txs {
		var xid uint64
		for _, id := range rec.ids {
			e, ok := seen[id]
			switch {
			case ok && !rec.committed:
				t.Fatalf("the walk met entry %s of a rolled-back transaction", id)
			case ok && xid != 0 && e.XID != xid:
				t.Fatalf("entries of one transaction were walked with xids %d and %d", xid, e.XID)
			case ok:
				xid = e.XID
			}
		}
	}
	t.Logf("walked %d entries of %d transactions", len(seen), len(txs))
}

// staircase opens three transactions whose first writes go X, Y, Z, and
// commits Y, then Z, then X, checking after each commit that nothing walks
// before X has ended. It returns the three entries as walked.
func (x *outboxT) staircase() []outbox.Entry {
	x.t.Helper()
	ex, ey, ez := outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2), outboxEntry(outboxLaneA, 3)
	tx, ty, tz := x.begin(), x.begin(), x.begin()
	x.enqueue(tx, ex)
	x.enqueue(ty, ey)
	x.enqueue(tz, ez)
	x.commit(ty)
	if got := x.scan(outbox.Cursor{}, outboxScanAll); len(got) != 0 {
		x.t.Fatalf("with the oldest transaction still open, Scan returned %v; %s committed above the horizon it holds", entryIDs(got), ey.ID)
	}
	x.commit(tz)
	if got := x.scan(outbox.Cursor{}, outboxScanAll); len(got) != 0 {
		x.t.Fatalf("with the oldest transaction still open, Scan returned %v after a newer one committed", entryIDs(got))
	}
	x.commit(tx)
	got := x.await(outbox.Cursor{}, ex.ID, ey.ID, ez.ID)
	x.checkEntries("the staircase, once its oldest transaction committed", got, ex, ey, ez)
	return got
}
