package conformance_test

import (
	"context"
	"sync"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
)

// The wake-up variants of the outbox and work-row suites: the memory
// stores with their listening replaced by flawedBus, which keeps listeners
// and signals as the memory stores do, with one flaw each.

// wakeFlaw is what a flawedBus gets wrong.
type wakeFlaw int

const (
	neverSignals     wakeFlaw = iota // commits signal nobody
	rollbacksSignal                  // a rollback signals as a commit would
	decidedAtEnqueue                 // a producer signals only if a listener was idle at its first write
	newestIsZero                     // Idle reports no newest entry
	deadAfterTimeout                 // a listener whose Wait timed out hears nothing more
	oneChannelForAll                 // every store's producers signal every store's listeners
	busyKills                        // a listener that was told Busy hears nothing more
)

// flawedBus is a store's listeners.
type flawedBus struct {
	flaw wakeFlaw
	mu   sync.Mutex
	ls   map[*flawedListener]bool
}

// sharedBus is the one bus of every store of the oneChannelForAll variants.
var sharedBus = &flawedBus{flaw: oneChannelForAll}

func newFlawedBus(flaw wakeFlaw) *flawedBus {
	if flaw == oneChannelForAll {
		return sharedBus
	}
	return &flawedBus{flaw: flaw}
}

type flawedListener struct {
	b    *flawedBus
	sig  chan uint64
	idle bool // guarded by b.mu
	dead bool
}

func (b *flawedBus) listen() *flawedListener {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ls == nil {
		b.ls = map[*flawedListener]bool{}
	}
	l := &flawedListener{b: b, sig: make(chan uint64, 256)}
	b.ls[l] = true
	return l
}

func (b *flawedBus) anyIdle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range b.ls {
		if l.idle {
			return true
		}
	}
	return false
}

func (b *flawedBus) signal(xid uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range b.ls {
		if l.idle {
			select {
			case l.sig <- xid:
			default:
			}
		}
	}
}

func (l *flawedListener) setIdle() {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.idle = true
}

func (l *flawedListener) wait(ctx context.Context) (uint64, error) {
	if l.dead {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	select {
	case <-ctx.Done():
		l.dead = l.b.flaw == deadAfterTimeout
		return 0, ctx.Err()
	case xid := <-l.sig:
		for more := true; more; {
			select {
			case x := <-l.sig:
				xid = max(xid, x)
			default:
				more = false
			}
		}
		l.b.mu.Lock()
		l.idle = false
		l.b.mu.Unlock()
		return xid, nil
	}
}

func (l *flawedListener) setBusy() {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	l.idle = false
	l.dead = l.dead || l.b.flaw == busyKills
}

func (l *flawedListener) close() error {
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	delete(l.b.ls, l)
	return nil
}

// producerTx is a producer's transaction on a flawed bus: it signals at
// its end as the flaw says.
type producerTx struct {
	b        *flawedBus
	decided  bool
	idleSeen bool
}

// wrote records the first write.
func (p *producerTx) wrote() {
	if !p.decided {
		p.decided, p.idleSeen = true, p.b.anyIdle()
	}
}

// ended signals for a transaction with xid that committed (or not).
func (p *producerTx) ended(xid uint64, committed bool) {
	switch {
	case !p.decided, p.b.flaw == neverSignals:
	case p.b.flaw == decidedAtEnqueue:
		if committed && p.idleSeen {
			p.b.signal(xid)
		}
	case committed, p.b.flaw == rollbacksSignal:
		p.b.signal(xid)
	}
}

// The outbox side.

// flawedOutbox is the memory outbox store listening on a flawed bus.
type flawedOutbox struct {
	*memory.OutboxStore
	b *flawedBus
}

func (s flawedOutbox) Listen(ctx context.Context) (outbox.Listener, error) {
	ref, err := s.OutboxStore.Listen(ctx) // for the newest entry only
	if err != nil {
		return nil, err
	}
	return flawedOutboxListener{s.b.listen(), ref}, nil
}

type flawedOutboxListener struct {
	*flawedListener
	ref outbox.Listener
}

func (l flawedOutboxListener) Idle(ctx context.Context, after outbox.Cursor) (bool, uint64, error) {
	_, newest, err := l.ref.Idle(ctx, after)
	if l.b.flaw == newestIsZero {
		newest = 0
	}
	if newest != 0 {
		l.setBusy()
		return false, newest, err
	}
	l.setIdle()
	return true, 0, err
}

func (l flawedOutboxListener) Wait(ctx context.Context) (uint64, error) { return l.wait(ctx) }

func (l flawedOutboxListener) Close() error {
	_ = l.ref.Close()
	return l.close()
}

type flawedOutboxTx struct {
	*memory.OutboxTx
	p producerTx
}

func (t *flawedOutboxTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	t.p.wrote()
	return t.OutboxTx.Enqueue(ctx, id, lane, payload)
}

func (t *flawedOutboxTx) Commit(ctx context.Context) error {
	xid := t.XID()
	err := t.OutboxTx.Commit(ctx)
	t.p.ended(xid, err == nil)
	return err
}

func (t *flawedOutboxTx) Rollback(ctx context.Context) error {
	xid := t.XID()
	err := t.OutboxTx.Rollback(ctx)
	if err == nil {
		t.p.ended(xid, false)
	}
	return err
}

// flawedWake is the reference outbox harness listening on a flawed bus.
func flawedWake(flaw wakeFlaw) func(*memory.OutboxStore) conformance.OutboxHarness {
	return func(st *memory.OutboxStore) conformance.OutboxHarness {
		b := newFlawedBus(flaw)
		h := outboxHarness(st)
		h.Store = flawedOutbox{st, b}
		h.Producer = txWrap(st, func(tx *memory.OutboxTx) conformance.OutboxTx {
			return &flawedOutboxTx{OutboxTx: tx, p: producerTx{b: b}}
		})
		return h
	}
}

// The work-row side.

type flawedRows struct {
	*workRowStore
	b *flawedBus
}

func (s flawedRows) Listen(context.Context) (workrow.Listener, error) {
	return flawedRowListener{s.b.listen()}, nil
}

type flawedRowListener struct{ *flawedListener }

func (l flawedRowListener) Idle(context.Context) (bool, error) {
	l.setIdle()
	return true, nil
}

func (l flawedRowListener) Busy(context.Context) error {
	l.setBusy()
	return nil
}

func (l flawedRowListener) Wait(ctx context.Context) error {
	_, err := l.wait(ctx)
	return err
}

func (l flawedRowListener) Close() error { return l.close() }

// flawedRowTx inserts its rows at commit and signals as the flaw says.
type flawedRowTx struct {
	st   *workRowStore
	rows []conformance.WorkRow
	p    producerTx
	done bool
}

func (t *flawedRowTx) Commit(ctx context.Context) error {
	t.done = true
	err := t.st.Insert(ctx, t.rows...)
	t.p.ended(0, err == nil)
	return err
}

func (t *flawedRowTx) Rollback(context.Context) error {
	if !t.done {
		t.done = true
		t.p.ended(0, false)
	}
	return nil
}

// flawedRowWake is the reference work-row harness listening on a flawed
// bus.
func flawedRowWake(flaw wakeFlaw) func(*workRowStore) conformance.WorkRowsHarness {
	return func(st *workRowStore) conformance.WorkRowsHarness {
		b := newFlawedBus(flaw)
		h := workRowsHarness(st, flawedRows{st, b})
		h.Signalled = func(ctx context.Context, rows []conformance.WorkRow) (conformance.WorkRowsTx, error) {
			tx := &flawedRowTx{st: st, rows: rows, p: producerTx{b: b}}
			tx.p.wrote() // the signal is given now
			return tx, ctx.Err()
		}
		return h
	}
}
