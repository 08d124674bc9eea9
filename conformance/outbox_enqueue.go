package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// Enqueue, the producer side: what it refuses, and when a transaction is
// done.

func (s *outboxSuite) enqueueChecks() []check {
	return area(s.start,
		subtest[*outboxT]{"EnqueueRejectsInvalidEntries", s.invalidEntries},
		subtest[*outboxT]{"EnqueueRejectsOversizedPayloads", s.oversizedPayloads},
		subtest[*outboxT]{"EnqueueRejectsDuplicateIDs", s.duplicateIDs},
		subtest[*outboxT]{"ConcurrentTransactionsCannotEnqueueOneID", s.sameIDInOpenTransactions},
		subtest[*outboxT]{"EnqueueRejectsTheIDOfADeadLetter", s.deadLetterID},
		subtest[*outboxT]{"EnqueueOfAnIDBeingParkedIsRefused", s.enqueueWhileParking},
		subtest[*outboxT]{"TransactionIsDoneAfterCommitOrRollback", s.txDone},
	)
}

func (s *outboxSuite) invalidEntries(t *testing.T, x *outboxT) {
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
	// A valid entry on a context carrying a trace context that is not one.
	for _, tc := range []struct {
		name  string
		trace outbox.TraceContext
	}{
		{"a tracestate without a traceparent", outbox.TraceContext{TraceState: "k=v"}},
		{"a traceparent that is not hex", outbox.TraceContext{TraceParent: strings.Repeat("z", 55)}},
		{"a traceparent too long", outbox.TraceContext{TraceParent: strings.Repeat("a", outbox.MaxTraceParentLength+1)}},
		{"a tracestate too long", outbox.TraceContext{TraceParent: outboxTraceB.TraceParent, TraceState: strings.Repeat("k", outbox.MaxTraceStateLength+1)}},
		{"a tracestate with a newline", outbox.TraceContext{TraceParent: outboxTraceB.TraceParent, TraceState: "a=b\nc=d"}},
	} {
		if err := tx.Enqueue(outbox.WithTraceContext(ctx, tc.trace), outbox.NewID(), outboxLaneA, valid); !errors.Is(err, outbox.ErrInvalidEntry) {
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

// oversizedPayloads: a payload of outbox.MaxPayloadBytes is written; one
// byte more is refused with outbox.ErrInvalidEntry before anything is
// written, and the transaction stays usable.
func (s *outboxSuite) oversizedPayloads(t *testing.T, x *outboxT) {
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

func (s *outboxSuite) duplicateIDs(t *testing.T, x *outboxT) {
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

// sameIDInOpenTransactions: while one open transaction has enqueued an
// id, another cannot enqueue it too. Its Enqueue is refused with
// outbox.ErrIDInUse, at once or (as a unique index makes it) once the
// first commits; either way it never succeeds, and the walk holds the id
// once, as the first transaction wrote it. (Whether the refused
// transaction can go on is the adapter's to document: PostgreSQL aborts
// it on the primary key, so it is rolled back here.)
func (s *outboxSuite) sameIDInOpenTransactions(t *testing.T, x *outboxT) {
	e, other := outboxEntry(outboxLaneA, 1), outboxEntry(outboxLaneB, 2)
	first := x.begin()
	x.enqueue(first, e)
	second := x.begin()
	x.enqueue(second, other)
	result := make(chan error, 1)
	go func() { result <- second.Enqueue(x.ctx, e.ID, outboxLaneB, []byte(`{"second": true}`)) }()
	var err error
	answered := false
	select {
	case err = <-result:
		answered = true
	case <-time.After(200 * time.Millisecond):
		// It waits for the first transaction; the commit below ends that.
	}
	if answered && !errors.Is(err, outbox.ErrIDInUse) {
		t.Fatalf("Enqueue of an id that another open transaction has enqueued: err = %v, want one wrapping outbox.ErrIDInUse", err)
	}
	x.commit(first)
	if !answered {
		select {
		case err = <-result:
		case <-time.After(x.wait):
			t.Fatalf("the second Enqueue still waits %v after the first transaction committed", x.wait)
		}
		if !errors.Is(err, outbox.ErrIDInUse) {
			t.Fatalf("Enqueue that waited for another transaction to commit the same id: err = %v, want one wrapping outbox.ErrIDInUse", err)
		}
	}
	if err := second.Rollback(x.ctx); err != nil {
		t.Fatalf("Rollback of the refused transaction: %v", err)
	}
	got := withoutBarriers(x.barrier())
	x.checkEntries("after the first transaction committed", got, e)
}

// deadLetterID: an entry whose id a dead letter has could never be parked
// (the dead letters are keyed by id), so Enqueue refuses it with
// outbox.ErrIDInUse, and the transaction can still commit its other work.
func (s *outboxSuite) deadLetterID(t *testing.T, x *outboxT) {
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
func (s *outboxSuite) enqueueWhileParking(t *testing.T, x *outboxT) {
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
	for deadline := time.Now().Add(x.wait); !answered; time.Sleep(5 * time.Millisecond) {
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
			t.Fatalf("the enqueue neither answered nor waited for the open settlement within %v", x.wait)
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
		case <-time.After(x.wait):
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

func (s *outboxSuite) txDone(t *testing.T, x *outboxT) {
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
