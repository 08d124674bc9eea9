package conformance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/baton-go/baton/core/outbox"
)

// OutboxProducer begins the transactions entries are enqueued in: for a
// database adapter, the caller's own database transaction with the
// adapter's Enqueue on it.
type OutboxProducer interface {
	Begin(ctx context.Context) (OutboxTx, error)
}

// OutboxTx is one producer transaction.
type OutboxTx interface {
	// Enqueue writes an entry in the transaction. Invalid entries are
	// errors wrapping outbox.ErrInvalidEntry and write nothing.
	Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// OutboxProducerFunc adapts a function to an OutboxProducer, so an
// adapter's harness needs no type of its own. Return a nil OutboxTx (not a
// typed nil pointer) with an error.
type OutboxProducerFunc func(ctx context.Context) (OutboxTx, error)

// Begin implements OutboxProducer.
func (f OutboxProducerFunc) Begin(ctx context.Context) (OutboxTx, error) { return f(ctx) }

// OutboxHarness is what an outbox store's factory returns. Every call must
// return a fresh, empty outbox (for a database, a schema of its own): the
// suite compares cursors and state across a whole subtest, and one subtest
// calls the factory several times to race settlements on an absent state.
type OutboxHarness struct {
	// Store is the store under test.
	Store outbox.Store
	// Producer writes entries into the same outbox, in transactions whose
	// xids come from the same counter as the store's (for PostgreSQL, the
	// same cluster).
	Producer OutboxProducer
	// HoldSettle applies a settlement as Store.Settle does, but stops just
	// before its commit and keeps it open until the returned
	// HeldSettlement ends it: for a database, the settling transaction with
	// everything written and every lock it took still held. Required: the
	// suite enqueues while a park is uncommitted.
	HoldSettle func(ctx context.Context, s outbox.Settlement) (HeldSettlement, error)
}

// HeldSettlement is a settlement applied and not yet committed.
type HeldSettlement interface {
	// Blocking reports whether another transaction (a producer's) is
	// waiting for this one to end.
	Blocking(ctx context.Context) (bool, error)
	// Commit commits the settlement.
	Commit(ctx context.Context) error
	// Rollback undoes it; after Commit it does nothing.
	Rollback(ctx context.Context) error
}

// OutboxFeatures declares what an outbox store cannot do. Every rule of
// the suite holds for every adapter so far, so it has no fields yet; the
// zero value expects everything.
type OutboxFeatures struct{}

// Timing and sizes of the outbox subtests.
const (
	// outboxVisibilityWait bounds how long a committed entry may take to appear
	// to Scan. On PostgreSQL the horizon is cluster-wide: any transaction
	// open anywhere on the server, including other tests', holds it back
	// for a while, so the suite never expects visibility at once.
	outboxVisibilityWait = 10 * time.Second
	// outboxScanAll is a limit larger than any subtest's entry count.
	outboxScanAll = 1000
	// outboxSettleRounds and outboxSettlers shape the race of concurrent settlements.
	outboxSettleRounds = 10
	outboxSettlers     = 8
	// outboxWalkProducers, outboxWalkTxs and outboxWalkBatch shape the walk under load.
	outboxWalkProducers = 6
	outboxWalkTxs       = 15
	outboxWalkBatch     = 7
)

// RunOutboxStore runs the outbox.Store contract, producer included,
// against the stores the factory returns. Subtest names are stable, so a
// failure names the broken rule:
//
// Order and visibility: OpenOlderTransactionHoldsBackNewer,
// EntriesOfOneTransactionComeOutInIDOrder,
// TransactionsComeOutInXIDOrderNotCommitOrder,
// TransactionWithoutWritesHoldsNothingBack, RolledBackEntriesNeverAppear,
// ConcurrentProducersAreWalkedWithoutGaps, ScanHonoursCursorAndLimit,
// ScanStopsAtTheByteBudget.
//
// Producer: EnqueueRejectsInvalidEntries, EnqueueRejectsOversizedPayloads,
// EnqueueRejectsDuplicateIDs, EnqueueRejectsTheIDOfADeadLetter,
// EnqueueOfAnIDBeingParkedIsRefused, TransactionIsDoneAfterCommitOrRollback.
//
// Settlement: SettleIsCompareAndSet, StaleSettleLoses,
// CursorNeverGoesBackwards, ConcurrentFirstSettlesOneWins,
// ParkingMovesEntriesToDeadLetters, ParkingAnUnknownEntryWritesNothing,
// StateUpsertsAndRemovesKeys, SettleRefusesTextNoStoreCanKeep,
// SettleKeepsEveryStorableReasonExactly.
//
// Dead letters: DeadLettersListWithoutPayloadsAndPaginate,
// UnknownDeadLetterIsNotFound, RequeueAppendsAFreshEntry,
// RequeueTwiceIsAlreadyRequeued, RequeueRejectsUsedOrNilIDs.
//
// Retention: DeleteDeliveredStaysAtOrBelowTheCursor,
// DeleteDeliveredHonoursTheWindow, DeleteRequeuedKeepsUnreplayedDeadLetters.
//
// Transaction counter: NextXIDIsAboveEveryCommittedEntry.
//
// Arguments: InvalidArgumentsAreErrors.
//
// Beyond what outbox.Store documents, the suite holds an adapter to these
// rules: dead letters list newest parked first and, parked at the same
// time, by id ascending; a Requeue newID must not be the id of an entry or
// of a dead letter (a requeued entry that reused a dead letter's id could
// never be parked again); DeleteDelivered and DeleteRequeued reject a limit
// below 1 and a negative window; Settle with To before From is an error.
//
// The subtests assert that something is not visible only while they hold
// the older transaction open themselves, or behind a barrier (a later
// entry that has become visible), so they may share a PostgreSQL server
// with other tests. Xids are compared by order only, never by value.
func RunOutboxStore(t *testing.T, factory func(t *testing.T) OutboxHarness, features OutboxFeatures) {
	s := &outboxSuite{factory: factory, f: features}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"OpenOlderTransactionHoldsBackNewer", s.openOlderHoldsBack},
		{"EntriesOfOneTransactionComeOutInIDOrder", s.idOrderWithinTx},
		{"TransactionsComeOutInXIDOrderNotCommitOrder", s.xidOrder},
		{"TransactionWithoutWritesHoldsNothingBack", s.readOnlyTxHoldsNothing},
		{"RolledBackEntriesNeverAppear", s.rolledBack},
		{"ConcurrentProducersAreWalkedWithoutGaps", s.walkWithoutGaps},
		{"ScanHonoursCursorAndLimit", s.scanCursorLimit},
		{"EnqueueRejectsInvalidEntries", s.invalidEntries},
		{"EnqueueRejectsDuplicateIDs", s.duplicateIDs},
		{"EnqueueRejectsTheIDOfADeadLetter", s.deadLetterID},
		{"EnqueueOfAnIDBeingParkedIsRefused", s.enqueueWhileParking},
		{"TransactionIsDoneAfterCommitOrRollback", s.txDone},
		{"SettleIsCompareAndSet", s.settleCAS},
		{"StaleSettleLoses", s.staleSettle},
		{"CursorNeverGoesBackwards", s.cursorForward},
		{"ConcurrentFirstSettlesOneWins", s.concurrentSettles},
		{"ParkingMovesEntriesToDeadLetters", s.parking},
		{"ParkingAnUnknownEntryWritesNothing", s.parkingUnknown},
		{"StateUpsertsAndRemovesKeys", s.stateUpsert},
		{"SettleRefusesTextNoStoreCanKeep", s.unstorableText},
		{"SettleKeepsEveryStorableReasonExactly", s.storableReasons},
		{"DeadLettersListWithoutPayloadsAndPaginate", s.listDead},
		{"UnknownDeadLetterIsNotFound", s.unknownDead},
		{"RequeueAppendsAFreshEntry", s.requeue},
		{"RequeueTwiceIsAlreadyRequeued", s.requeueTwice},
		{"RequeueRejectsUsedOrNilIDs", s.requeueBadIDs},
		{"DeleteDeliveredStaysAtOrBelowTheCursor", s.deleteDeliveredBounds},
		{"DeleteDeliveredHonoursTheWindow", s.deleteDeliveredWindow},
		{"DeleteRequeuedKeepsUnreplayedDeadLetters", s.deleteRequeued},
		{"NextXIDIsAboveEveryCommittedEntry", s.nextXID},
		{"InvalidArgumentsAreErrors", s.invalidArguments},
		{"EnqueueRejectsOversizedPayloads", s.oversizedPayloads},
		{"ScanStopsAtTheByteBudget", s.scanByteBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

type outboxSuite struct {
	factory func(t *testing.T) OutboxHarness
	f       OutboxFeatures
}

func (s *outboxSuite) harness(t *testing.T) OutboxHarness {
	t.Helper()
	h := s.factory(t)
	if h.Store == nil {
		t.Fatal("conformance: the factory returned no Store")
	}
	if h.Producer == nil {
		t.Fatal("conformance: the factory returned no Producer")
	}
	if h.HoldSettle == nil {
		t.Fatal("conformance: the factory returned no HoldSettle")
	}
	return h
}

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

// outboxT is one subtest's outbox and its checked operations.
type outboxT struct {
	t   *testing.T
	ctx context.Context
	h   OutboxHarness
}

func (s *outboxSuite) start(t *testing.T) *outboxT {
	t.Helper()
	return &outboxT{t: t, ctx: testCtx(t), h: s.harness(t)}
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

func (x *outboxT) enqueue(tx OutboxTx, es ...outbox.Entry) {
	x.t.Helper()
	for _, e := range es {
		if err := tx.Enqueue(x.ctx, e.ID, e.Lane, e.Payload); err != nil {
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
// fails after outboxVisibilityWait; it returns the last result.
func (x *outboxT) await(after outbox.Cursor, want ...outbox.ID) []outbox.Entry {
	x.t.Helper()
	deadline := time.Now().Add(outboxVisibilityWait)
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
			x.t.Fatalf("%d of %d committed entries did not appear to Scan within %v; the last scan had %d entries", missing, len(want), outboxVisibilityWait, len(got))
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
	if withPayload && !samePayload(d.Payload, e.Payload) {
		x.t.Errorf("dead letter %s has payload %s, want the JSON value %s", d.ID, d.Payload, e.Payload)
	}
}

// openOlderHoldsBack: A writes first and stays open; B writes later and
// commits. B's entry is above the horizon until A ends; then both walk,
// A's first.
func (s *outboxSuite) openOlderHoldsBack(t *testing.T) {
	x := s.start(t)
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
func (s *outboxSuite) idOrderWithinTx(t *testing.T) {
	x := s.start(t)
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
func (s *outboxSuite) xidOrder(t *testing.T) {
	x := s.start(t)
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
func (s *outboxSuite) readOnlyTxHoldsNothing(t *testing.T) {
	x := s.start(t)
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

func (s *outboxSuite) rolledBack(t *testing.T) {
	x := s.start(t)
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
// whose scan passes a transaction that is still open loses its entries.
func (s *outboxSuite) walkWithoutGaps(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx

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
		cur  outbox.Cursor
		seen = map[outbox.ID]outbox.Entry{}
	)
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
	deadline := time.Now().Add(outboxVisibilityWait)
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
			t.Fatalf("%d of %d committed entries did not appear to Scan within %v", missing, len(committed), outboxVisibilityWait)
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

func (s *outboxSuite) scanCursorLimit(t *testing.T) {
	x := s.start(t)
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

func (s *outboxSuite) invalidEntries(t *testing.T) {
	x := s.start(t)
	ctx := x.ctx
	ok1, ok2 := outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2)
	tx := x.begin()
	x.enqueue(tx, ok1)
	valid := []byte(`{"n": 1}`)
	for _, tc := range []struct {
		name    string
		id      outbox.ID
		lane    string
		payload []byte
	}{
		{"nil id", outbox.NilID, outboxLaneA, valid},
		{"empty lane", outbox.NewID(), "", valid},
		{"lane with a NUL byte", outbox.NewID(), "a\x00b", valid},
		{"lane not UTF-8", outbox.NewID(), "a\xffb", valid},
		{"lane of 129 bytes", outbox.NewID(), strings.Repeat("l", outbox.MaxLaneLength+1), valid},
		{"empty payload", outbox.NewID(), outboxLaneA, nil},
		{"payload not JSON", outbox.NewID(), outboxLaneA, []byte(`{"n": 1`)},
		{"two JSON values", outbox.NewID(), outboxLaneA, []byte(`{} {}`)},
		{"payload with \\u0000", outbox.NewID(), outboxLaneA, []byte(`{"s": "a\u0000b"}`)},
		{"payload not UTF-8", outbox.NewID(), outboxLaneA, []byte("{\"s\": \"a\xffb\"}")},
	} {
		if err := tx.Enqueue(ctx, tc.id, tc.lane, tc.payload); !errors.Is(err, outbox.ErrInvalidEntry) {
			t.Errorf("Enqueue with %s: err = %v, want one wrapping outbox.ErrInvalidEntry", tc.name, err)
		}
	}
	// The longest lane is fine.
	long := outboxEntry(strings.Repeat("l", outbox.MaxLaneLength), 3)
	x.enqueue(tx, ok2, long)
	x.commit(tx)
	got := x.await(outbox.Cursor{}, ok1.ID, ok2.ID, long.ID)
	x.checkEntries("the transaction's valid entries", got, entriesByID(ok1, ok2, long)...)
}

func (s *outboxSuite) duplicateIDs(t *testing.T) {
	x := s.start(t)
	ctx := x.ctx
	e := outboxEntry(outboxLaneA, 1)
	x.commitTx(e)

	tx := x.begin()
	if err := tx.Enqueue(ctx, e.ID, outboxLaneB, []byte(`{"copy": true}`)); !errors.Is(err, outbox.ErrIDInUse) {
		t.Errorf("Enqueue of the id of a committed entry: err = %v, want outbox.ErrIDInUse", err)
	}
	_ = tx.Rollback(ctx)

	dup := outboxEntry(outboxLaneB, 2)
	tx = x.begin()
	x.enqueue(tx, dup)
	if err := tx.Enqueue(ctx, dup.ID, outboxLaneA, []byte(`{"copy": true}`)); !errors.Is(err, outbox.ErrIDInUse) {
		t.Errorf("Enqueue of an id already enqueued in the same transaction: err = %v, want outbox.ErrIDInUse", err)
	}
	_ = tx.Rollback(ctx)

	got := withoutBarriers(x.barrier())
	x.checkEntries("after the duplicates", got, e)
}

// deadLetterID: an entry whose id a dead letter has could never be parked
// (the dead letters are keyed by id), so Enqueue refuses it with
// outbox.ErrIDInUse, and the transaction can still commit its other work.
func (s *outboxSuite) deadLetterID(t *testing.T) {
	x := s.start(t)
	ctx := x.ctx
	p := outboxEntry(outboxLaneA, 1)
	x.commitTx(p)
	all := x.await(outbox.Cursor{}, p.ID)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: all[len(all)-1].Cursor(),
		Park: []outbox.Parked{{Entry: x.find(all, p.ID), Reason: "rejected"}}})

	other := outboxEntry(outboxLaneB, 2)
	tx := x.begin()
	if err := tx.Enqueue(ctx, p.ID, outboxLaneA, []byte(`{"again": true}`)); !errors.Is(err, outbox.ErrIDInUse) {
		t.Errorf("Enqueue of a dead letter's id: err = %v, want outbox.ErrIDInUse", err)
	}
	x.enqueue(tx, other)
	x.commit(tx)
	got := x.beyond(withoutBarriers(x.barrier()))
	x.checkEntries("after the refused enqueue", got, other)
	if d := x.getDead(p.ID); d.Error != "rejected" || !d.RequeuedAs.IsNil() {
		t.Errorf("the dead letter changed: %+v", d)
	}
}

// enqueueWhileParking: while the settlement that parks entry X is open,
// a producer enqueues X again. Whether its statement runs before the park
// commits, waits for it, or runs after, it must be refused with
// outbox.ErrIDInUse: had it gone through, X would be both an entry and a
// dead letter, and parking the new X later would fail every settlement.
func (s *outboxSuite) enqueueWhileParking(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntry(outboxLaneA, 1))
	held, err := h.HoldSettle(ctx, outbox.Settlement{From: outbox.Cursor{}, To: es[0].Cursor(), Park: parkAll("parked", es[0])})
	if err != nil {
		t.Fatalf("HoldSettle: %v", err)
	}
	defer func() { _ = held.Rollback(context.WithoutCancel(ctx)) }()

	tx := x.begin()
	result := make(chan error, 1)
	go func() { result <- tx.Enqueue(ctx, es[0].ID, outboxLaneB, []byte(`{"again": true}`)) }()
	var (
		answered bool
		err1     error
	)
	for deadline := time.Now().Add(outboxVisibilityWait); !answered; time.Sleep(5 * time.Millisecond) {
		select {
		case err1 = <-result:
			answered = true
			continue
		default:
		}
		blocked, err := held.Blocking(ctx)
		if err != nil {
			t.Fatalf("Blocking: %v", err)
		}
		if blocked {
			break // the enqueue waits for the settlement to end
		}
		if time.Now().After(deadline) {
			t.Fatalf("the enqueue neither answered nor waited for the open settlement within %v", outboxVisibilityWait)
		}
	}
	if answered && !errors.Is(err1, outbox.ErrIDInUse) {
		t.Fatalf("Enqueue of the id of an entry whose park is not yet committed: err = %v, want outbox.ErrIDInUse", err1)
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatalf("committing the held settlement: %v", err)
	}
	if !answered {
		select {
		case err1 = <-result:
		case <-time.After(outboxVisibilityWait):
			t.Fatal("the enqueue still waits after the settlement committed")
		}
		if !errors.Is(err1, outbox.ErrIDInUse) {
			t.Fatalf("Enqueue that waited for the park of its id to commit: err = %v, want outbox.ErrIDInUse", err1)
		}
	}
	_ = tx.Rollback(ctx)

	again := x.begin()
	if err := again.Enqueue(ctx, es[0].ID, outboxLaneB, []byte(`{"again": true}`)); !errors.Is(err, outbox.ErrIDInUse) {
		t.Fatalf("Enqueue of a parked id after the park committed: err = %v, want outbox.ErrIDInUse", err)
	}
	_ = again.Rollback(ctx)
	if rest := x.beyond(withoutBarriers(x.barrier())); len(rest) != 0 {
		t.Fatalf("after the park the walk has %v beyond the cursor; want nothing", entryIDs(rest))
	}
	x.checkDead(x.getDead(es[0].ID), es[0], "parked "+es[0].ID.String(), true)
}

func (s *outboxSuite) txDone(t *testing.T) {
	x := s.start(t)
	ctx := x.ctx
	a, late, c, d := outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneA, 2), outboxEntry(outboxLaneB, 3), outboxEntry(outboxLaneB, 4)

	tx := x.begin()
	x.enqueue(tx, a)
	x.commit(tx)
	if err := tx.Enqueue(ctx, late.ID, late.Lane, late.Payload); err == nil {
		t.Errorf("Enqueue after Commit succeeded")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Errorf("a second Commit succeeded")
	}

	tx = x.begin()
	x.enqueue(tx, c)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if err := tx.Enqueue(ctx, d.ID, d.Lane, d.Payload); err == nil {
		t.Errorf("Enqueue after Rollback succeeded")
	}
	if err := tx.Commit(ctx); err == nil {
		t.Errorf("Commit after Rollback succeeded")
	}

	got := withoutBarriers(x.barrier())
	x.checkEntries("after using ended transactions", got, a)
}

// settleCAS: two settlements from the same cursor; the second finds it
// moved and writes nothing, neither its parking nor its state.
func (s *outboxSuite) settleCAS(t *testing.T) {
	x := s.start(t)
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
}

// staleSettle: once the cursor has moved on, settlements from any cursor
// but the stored one lose, whether behind it or ahead of it.
func (s *outboxSuite) staleSettle(t *testing.T) {
	x := s.start(t)
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

func (s *outboxSuite) cursorForward(t *testing.T) {
	x := s.start(t)
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
func (s *outboxSuite) concurrentSettles(t *testing.T) {
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

func (s *outboxSuite) parking(t *testing.T) {
	x := s.start(t)
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
func (s *outboxSuite) parkingUnknown(t *testing.T) {
	x := s.start(t)
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
}

func (s *outboxSuite) stateUpsert(t *testing.T) {
	x := s.start(t)
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
func (s *outboxSuite) unstorableText(t *testing.T) {
	x := s.start(t)
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
func (s *outboxSuite) storableReasons(t *testing.T) {
	x := s.start(t)
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

func firstDifference(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// listDead: dead letters list newest parked first (then by id), without
// payloads, and page with Before.
func (s *outboxSuite) listDead(t *testing.T) {
	x := s.start(t)
	es := entriesByID(outboxEntries(outboxLaneA, 5)...)
	x.commitTx(es...)
	es = x.await(outbox.Cursor{}, entryIDs(es)...)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[1].Cursor(), Park: parkAll("early", es[0], es[1])})
	time.Sleep(20 * time.Millisecond) // a later parked_at, at any clock resolution a store is likely to have
	x.settle(outbox.Settlement{From: es[1].Cursor(), To: es[4].Cursor(), Park: parkAll("late", es[2], es[3], es[4])})

	all := x.listDead(outbox.ListOptions{})
	if len(all) != 5 {
		t.Fatalf("ListDead returned %d dead letters, want 5", len(all))
	}
	for i := 1; i < len(all); i++ {
		a, b := all[i-1], all[i]
		if a.ParkedAt.Before(b.ParkedAt) || a.ParkedAt.Equal(b.ParkedAt) && a.ID.Compare(b.ID) >= 0 {
			t.Fatalf("ListDead order: %s parked at %v before %s parked at %v; want newest parked first, then by id", a.ID, a.ParkedAt, b.ID, b.ParkedAt)
		}
	}
	late, early := deadIDs(all[:3]), deadIDs(all[3:])
	slices.SortFunc(late, outbox.ID.Compare)
	slices.SortFunc(early, outbox.ID.Compare)
	if !slices.Equal(late, entryIDs(es[2:])) || !slices.Equal(early, entryIDs(es[:2])) {
		t.Fatalf("ListDead listed %v; want the three parked last (%v) before the two parked first (%v)", deadIDs(all), entryIDs(es[2:]), entryIDs(es[:2]))
	}
	for _, d := range all {
		e := x.find(es, d.ID)
		reason := "late " + e.ID.String()
		if slices.Contains(early, e.ID) {
			reason = "early " + e.ID.String()
		}
		x.checkDead(d, e, reason, false)
	}

	var paged []outbox.DeadLetter
	opts := outbox.ListOptions{Limit: 2}
	for range 4 {
		page := x.listDead(opts)
		paged = append(paged, page...)
		if len(page) == 0 {
			break
		}
		opts.Before = page[len(page)-1].ID
	}
	if !slices.Equal(deadIDs(paged), deadIDs(all)) {
		t.Fatalf("pages of 2 listed %v; want the full listing %v", deadIDs(paged), deadIDs(all))
	}
	if rest := x.listDead(outbox.ListOptions{Before: all[4].ID}); len(rest) != 0 {
		t.Fatalf("ListDead after the oldest dead letter returned %d", len(rest))
	}
	if one := x.listDead(outbox.ListOptions{Limit: 1, Before: all[1].ID}); len(one) != 1 || one[0].ID != all[2].ID {
		t.Fatalf("ListDead(limit 1, before the 2nd) = %v, want the 3rd, %s", deadIDs(one), all[2].ID)
	}
	if got := x.listDead(outbox.ListOptions{Limit: outbox.MaxListLimit}); len(got) != 5 {
		t.Fatalf("ListDead(limit MaxListLimit) returned %d, want 5", len(got))
	}
}

func (s *outboxSuite) unknownDead(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntry(outboxLaneA, 1))
	x.notDead(outbox.NewID())
	x.notDead(es[0].ID) // in the outbox, not dead
	if err := h.Store.Requeue(ctx, outbox.NewID(), outbox.NewID()); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Requeue of an unknown dead letter: err = %v, want one wrapping outbox.ErrNotFound", err)
	}
	if err := h.Store.Requeue(ctx, es[0].ID, outbox.NewID()); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("Requeue of an entry that is not a dead letter: err = %v, want one wrapping outbox.ErrNotFound", err)
	}
	got := withoutBarriers(x.barrier())
	x.checkEntries("after requeues of unknown dead letters", got, es...)
}

// requeue: the requeued entry gets the new id and goes to the end of the
// walk, after everything committed before; the dead letter records it.
func (s *outboxSuite) requeue(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	es := x.parkFirst(outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2))
	cur := x.cursor()
	newID := outbox.NewID()
	if err := h.Store.Requeue(ctx, es[0].ID, newID); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	got := x.await(cur, newID)
	again := es[0]
	again.ID = newID
	x.checkEntries("after the requeue", got, es[1], again)
	if got[1].XID <= es[1].XID {
		t.Errorf("the requeued entry has xid %d, not above the earlier entry's %d; it must go to the end of the order", got[1].XID, es[1].XID)
	}
	d := x.getDead(es[0].ID)
	x.checkDead(d, es[0], "parked "+es[0].ID.String(), true)
	if d.RequeuedAt.IsZero() || d.RequeuedAt.Before(d.ParkedAt) {
		t.Errorf("the dead letter's RequeuedAt is %v, want the requeue time (parked at %v)", d.RequeuedAt, d.ParkedAt)
	}
	if d.RequeuedAs != newID {
		t.Errorf("the dead letter's RequeuedAs is %s, want the new id %s", d.RequeuedAs, newID)
	}
	listed := x.listDead(outbox.ListOptions{})
	if len(listed) != 1 || listed[0].RequeuedAs != newID {
		t.Errorf("ListDead = %+v, want the one dead letter with RequeuedAs %s", listed, newID)
	}
	// A later entry walks after the requeued one.
	later := outboxEntry(outboxLaneA, 3)
	x.commitTx(later)
	got = x.await(cur, later.ID)
	x.checkEntries("after a later commit", got, es[1], again, later)
}

func (s *outboxSuite) requeueTwice(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	es := x.parkFirst(outboxEntry(outboxLaneA, 1))
	first, second := outbox.NewID(), outbox.NewID()
	if err := h.Store.Requeue(ctx, es[0].ID, first); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if err := h.Store.Requeue(ctx, es[0].ID, second); !errors.Is(err, outbox.ErrAlreadyRequeued) {
		t.Fatalf("a second Requeue: err = %v, want one wrapping outbox.ErrAlreadyRequeued", err)
	}
	if d := x.getDead(es[0].ID); d.RequeuedAs != first {
		t.Errorf("after a refused second requeue, RequeuedAs is %s, want the first requeue's %s", d.RequeuedAs, first)
	}
	got := x.beyond(withoutBarriers(x.barrier()))
	again := es[0]
	again.ID = first
	x.checkEntries("after requeueing twice", got, again)
}

func (s *outboxSuite) requeueBadIDs(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	es := x.parkFirst(outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2), outboxEntry(outboxLaneA, 3))
	// A second dead letter, whose id is as used as any.
	x.settle(outbox.Settlement{From: es[0].Cursor(), To: es[1].Cursor(), Park: parkAll("parked", es[1])})
	for _, tc := range []struct {
		name  string
		newID outbox.ID
	}{
		{"the nil id", outbox.NilID},
		{"the id of an entry in the outbox", es[2].ID},
		{"the dead letter's own id", es[0].ID},
		{"the id of another dead letter", es[1].ID},
	} {
		if err := h.Store.Requeue(ctx, es[0].ID, tc.newID); err == nil {
			t.Errorf("Requeue with %s as the new id succeeded", tc.name)
		}
	}
	if d := x.getDead(es[0].ID); !d.RequeuedAs.IsNil() {
		t.Fatalf("refused requeues recorded RequeuedAs %s", d.RequeuedAs)
	}
	got := x.beyond(withoutBarriers(x.barrier()))
	x.checkEntries("after refused requeues", got, es[2])

	// Nothing was used up: a good id still works.
	newID := outbox.NewID()
	if err := h.Store.Requeue(ctx, es[0].ID, newID); err != nil {
		t.Fatalf("Requeue after refused ones: %v", err)
	}
	x.await(outbox.Cursor{}, newID)
}

// deleteDeliveredBounds: with entries below and above the cursor (which
// sits inside a transaction's entries), deletes take at most the batch
// size, only at or below the cursor, and run dry there.
func (s *outboxSuite) deleteDeliveredBounds(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	first := entriesByID(outboxEntries(outboxLaneA, 3)...)
	second := entriesByID(outboxEntries(outboxLaneB, 2)...)
	x.commitTx(first...)
	x.commitTx(second...)
	all := x.await(outbox.Cursor{}, entryIDs(slices.Concat(first, second))...)
	cur := all[1].Cursor()
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: cur})

	if n, err := h.Store.DeleteDelivered(ctx, outbox.Cursor{}, 0, 100); err != nil || n != 0 {
		t.Fatalf("DeleteDelivered(up to the start) = %d, %v; want 0", n, err)
	}
	below := 2 // entries at or below the cursor
	for i, want := range []int{1, 1, 0, 0} {
		n, err := h.Store.DeleteDelivered(ctx, cur, 0, 1)
		if err != nil {
			t.Fatalf("DeleteDelivered #%d: %v", i+1, err)
		}
		if n != want {
			t.Fatalf("DeleteDelivered #%d (limit 1, %d at or below the cursor) deleted %d, want %d", i+1, below, n, want)
		}
		below -= want
		left := x.scan(outbox.Cursor{}, outboxScanAll)
		above := 0
		for _, e := range left {
			if e.Cursor().Compare(cur) > 0 {
				above++
			}
		}
		if above != 3 || len(left) != 3+below {
			t.Fatalf("after DeleteDelivered #%d: %d entries left, %d above the cursor; want %d, of which 3 above", i+1, len(left), above, 3+below)
		}
	}
	x.checkEntries("after draining", x.scan(outbox.Cursor{}, outboxScanAll), all[2:]...)
	if n, err := h.Store.DeleteDelivered(ctx, cur, 0, 100); err != nil || n != 0 {
		t.Fatalf("DeleteDelivered after draining = %d, %v; want 0", n, err)
	}
	// Deleted entries leave no trace anywhere else.
	for _, e := range all[:2] {
		x.notDead(e.ID)
	}
}

func (s *outboxSuite) deleteDeliveredWindow(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 3)...)
	cur := es[2].Cursor()
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: cur})
	if n, err := h.Store.DeleteDelivered(ctx, cur, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("DeleteDelivered(window 1h) of entries just written = %d, %v; want 0", n, err)
	}
	x.checkEntries("after a delete within the window", x.scan(outbox.Cursor{}, outboxScanAll), es...)
	if n, err := h.Store.DeleteDelivered(ctx, cur, 0, 100); err != nil || n != 3 {
		t.Fatalf("DeleteDelivered(window 0) = %d, %v; want all 3", n, err)
	}
	x.checkEntries("after a delete past the window", x.scan(outbox.Cursor{}, outboxScanAll))
}

func (s *outboxSuite) deleteRequeued(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	es := x.visible(outboxEntries(outboxLaneA, 4)...)
	x.settle(outbox.Settlement{From: outbox.Cursor{}, To: es[3].Cursor(), Park: parkAll("parked", es...)})
	requeued := make([]outbox.ID, 3)
	for i := range requeued {
		requeued[i] = outbox.NewID()
		if err := h.Store.Requeue(ctx, es[i].ID, requeued[i]); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
	}
	unreplayed := es[3]

	if n, err := h.Store.DeleteRequeued(ctx, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("DeleteRequeued(window 1h) of dead letters just parked = %d, %v; want 0", n, err)
	}
	for i, want := range []int{2, 1, 0} {
		if n, err := h.Store.DeleteRequeued(ctx, 0, 2); err != nil || n != want {
			t.Fatalf("DeleteRequeued #%d (window 0, limit 2) = %d, %v; want %d", i+1, n, err, want)
		}
	}
	for _, e := range es[:3] {
		x.notDead(e.ID)
	}
	x.checkDead(x.getDead(unreplayed.ID), unreplayed, "parked "+unreplayed.ID.String(), true)
	if ds := x.listDead(outbox.ListOptions{}); len(ds) != 1 || ds[0].ID != unreplayed.ID {
		t.Fatalf("after deleting requeued dead letters ListDead = %v, want only the unreplayed %s", deadIDs(ds), unreplayed.ID)
	}
	// The entries they were requeued as are untouched.
	x.await(es[3].Cursor(), requeued...)
}

// nextXID: the transaction counter is above the xid of every entry
// committed before it was read, and it never goes back. The driver
// compares the stored cursor with it: a cursor at or above it cannot come
// from this database (a logical restore into another cluster).
func (s *outboxSuite) nextXID(t *testing.T) {
	x := s.start(t)
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

func (s *outboxSuite) invalidArguments(t *testing.T) {
	x := s.start(t)
	h, ctx := x.h, x.ctx
	for _, limit := range []int{0, -1} {
		if got, err := h.Store.Scan(ctx, outbox.Cursor{}, limit); err == nil {
			t.Errorf("Scan with limit %d returned %d entries and no error", limit, len(got))
		}
		if n, err := h.Store.DeleteDelivered(ctx, outbox.Cursor{XID: 1}, time.Hour, limit); err == nil {
			t.Errorf("DeleteDelivered with limit %d returned %d and no error", limit, n)
		}
		if n, err := h.Store.DeleteRequeued(ctx, time.Hour, limit); err == nil {
			t.Errorf("DeleteRequeued with limit %d returned %d and no error", limit, n)
		}
	}
	if n, err := h.Store.DeleteDelivered(ctx, outbox.Cursor{XID: 1}, -time.Second, 10); err == nil {
		t.Errorf("DeleteDelivered with a negative window returned %d and no error", n)
	}
	if n, err := h.Store.DeleteRequeued(ctx, -time.Second, 10); err == nil {
		t.Errorf("DeleteRequeued with a negative window returned %d and no error", n)
	}
	for _, limit := range []int{-1, outbox.MaxListLimit + 1} {
		if ds, err := h.Store.ListDead(ctx, outbox.ListOptions{Limit: limit}); err == nil {
			t.Errorf("ListDead with limit %d returned %d and no error", limit, len(ds))
		}
	}
}
