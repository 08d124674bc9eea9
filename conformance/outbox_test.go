package conformance_test

import (
	"context"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
)

// Each case below wraps the memory outbox store with one defect; see
// brokenChild for how the suite is run against it.

const brokenOutboxEnv = "BATON_CONFORMANCE_BROKEN_OUTBOX"

// brokenOutboxStore is one defect, the subtests that must catch it and
// some that must still pass.
type brokenOutboxStore struct {
	wrap       func(*memory.OutboxStore) conformance.OutboxHarness
	mustCatch  []string
	mustPassAt []string
}

var brokenOutboxStores = map[string]brokenOutboxStore{
	"settle-without-compare-and-set": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: settleBlindly{st}, Producer: memoryProducer(st)}
		},
		mustCatch:  []string{"SettleIsCompareAndSet", "StaleSettleLoses", "ConcurrentFirstSettlesOneWins"},
		mustPassAt: []string{"ParkingMovesEntriesToDeadLetters", "CursorNeverGoesBackwards", "StateUpsertsAndRemovesKeys", "OpenOlderTransactionHoldsBackNewer"},
	},
	"scan-ignores-the-horizon": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			b := &horizonBlind{OutboxStore: st}
			return conformance.OutboxHarness{Store: b, Producer: b}
		},
		mustCatch:  []string{"OpenOlderTransactionHoldsBackNewer", "ConcurrentProducersAreWalkedWithoutGaps"},
		mustPassAt: []string{"TransactionsComeOutInXIDOrderNotCommitOrder", "RolledBackEntriesNeverAppear", "ScanHonoursCursorAndLimit", "SettleIsCompareAndSet"},
	},
	"xid-taken-at-commit": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: st, Producer: xidAtCommit{st}}
		},
		mustCatch: []string{"OpenOlderTransactionHoldsBackNewer", "TransactionsComeOutInXIDOrderNotCommitOrder"},
		mustPassAt: []string{"EntriesOfOneTransactionComeOutInIDOrder", "RolledBackEntriesNeverAppear", "TransactionWithoutWritesHoldsNothingBack",
			"EnqueueRejectsInvalidEntries", "ConcurrentProducersAreWalkedWithoutGaps"},
	},
	"requeue-reuses-the-old-id": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: requeueInPlace{st}, Producer: memoryProducer(st)}
		},
		mustCatch:  []string{"RequeueAppendsAFreshEntry", "RequeueTwiceIsAlreadyRequeued"},
		mustPassAt: []string{"ParkingMovesEntriesToDeadLetters", "UnknownDeadLetterIsNotFound", "DeleteDeliveredStaysAtOrBelowTheCursor"},
	},
	"scan-includes-the-cursor": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: scanInclusive{st}, Producer: memoryProducer(st)}
		},
		mustCatch:  []string{"ScanHonoursCursorAndLimit", "ConcurrentProducersAreWalkedWithoutGaps"},
		mustPassAt: []string{"OpenOlderTransactionHoldsBackNewer", "SettleIsCompareAndSet", "StateUpsertsAndRemovesKeys"},
	},
	"delete-ignores-the-cursor": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: deleteEverything{st}, Producer: memoryProducer(st)}
		},
		mustCatch:  []string{"DeleteDeliveredStaysAtOrBelowTheCursor"},
		mustPassAt: []string{"DeleteDeliveredHonoursTheWindow", "DeleteRequeuedKeepsUnreplayedDeadLetters", "InvalidArgumentsAreErrors"},
	},
	"enqueue-checks-dead-letters-before-the-park-commits": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			b := &staleCheck{st: st}
			return conformance.OutboxHarness{Store: st, Producer: b, HoldSettle: b.holdSettle}
		},
		mustCatch:  []string{"EnqueueOfAnIDBeingParkedIsRefused"},
		mustPassAt: []string{"EnqueueRejectsTheIDOfADeadLetter", "ParkingMovesEntriesToDeadLetters", "SettleIsCompareAndSet"},
	},
	"next-xid-is-the-last-one-taken": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: lastXID{st}, Producer: memoryProducer(st)}
		},
		mustCatch:  []string{"NextXIDIsAboveEveryCommittedEntry"},
		mustPassAt: []string{"ParkingMovesEntriesToDeadLetters", "OpenOlderTransactionHoldsBackNewer", "SettleIsCompareAndSet"},
	},
	"settle-cleans-text-instead-of-refusing": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: cleanText{st}, Producer: memoryProducer(st)}
		},
		mustCatch:  []string{"SettleRefusesTextNoStoreCanKeep"},
		mustPassAt: []string{"SettleKeepsEveryStorableReasonExactly", "ParkingMovesEntriesToDeadLetters", "StateUpsertsAndRemovesKeys"},
	},
	"settle-cuts-long-reasons": {
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: cutReasons{st}, Producer: memoryProducer(st)}
		},
		mustCatch:  []string{"SettleKeepsEveryStorableReasonExactly"},
		mustPassAt: []string{"SettleRefusesTextNoStoreCanKeep", "ParkingMovesEntriesToDeadLetters", "StateUpsertsAndRemovesKeys"},
	},
}

// TestBrokenOutboxStoreChild is the child half: it runs only when the
// parent sets brokenOutboxEnv, and is expected to fail.
func TestBrokenOutboxStoreChild(t *testing.T) {
	kind := os.Getenv(brokenOutboxEnv)
	if kind == "" {
		t.Skip("runs only as the child of TestRunOutboxStore_CatchesBrokenStores")
	}
	bs, ok := brokenOutboxStores[kind]
	if !ok {
		t.Fatalf("unknown broken store %q", kind)
	}
	conformance.RunOutboxStore(t, func(t *testing.T) conformance.OutboxHarness {
		st := memory.NewOutboxStore(memory.OutboxStoreOptions{})
		h := bs.wrap(st)
		if h.HoldSettle == nil {
			h.HoldSettle = memoryHoldSettle(h.Store)
		}
		return h
	}, conformance.OutboxFeatures{})
}

func TestRunOutboxStore_CatchesBrokenStores(t *testing.T) {
	if os.Getenv(brokenOutboxEnv) != "" {
		t.Skip("child process")
	}
	for kind, bs := range brokenOutboxStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			brokenChild{
				Test: "TestBrokenOutboxStoreChild", Env: brokenOutboxEnv, Kind: kind, What: "store",
				MustCatch: bs.mustCatch, MustPassAt: bs.mustPassAt,
			}.run(t)
		})
	}
}

// TestRunOutboxStore_PassesTheMemoryStore runs the suite against the
// reference store here too, so a change to the suite that the reference
// cannot pass fails in this package.
func TestRunOutboxStore_PassesTheMemoryStore(t *testing.T) {
	if os.Getenv(brokenOutboxEnv) != "" {
		t.Skip("child process")
	}
	conformance.RunOutboxStore(t, func(t *testing.T) conformance.OutboxHarness {
		st := memory.NewOutboxStore(memory.OutboxStoreOptions{})
		return conformance.OutboxHarness{Store: st, Producer: memoryProducer(st), HoldSettle: memoryHoldSettle(st)}
	}, conformance.OutboxFeatures{})
}

// memoryHoldSettle is HoldSettle for the memory store, which settles
// atomically: by the time it returns the settlement is committed, so
// nothing ever waits for it.
func memoryHoldSettle(st outbox.Store) func(context.Context, outbox.Settlement) (conformance.HeldSettlement, error) {
	return func(ctx context.Context, s outbox.Settlement) (conformance.HeldSettlement, error) {
		if err := st.Settle(ctx, s); err != nil {
			return nil, err
		}
		return settledAtOnce{}, nil
	}
}

type settledAtOnce struct{}

func (settledAtOnce) Blocking(context.Context) (bool, error) { return false, nil }
func (settledAtOnce) Commit(context.Context) error           { return nil }
func (settledAtOnce) Rollback(context.Context) error         { return nil }

func memoryProducer(st *memory.OutboxStore) conformance.OutboxProducer {
	return conformance.OutboxProducerFunc(func(ctx context.Context) (conformance.OutboxTx, error) {
		tx, err := st.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return tx, nil
	})
}

// settleBlindly settles from whatever cursor is stored, not the one the
// pass began at: a read-then-write with no compare-and-set.
type settleBlindly struct{ *memory.OutboxStore }

func (b settleBlindly) Settle(ctx context.Context, s outbox.Settlement) error {
	st, err := b.State(ctx)
	if err != nil {
		return err
	}
	if s.From, err = outbox.CursorFromState(st); err != nil {
		return err
	}
	return b.OutboxStore.Settle(ctx, s)
}

// horizonBlind scans past transactions that are still open: besides what
// the real store shows, it returns every entry committed while another of
// its transactions was open. Once none is open, the real store shows them
// all anyway and it forgets them.
type horizonBlind struct {
	*memory.OutboxStore

	mu    sync.Mutex
	open  int
	early []outbox.Entry
}

func (b *horizonBlind) Begin(ctx context.Context) (conformance.OutboxTx, error) {
	tx, err := b.OutboxStore.Begin(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.open++
	b.mu.Unlock()
	return &horizonBlindTx{b: b, tx: tx}, nil
}

// ended closes one transaction; committed are its entries if it committed.
func (b *horizonBlind) ended(committed []outbox.Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.open--
	if b.open == 0 {
		b.early = nil
		return
	}
	b.early = append(b.early, committed...)
}

func (b *horizonBlind) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	got, err := b.OutboxStore.Scan(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.early {
		if e.Cursor().Compare(after) > 0 && !slices.ContainsFunc(got, func(g outbox.Entry) bool { return g.ID == e.ID }) {
			got = append(got, e)
		}
	}
	slices.SortFunc(got, func(x, y outbox.Entry) int { return x.Cursor().Compare(y.Cursor()) })
	return got[:min(limit, len(got))], nil
}

type horizonBlindTx struct {
	b       *horizonBlind
	tx      *memory.OutboxTx
	entries []outbox.Entry
}

func (t *horizonBlindTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	if err := t.tx.Enqueue(ctx, id, lane, payload); err != nil {
		return err
	}
	t.entries = append(t.entries, outbox.Entry{ID: id, Lane: lane, Payload: slices.Clone(payload)})
	return nil
}

func (t *horizonBlindTx) Commit(ctx context.Context) error {
	xid := t.tx.XID()
	if err := t.tx.Commit(ctx); err != nil {
		return err
	}
	for i := range t.entries {
		t.entries[i].XID, t.entries[i].CreatedAt = xid, time.Now()
	}
	t.b.ended(t.entries)
	return nil
}

func (t *horizonBlindTx) Rollback(ctx context.Context) error {
	if err := t.tx.Rollback(ctx); err != nil {
		return err
	}
	t.b.ended(nil)
	return nil
}

// xidAtCommit writes a transaction's entries only when it commits, so its
// xid comes from its commit, and the walk follows commit order.
type xidAtCommit struct{ st *memory.OutboxStore }

func (p xidAtCommit) Begin(context.Context) (conformance.OutboxTx, error) {
	return &bufferedTx{st: p.st}, nil
}

type bufferedTx struct {
	st      *memory.OutboxStore
	entries []outbox.Entry
	done    bool
}

func (t *bufferedTx) Enqueue(_ context.Context, id outbox.ID, lane string, payload []byte) error {
	if t.done {
		return memory.ErrTxDone
	}
	if err := outbox.ValidateEntry(id, lane, payload); err != nil {
		return err
	}
	t.entries = append(t.entries, outbox.Entry{ID: id, Lane: lane, Payload: slices.Clone(payload)})
	return nil
}

func (t *bufferedTx) Commit(ctx context.Context) error {
	if t.done {
		return memory.ErrTxDone
	}
	t.done = true
	tx, err := t.st.Begin(ctx)
	if err != nil {
		return err
	}
	for _, e := range t.entries {
		if err := tx.Enqueue(ctx, e.ID, e.Lane, e.Payload); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
	}
	return tx.Commit(ctx)
}

func (t *bufferedTx) Rollback(context.Context) error {
	if t.done {
		return memory.ErrTxDone
	}
	t.done = true
	return nil
}

// requeueInPlace puts a dead letter back under its own id and records
// nothing.
type requeueInPlace struct{ *memory.OutboxStore }

func (b requeueInPlace) Requeue(ctx context.Context, id, _ outbox.ID) error {
	d, err := b.GetDead(ctx, id)
	if err != nil {
		return err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.Enqueue(ctx, id, d.Lane, d.Payload); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// scanInclusive scans from the cursor's own entry on (>= instead of >).
type scanInclusive struct{ *memory.OutboxStore }

func (b scanInclusive) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if limit < 1 {
		return b.OutboxStore.Scan(ctx, after, limit)
	}
	all, err := b.OutboxStore.Scan(ctx, outbox.Cursor{}, math.MaxInt32)
	if err != nil {
		return nil, err
	}
	all = slices.DeleteFunc(all, func(e outbox.Entry) bool { return e.Cursor().Compare(after) < 0 })
	return all[:min(limit, len(all))], nil
}

// deleteEverything deletes delivered entries without regard to the cursor.
type deleteEverything struct{ *memory.OutboxStore }

func (b deleteEverything) DeleteDelivered(ctx context.Context, _ outbox.Cursor, window time.Duration, limit int) (int, error) {
	top := outbox.Cursor{XID: math.MaxUint64}
	for i := range top.ID {
		top.ID[i] = 0xff
	}
	return b.OutboxStore.DeleteDelivered(ctx, top, window, limit)
}

// cleanText stores what it was given after dropping NUL bytes and invalid
// UTF-8, rather than refusing: the caller never learns its text changed.
type cleanText struct{ *memory.OutboxStore }

func (b cleanText) Settle(ctx context.Context, s outbox.Settlement) error {
	clean := func(v string) string { return strings.ReplaceAll(strings.ToValidUTF8(v, ""), "\x00", "") }
	park := make([]outbox.Parked, len(s.Park))
	for i, p := range s.Park {
		park[i] = outbox.Parked{Entry: p.Entry, Reason: clean(p.Reason)}
	}
	state := make(map[string]*string, len(s.State))
	for k, v := range s.State {
		if v != nil {
			c := clean(*v)
			v = &c
		}
		state[clean(k)] = v
	}
	s.Park, s.State = park, state
	return b.OutboxStore.Settle(ctx, s)
}

// cutReasons keeps at most 255 bytes of a reason or state value, as a
// varchar(255) column would.
type cutReasons struct{ *memory.OutboxStore }

func (b cutReasons) Settle(ctx context.Context, s outbox.Settlement) error {
	cut := func(v string) string {
		if len(v) > 255 {
			return strings.ToValidUTF8(v[:255], "")
		}
		return v
	}
	park := make([]outbox.Parked, len(s.Park))
	for i, p := range s.Park {
		park[i] = outbox.Parked{Entry: p.Entry, Reason: cut(p.Reason)}
	}
	state := make(map[string]*string, len(s.State))
	for k, v := range s.State {
		if v != nil {
			c := cut(*v)
			v = &c
		}
		state[k] = v
	}
	s.Park, s.State = park, state
	return b.OutboxStore.Settle(ctx, s)
}

// staleCheck has the defect PostgreSQL's Enqueue had before parking
// copied: it checks the dead letters on a snapshot taken when its
// statement starts, then waits for a settlement that is parking the same
// id, and then writes the entry anyway. A held settlement really holds
// here: it takes effect at its commit, and producers wait for it.
type staleCheck struct {
	st      *memory.OutboxStore
	mu      sync.RWMutex // written by an open settlement
	waiting atomic.Int32
}

func (b *staleCheck) holdSettle(_ context.Context, s outbox.Settlement) (conformance.HeldSettlement, error) {
	b.mu.Lock()
	return &staleHeld{b: b, s: s}, nil
}

type staleHeld struct {
	b    *staleCheck
	s    outbox.Settlement
	done bool
}

func (h *staleHeld) Blocking(context.Context) (bool, error) { return h.b.waiting.Load() > 0, nil }

func (h *staleHeld) Commit(ctx context.Context) error {
	if h.done {
		return nil
	}
	h.done = true
	defer h.b.mu.Unlock()
	return h.b.st.Settle(ctx, h.s)
}

func (h *staleHeld) Rollback(context.Context) error {
	if !h.done {
		h.done = true
		h.b.mu.Unlock()
	}
	return nil
}

func (b *staleCheck) Begin(ctx context.Context) (conformance.OutboxTx, error) {
	tx, err := b.st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return staleTx{b: b, OutboxTx: tx}, nil
}

type staleTx struct {
	b *staleCheck
	*memory.OutboxTx
}

func (t staleTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	_, err := t.b.st.GetDead(ctx, id)
	free := errors.Is(err, outbox.ErrNotFound) // the snapshot
	t.b.waiting.Add(1)
	t.b.mu.RLock()
	t.b.waiting.Add(-1)
	defer t.b.mu.RUnlock()
	err = t.OutboxTx.Enqueue(ctx, id, lane, payload)
	if errors.Is(err, outbox.ErrIDInUse) && free {
		return nil // the check passed on the snapshot, and the write went ahead
	}
	return err
}

// lastXID reports the last xid handed out instead of the next: the xid of
// the newest entry, which a cursor can legitimately hold.
type lastXID struct{ *memory.OutboxStore }

func (b lastXID) NextXID(ctx context.Context) (uint64, error) {
	n, err := b.OutboxStore.NextXID(ctx)
	return n - 1, err
}
