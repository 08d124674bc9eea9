package memory_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
	memlocks "github.com/baton-go/baton/locks/memory"
)

// outboxHarness serves the memory store to the conformance suite.
func outboxHarness(st *memory.OutboxStore) conformance.OutboxHarness {
	return conformance.OutboxHarness{
		Store: st,
		Producer: conformance.OutboxProducerFunc(func(ctx context.Context) (conformance.OutboxTx, error) {
			tx, err := st.Begin(ctx)
			if err != nil {
				return nil, err
			}
			return tx, nil
		}),
		// The memory store settles atomically: nothing is ever held open.
		HoldSettle: func(ctx context.Context, s outbox.Settlement) (conformance.HeldSettlement, error) {
			if err := st.Settle(ctx, s); err != nil {
				return nil, err
			}
			return settledAtOnce{}, nil
		},
	}
}

type settledAtOnce struct{}

func (settledAtOnce) Blocking(context.Context) (bool, error) { return false, nil }
func (settledAtOnce) Commit(context.Context) error           { return nil }
func (settledAtOnce) Rollback(context.Context) error         { return nil }

func TestOutboxStore_Conformance(t *testing.T) {
	conformance.RunOutboxStore(t, func(t *testing.T) conformance.OutboxHarness {
		memOutbox, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return outboxHarness(memOutbox)
	}, conformance.OutboxFeatures{})
}

func mustBegin(t *testing.T, st *memory.OutboxStore) *memory.OutboxTx {
	t.Helper()
	tx, err := st.Begin(t.Context())
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	return tx
}

func mustEnqueue(t *testing.T, tx *memory.OutboxTx, lane string) outbox.ID {
	t.Helper()
	id := outbox.NewID()
	if err := tx.Enqueue(t.Context(), id, lane, []byte(`{"lane":"`+lane+`"}`)); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return id
}

func mustCommit(t *testing.T, tx *memory.OutboxTx) {
	t.Helper()
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func scanIDs(t *testing.T, st *memory.OutboxStore, after outbox.Cursor) []outbox.ID {
	t.Helper()
	es, err := st.Scan(t.Context(), after, 100)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	ids := make([]outbox.ID, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

func TestOutboxStore_XIDIsTakenAtTheFirstEnqueueNotAtBegin(t *testing.T) {
	st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	early := mustBegin(t, st) // begins first, writes last
	late := mustBegin(t, st)
	if early.XID() != 0 || late.XID() != 0 {
		t.Fatalf("transactions that have not written have xids %d and %d, want 0", early.XID(), late.XID())
	}

	// A transaction without an xid holds nothing back.
	solo := mustBegin(t, st)
	soloID := mustEnqueue(t, solo, "solo")
	mustCommit(t, solo)
	if got := scanIDs(t, st, outbox.Cursor{}); !slices.Equal(got, []outbox.ID{soloID}) {
		t.Fatalf("with two open transactions that have not written, Scan = %v, want the committed %s", got, soloID)
	}

	lateID := mustEnqueue(t, late, "late")
	earlyID := mustEnqueue(t, early, "early")
	if !(solo.XID() < late.XID() && late.XID() < early.XID()) {
		t.Fatalf("xids solo %d, late %d, early %d: want them in the order of the first writes", solo.XID(), late.XID(), early.XID())
	}
	if solo.XID() <= 1<<32 {
		t.Errorf("xid %d: the store's xids start above 2^32, like a wrapped-around xid8", solo.XID())
	}
	mustCommit(t, early)
	// late wrote first and is still open: early is above the horizon.
	if got := scanIDs(t, st, outbox.Cursor{}); !slices.Equal(got, []outbox.ID{soloID}) {
		t.Fatalf("Scan = %v while the older writer is open, want only %s", got, soloID)
	}
	mustCommit(t, late)
	if got := scanIDs(t, st, outbox.Cursor{}); !slices.Equal(got, []outbox.ID{soloID, lateID, earlyID}) {
		t.Fatalf("Scan = %v, want solo, late, early: the order of the first writes", got)
	}
}

func TestOutboxStore_InjectedClockStampsAndDrivesRetention(t *testing.T) {
	clock := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const window = time.Hour
	written := clock.Now()

	tx := mustBegin(t, st)
	a, b, c := mustEnqueue(t, tx, "a"), mustEnqueue(t, tx, "a"), mustEnqueue(t, tx, "a")
	mustCommit(t, tx)
	es, err := st.Scan(ctx, outbox.Cursor{}, 10)
	if err != nil || len(es) != 3 {
		t.Fatalf("Scan = %d entries, %v; want 3", len(es), err)
	}
	for _, e := range es {
		if !e.CreatedAt.Equal(written) {
			t.Fatalf("CreatedAt %v, want the store clock's %v", e.CreatedAt, written)
		}
	}
	// Park the first, deliver the rest.
	clock.Advance(10 * time.Minute)
	parkedAt := clock.Now()
	first := es[0]
	err = st.Settle(ctx, outbox.Settlement{To: es[2].Cursor(), Park: []outbox.Parked{{Entry: first, Reason: "bad"}}})
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	d, err := st.GetDead(ctx, first.ID)
	if err != nil || !d.ParkedAt.Equal(parkedAt) {
		t.Fatalf("GetDead = %+v, %v; want ParkedAt from the store clock, %v", d, err, parkedAt)
	}
	if err := st.Requeue(ctx, first.ID, outbox.NewID()); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	cur := es[2].Cursor()

	// Delivered entries: at the window's edge they stay ("more than window
	// ago"), one nanosecond later they go.
	clock.Advance(window - 10*time.Minute)
	if n, err := st.DeleteDelivered(ctx, cur, window, 10); err != nil || n != 0 {
		t.Fatalf("DeleteDelivered at the window's edge = %d, %v; want 0", n, err)
	}
	clock.Advance(time.Nanosecond)
	// The parked one stayed in the outbox below the cursor and goes too.
	if n, err := st.DeleteDelivered(ctx, cur, window, 10); err != nil || n != 3 {
		t.Fatalf("DeleteDelivered a nanosecond past the window = %d, %v; want the 2 delivered and the 1 parked", n, err)
	}
	left := scanIDs(t, st, outbox.Cursor{})
	if len(left) != 1 || slices.Contains(left, a) || slices.Contains(left, b) || slices.Contains(left, c) {
		t.Fatalf("after retention the outbox holds %v, want only the requeued entry", left)
	}

	// Requeued dead letters, measured from the requeue (10 minutes after
	// the entries were written), so the record of the replay stays a whole
	// window.
	if n, err := st.DeleteRequeued(ctx, window, 10); err != nil || n != 0 {
		t.Fatalf("DeleteRequeued inside the window = %d, %v; want 0", n, err)
	}
	clock.Advance(10 * time.Minute)
	if n, err := st.DeleteRequeued(ctx, window, 10); err != nil || n != 1 {
		t.Fatalf("DeleteRequeued past the window = %d, %v; want 1", n, err)
	}
}

func TestOutboxStore_EndedTransactionsRefuseEverything(t *testing.T) {
	st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	committed := mustBegin(t, st)
	mustEnqueue(t, committed, "a")
	mustCommit(t, committed)
	rolledBack := mustBegin(t, st)
	mustEnqueue(t, rolledBack, "a")
	if err := rolledBack.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for name, tx := range map[string]*memory.OutboxTx{"committed": committed, "rolled back": rolledBack} {
		if err := tx.Enqueue(ctx, outbox.NewID(), "a", []byte(`1`)); !errors.Is(err, memory.ErrTxDone) {
			t.Errorf("%s: Enqueue = %v, want ErrTxDone", name, err)
		}
		if err := tx.Commit(ctx); !errors.Is(err, memory.ErrTxDone) {
			t.Errorf("%s: Commit = %v, want ErrTxDone", name, err)
		}
		if err := tx.Rollback(ctx); !errors.Is(err, memory.ErrTxDone) {
			t.Errorf("%s: Rollback = %v, want ErrTxDone", name, err)
		}
	}
}

func TestOutboxStore_CommitWithAnEndedContextRollsBack(t *testing.T) {
	st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tx := mustBegin(t, st)
	id := mustEnqueue(t, tx, "a")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := tx.Commit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a cancelled context = %v, want context.Canceled", err)
	}
	if err := tx.Rollback(t.Context()); !errors.Is(err, memory.ErrTxDone) {
		t.Fatalf("Rollback after the failed commit = %v, want ErrTxDone", err)
	}
	// The id is free again, and nothing holds the horizon back.
	again := mustBegin(t, st)
	if err := again.Enqueue(t.Context(), id, "a", []byte(`{}`)); err != nil {
		t.Fatalf("Enqueue of the rolled-back id: %v", err)
	}
	mustCommit(t, again)
	if got := scanIDs(t, st, outbox.Cursor{}); !slices.Equal(got, []outbox.ID{id}) {
		t.Fatalf("Scan = %v, want the one committed entry", got)
	}
}

func TestOutboxStore_AnIDHeldByAnotherOpenTransactionIsRefused(t *testing.T) {
	st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := mustBegin(t, st)
	id := mustEnqueue(t, first, "a")
	second := mustBegin(t, st)
	if err := second.Enqueue(t.Context(), id, "b", []byte(`{}`)); err == nil {
		t.Fatal("two open transactions enqueued the same id")
	}
	// The refused write left second without an xid: it holds nothing back.
	if second.XID() != 0 {
		t.Errorf("a refused first write took xid %d", second.XID())
	}
	mustCommit(t, second)
	mustCommit(t, first)
	if got := scanIDs(t, st, outbox.Cursor{}); !slices.Equal(got, []outbox.ID{id}) {
		t.Fatalf("Scan = %v, want the first transaction's entry", got)
	}
}

func TestOutboxStore_ReturnedPayloadsAreCopies(t *testing.T) {
	st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	payload := []byte(`{"v":1}`)
	tx := mustBegin(t, st)
	id := outbox.NewID()
	if err := tx.Enqueue(ctx, id, "a", payload); err != nil {
		t.Fatal(err)
	}
	payload[5] = '2' // the caller's buffer is the caller's
	mustCommit(t, tx)
	es, _ := st.Scan(ctx, outbox.Cursor{}, 1)
	es[0].Payload[5] = '3'
	es, _ = st.Scan(ctx, outbox.Cursor{}, 1)
	if string(es[0].Payload) != `{"v":1}` {
		t.Fatalf("stored payload %s, want the enqueued {\"v\":1}", es[0].Payload)
	}
	if err := st.Settle(ctx, outbox.Settlement{To: es[0].Cursor(), Park: []outbox.Parked{{Entry: es[0]}}}); err != nil {
		t.Fatal(err)
	}
	d, _ := st.GetDead(ctx, id)
	d.Payload[5] = '4'
	if d, _ = st.GetDead(ctx, id); string(d.Payload) != `{"v":1}` {
		t.Fatalf("dead letter payload %s, want {\"v\":1}", d.Payload)
	}
}

// TestOutboxStore_UnderTheDriver runs the core driver on the store: entries
// of two transactions are delivered in walk order, the entry of a lane with
// no processor is parked, and the cursor is settled past everything.
func TestOutboxStore_UnderTheDriver(t *testing.T) {
	st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	locks, err := memlocks.NewProvider(memlocks.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu        sync.Mutex
		delivered []outbox.ID
	)
	proc := outbox.ProcessorFunc{LaneName: "a", Func: func(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
		mu.Lock()
		defer mu.Unlock()
		out := make([]outbox.Outcome, len(run))
		for i, e := range run {
			delivered = append(delivered, e.ID)
			out[i] = outbox.Delivered()
		}
		return out, nil
	}}
	d, err := outbox.NewDriver(outbox.Config{
		Store: st, Locks: locks, Processors: []outbox.Processor{proc},
		Notify:    func(context.Context, outbox.Notice) error { return nil },
		IdleDelay: 5 * time.Millisecond, RetentionDisabled: true,
	})
	if err != nil {
		t.Fatal(err)
	}

	// first writes first but commits last.
	first, second := mustBegin(t, st), mustBegin(t, st)
	f1 := mustEnqueue(t, first, "a")
	s1, orphan := mustEnqueue(t, second, "a"), mustEnqueue(t, second, "unregistered")
	f2 := mustEnqueue(t, first, "a")
	mustCommit(t, second)

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	time.Sleep(50 * time.Millisecond) // passes run; the open transaction holds everything back
	mu.Lock()
	early := slices.Clone(delivered)
	mu.Unlock()
	if len(early) != 0 {
		t.Fatalf("delivered %v while the older transaction was open", early)
	}
	mustCommit(t, first)

	want := slices.Concat(sortedIDs(f1, f2), []outbox.ID{s1})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := st.GetDead(t.Context(), orphan); err == nil {
			mu.Lock()
			got := slices.Clone(delivered)
			mu.Unlock()
			if len(got) >= len(want) {
				if !slices.Equal(got, want) {
					t.Fatalf("delivered %v, want %v (the first transaction's entries, then the second's)", got, want)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the driver did not deliver and park everything within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The parking pass settled the cursor past every entry.
	for ; ; time.Sleep(5 * time.Millisecond) {
		state, _ := st.State(t.Context())
		cur, err := outbox.CursorFromState(state)
		if err != nil {
			t.Fatal(err)
		}
		if left, _ := st.Scan(t.Context(), cur, 10); len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cursor %+v stays behind entries", cur)
		}
	}
}

func sortedIDs(ids ...outbox.ID) []outbox.ID {
	return slices.SortedFunc(slices.Values(ids), outbox.ID.Compare)
}
