package conformance_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
)

// The transaction variants of outboxVariants: transactions that end the
// wrong way, or whose Enqueue accepts what it must refuse, or refuses it
// without saying why.

// rollbackCommits commits when asked to roll back.
type rollbackCommits struct{ *memory.OutboxTx }

func (t rollbackCommits) Rollback(ctx context.Context) error { return t.Commit(ctx) }

// abortOnInvalid behaves as a database transaction does when a statement
// fails without a savepoint: after one invalid entry, the whole
// transaction is lost.
type abortOnInvalid struct {
	*memory.OutboxTx
	aborted bool
}

var errTxAborted = errors.New("the transaction is aborted; commands are ignored until its end")

func (t *abortOnInvalid) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	if t.aborted {
		return errTxAborted
	}
	err := t.OutboxTx.Enqueue(ctx, id, lane, payload)
	if errors.Is(err, outbox.ErrInvalidEntry) {
		t.aborted = true
		_ = t.OutboxTx.Rollback(ctx)
	}
	return err
}

func (t *abortOnInvalid) Commit(ctx context.Context) error {
	if t.aborted {
		return errTxAborted
	}
	return t.OutboxTx.Commit(ctx)
}

// ownSizeCheck refuses large payloads with an error of its own, as an
// adapter that checks sizes itself instead of calling outbox.ValidateEntry
// would: callers cannot tell bad input from a failure.
type ownSizeCheckTx struct{ conformance.OutboxTx }

func (t ownSizeCheckTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	if len(payload) > outbox.MaxPayloadBytes {
		return errors.New("payload too large")
	}
	return t.OutboxTx.Enqueue(ctx, id, lane, payload)
}

// swallowIDInUse answers an Enqueue refused with ErrIDInUse with success,
// writing nothing: for the ids of dead letters (dead) or of everything
// else.
type swallowIDInUse struct {
	*memory.OutboxTx
	st   *memory.OutboxStore
	dead bool
}

func (t swallowIDInUse) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	err := t.OutboxTx.Enqueue(ctx, id, lane, payload)
	if errors.Is(err, outbox.ErrIDInUse) {
		_, derr := t.st.GetDead(ctx, id)
		if (derr == nil) == t.dead {
			return nil
		}
	}
	return err
}

// openBlind does not see the ids other open transactions have enqueued: a
// second one is accepted, and written at commit if it can be, silently
// dropped if not.
type openBlind struct {
	st   *memory.OutboxStore
	mu   sync.Mutex
	held map[outbox.ID]*openBlindTx
}

func newOpenBlind(st *memory.OutboxStore) *openBlind {
	return &openBlind{st: st, held: map[outbox.ID]*openBlindTx{}}
}

func (b *openBlind) Begin(ctx context.Context) (conformance.OutboxTx, error) {
	tx, err := b.st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &openBlindTx{b: b, tx: tx}, nil
}

type openBlindTx struct {
	b        *openBlind
	tx       *memory.OutboxTx
	ids      []outbox.ID
	deferred []outbox.Entry
}

func (t *openBlindTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	t.b.mu.Lock()
	owner := t.b.held[id]
	t.b.mu.Unlock()
	if owner != nil && owner != t {
		if err := outbox.ValidateEntry(id, lane, payload); err != nil {
			return err
		}
		t.deferred = append(t.deferred, outbox.Entry{ID: id, Lane: lane, Payload: slices.Clone(payload)})
		return nil
	}
	if err := t.tx.Enqueue(ctx, id, lane, payload); err != nil {
		return err
	}
	t.b.mu.Lock()
	t.b.held[id] = t
	t.b.mu.Unlock()
	t.ids = append(t.ids, id)
	return nil
}

func (t *openBlindTx) ended() {
	t.b.mu.Lock()
	defer t.b.mu.Unlock()
	for _, id := range t.ids {
		delete(t.b.held, id)
	}
}

func (t *openBlindTx) Commit(ctx context.Context) error {
	defer t.ended()
	for _, e := range t.deferred {
		_ = t.tx.Enqueue(ctx, e.ID, e.Lane, e.Payload)
	}
	return t.tx.Commit(ctx)
}

func (t *openBlindTx) Rollback(ctx context.Context) error {
	defer t.ended()
	return t.tx.Rollback(ctx)
}

// neverDone keeps accepting calls after its transaction ended, doing
// nothing with them.
type neverDone struct {
	*memory.OutboxTx
	done bool
}

func (t *neverDone) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	if t.done {
		return nil
	}
	return t.OutboxTx.Enqueue(ctx, id, lane, payload)
}

func (t *neverDone) Commit(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	return t.OutboxTx.Commit(ctx)
}

func (t *neverDone) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	return t.OutboxTx.Rollback(ctx)
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

// traceUnchecked enqueues an entry whose context carries an invalid trace
// context without one, instead of refusing it.
type traceUnchecked struct{ *memory.OutboxTx }

func (t traceUnchecked) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	if _, err := outbox.TraceContextFrom(ctx); err != nil {
		ctx = outbox.WithTraceContext(ctx, outbox.TraceContext{})
	}
	return t.OutboxTx.Enqueue(ctx, id, lane, payload)
}

// traceDropped ignores the trace context Enqueue's context carries, as an
// adapter that never reads it would.
type traceDropped struct{ *memory.OutboxTx }

func (t traceDropped) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	return t.OutboxTx.Enqueue(outbox.WithTraceContext(ctx, outbox.TraceContext{}), id, lane, payload)
}
