package conformance_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
)

// The producer-side variants of outboxVariants: transactions that take
// their xid at the wrong moment, a scan that passes open transactions, and
// Enqueue calls that accept what they must refuse.

// txWrap is the memory store's producer with every transaction wrapped.
func txWrap(st *memory.OutboxStore, wrap func(*memory.OutboxTx) conformance.OutboxTx) conformance.OutboxProducer {
	return conformance.OutboxProducerFunc(func(ctx context.Context) (conformance.OutboxTx, error) {
		tx, err := st.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return wrap(tx), nil
	})
}

// horizonMode is how a horizonBlind scan bounds what it shows.
type horizonMode int

const (
	// blindHorizon shows every committed entry, whatever is still open.
	blindHorizon horizonMode = iota
	// newestOpen shows what lies below the newest open transaction's
	// xid, instead of the oldest's.
	newestOpen
)

// horizonBlind scans past transactions that are still open: besides what
// the real store shows, it returns the entries committed while another of
// its transactions was open, up to the bound its mode sets. Once none is
// open, the real store shows them all anyway and it forgets them.
type horizonBlind struct {
	*memory.OutboxStore
	mode horizonMode

	mu    sync.Mutex
	open  map[*horizonBlindTx]struct{}
	early []outbox.Entry
}

func newHorizonBlind(st *memory.OutboxStore, mode horizonMode) *horizonBlind {
	return &horizonBlind{OutboxStore: st, mode: mode, open: map[*horizonBlindTx]struct{}{}}
}

func (b *horizonBlind) harness() conformance.OutboxHarness {
	h := outboxHarness(b.OutboxStore)
	h.Store, h.Producer, h.HoldSettle = b, b, settleAtOnce(b)
	return h
}

func (b *horizonBlind) Begin(ctx context.Context) (conformance.OutboxTx, error) {
	tx, err := b.OutboxStore.Begin(ctx)
	if err != nil {
		return nil, err
	}
	t := &horizonBlindTx{b: b, tx: tx}
	b.mu.Lock()
	b.open[t] = struct{}{}
	b.mu.Unlock()
	return t, nil
}

// ended closes one transaction; committed are its entries if it committed.
func (b *horizonBlind) ended(t *horizonBlindTx, committed []outbox.Entry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.open, t)
	if len(b.open) == 0 {
		b.early = nil
		return
	}
	b.early = append(b.early, committed...)
}

// bound is the xid below which the scan shows tracked entries; the caller
// holds the mutex.
func (b *horizonBlind) bound() uint64 {
	if b.mode == blindHorizon {
		return math.MaxUint64
	}
	var newest uint64
	for t := range b.open {
		newest = max(newest, t.tx.XID())
	}
	return newest
}

func (b *horizonBlind) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	got, err := b.OutboxStore.Scan(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	bound := b.bound()
	for _, e := range b.early {
		if e.Cursor().Compare(after) > 0 && e.XID < bound && !slices.ContainsFunc(got, func(g outbox.Entry) bool { return g.ID == e.ID }) {
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
	t.b.ended(t, t.entries)
	return nil
}

func (t *horizonBlindTx) Rollback(ctx context.Context) error {
	if err := t.tx.Rollback(ctx); err != nil {
		return err
	}
	t.b.ended(t, nil)
	return nil
}

// xidPerEntry gives each entry of a transaction an xid of its own, taken
// at its Enqueue: one open store transaction per entry, all ended
// together.
type xidPerEntry struct{ st *memory.OutboxStore }

func (p xidPerEntry) Begin(context.Context) (conformance.OutboxTx, error) {
	return &perEntryTx{st: p.st}, nil
}

type perEntryTx struct {
	st   *memory.OutboxStore
	txs  []*memory.OutboxTx
	done bool
}

func (t *perEntryTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	if t.done {
		return memory.ErrTxDone
	}
	tx, err := t.st.Begin(ctx)
	if err != nil {
		return err
	}
	if err := tx.Enqueue(ctx, id, lane, payload); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	t.txs = append(t.txs, tx)
	return nil
}

func (t *perEntryTx) end(ctx context.Context, commit bool) error {
	if t.done {
		return memory.ErrTxDone
	}
	t.done = true
	var errs []error
	for _, tx := range t.txs {
		if commit {
			errs = append(errs, tx.Commit(ctx))
		} else {
			errs = append(errs, tx.Rollback(ctx))
		}
	}
	return errors.Join(errs...)
}

func (t *perEntryTx) Commit(ctx context.Context) error   { return t.end(ctx, true) }
func (t *perEntryTx) Rollback(ctx context.Context) error { return t.end(ctx, false) }

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

// xidAtBegin holds the walk back from the moment a transaction begins, as
// if it took its xid then instead of at its first write: its scan stops
// below the transaction counter read at the oldest open Begin.
type xidAtBegin struct {
	*memory.OutboxStore

	mu   sync.Mutex
	open map[*atBeginTx]uint64
}

func (b *xidAtBegin) harness() conformance.OutboxHarness {
	b.open = map[*atBeginTx]uint64{}
	h := outboxHarness(b.OutboxStore)
	h.Store, h.Producer, h.HoldSettle = b, b, settleAtOnce(b)
	return h
}

func (b *xidAtBegin) Begin(ctx context.Context) (conformance.OutboxTx, error) {
	tx, err := b.OutboxStore.Begin(ctx)
	if err != nil {
		return nil, err
	}
	next, err := b.NextXID(ctx)
	if err != nil {
		return nil, err
	}
	t := &atBeginTx{OutboxTx: tx, b: b}
	b.mu.Lock()
	b.open[t] = next
	b.mu.Unlock()
	return t, nil
}

func (b *xidAtBegin) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	got, err := b.OutboxStore.Scan(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range b.open {
		got = slices.DeleteFunc(got, func(e outbox.Entry) bool { return e.XID >= x })
	}
	return got, nil
}

type atBeginTx struct {
	*memory.OutboxTx
	b *xidAtBegin
}

func (t *atBeginTx) ended() {
	t.b.mu.Lock()
	delete(t.b.open, t)
	t.b.mu.Unlock()
}

func (t *atBeginTx) Commit(ctx context.Context) error {
	defer t.ended()
	return t.OutboxTx.Commit(ctx)
}

func (t *atBeginTx) Rollback(ctx context.Context) error {
	defer t.ended()
	return t.OutboxTx.Rollback(ctx)
}
