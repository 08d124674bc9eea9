package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// Waking the workers (workrow.Waker): a committed, signalled insert reaches
// an idle listener of its table, and nothing else does.

// WorkRowsTx is a producer's transaction that has inserted rows and
// signalled the table, not yet ended.
type WorkRowsTx interface {
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// wrQuiet is how long a subtest listens for a signal that must not come.
// A correct store never sends one, so no timing can fail it; a broken one
// that does sends it at once.
const wrQuiet = 300 * time.Millisecond

func (s *workRowsSuite) wakeChecks() []check {
	return area(s.wakeSetup,
		subtest[wrWakeBundle]{"ASignalledInsertWakesAnIdleListener", s.signalWakes},
		subtest[wrWakeBundle]{"ARolledBackSignalWakesNobody", s.rolledBackSignal},
		subtest[wrWakeBundle]{"ASignalGivenBeforeIdleIsNeverMissed", s.signalInFlight},
		subtest[wrWakeBundle]{"AnotherTablesSignalDoesNotWakeIt", s.anotherTable},
		subtest[wrWakeBundle]{"IdleAfterBusyWakesAgain", s.idleAfterBusy},
	)
}

type wrWakeBundle struct {
	workRowsBundle
	t *testing.T
	w workrow.Waker
}

func (s *workRowsSuite) wakeSetup(t *testing.T) wrWakeBundle {
	t.Helper()
	if s.f.NoWake {
		t.Skip("the store does not wake workers (WorkRowsFeatures.NoWake)")
	}
	env := s.setup(t)
	w, ok := env.h.Store.(workrow.Waker)
	switch {
	case !ok:
		t.Fatalf("the store %T does not implement workrow.Waker; set WorkRowsFeatures.NoWake if it cannot", env.h.Store)
	case env.h.Signalled == nil:
		t.Fatal("conformance: the harness has no Signalled, which the wake-up subtests need")
	}
	return wrWakeBundle{workRowsBundle: env, t: t, w: w}
}

func (b wrWakeBundle) listen(w workrow.Waker) workrow.Listener {
	b.t.Helper()
	l, err := w.Listen(b.ctx)
	if err != nil {
		b.t.Fatalf("Listen: %v", err)
	}
	if l == nil {
		b.t.Fatal("Listen returned a nil Listener and no error")
	}
	b.t.Cleanup(func() { _ = l.Close() })
	return l
}

// idle asks Idle until it answers idle.
func (b wrWakeBundle) idle(l workrow.Listener) {
	b.t.Helper()
	for deadline := time.Now().Add(wakeBound); ; time.Sleep(5 * time.Millisecond) {
		idle, err := l.Idle(b.ctx)
		if err != nil {
			b.t.Fatalf("Idle: %v", err)
		}
		if idle {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("Idle answered busy for %v with no producer in flight", wakeBound)
		}
	}
}

// signalled inserts rows in a transaction that signals, left open.
func (b wrWakeBundle) signalled(h WorkRowsHarness, rows ...WorkRow) WorkRowsTx {
	b.t.Helper()
	tx, err := h.Signalled(b.ctx, rows)
	if err != nil {
		b.t.Fatalf("Signalled: %v", err)
	}
	b.t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) })
	return tx
}

func (b wrWakeBundle) commit(tx WorkRowsTx) {
	b.t.Helper()
	if err := tx.Commit(b.ctx); err != nil {
		b.t.Fatalf("Commit: %v", err)
	}
}

// wait waits up to d for a signal; false when none came.
func (b wrWakeBundle) wait(l workrow.Listener, d time.Duration) bool {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	err := l.Wait(ctx)
	switch {
	case err == nil:
		return true
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return false
	}
	b.t.Fatalf("Wait: %v", err)
	return false
}

// signalWakes: once idle, a committed signalled insert makes Wait return,
// and its rows are claimable then.
func (s *workRowsSuite) signalWakes(t *testing.T, b wrWakeBundle) {
	l := b.listen(b.w)
	b.idle(l)
	b.commit(b.signalled(b.h, wrFresh(2)...))
	if !b.wait(l, wakeBound) {
		t.Fatalf("no signal within %v of a committed, signalled insert", wakeBound)
	}
	if got := wrClaim(t, b.ctx, b.h.Store, wrSpec(wrBase(), 10)); len(got) != 2 {
		t.Fatalf("the claim after the wake-up took %d rows, want the 2 inserted", len(got))
	}
}

// rolledBackSignal: a signalled insert that rolls back sends nothing; the
// next committed one does.
func (s *workRowsSuite) rolledBackSignal(t *testing.T, b wrWakeBundle) {
	l := b.listen(b.w)
	b.idle(l)
	rows := wrFresh(2)
	if err := b.signalled(b.h, rows[0]).Rollback(b.ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	if b.wait(l, wrQuiet) {
		t.Fatal("a signalled insert that rolled back woke the listener")
	}
	b.commit(b.signalled(b.h, rows[1]))
	if !b.wait(l, wakeBound) {
		t.Fatalf("no signal within %v of a committed, signalled insert after a rolled back one", wakeBound)
	}
}

// signalInFlight: a signal given before Idle, committed after its answer,
// wakes Wait, unless Idle answered busy.
func (s *workRowsSuite) signalInFlight(t *testing.T, b wrWakeBundle) {
	l := b.listen(b.w)
	tx := b.signalled(b.h, wrFresh(1)...)
	idle, err := l.Idle(b.ctx)
	if err != nil {
		t.Fatalf("Idle: %v", err)
	}
	b.commit(tx)
	if !idle {
		return // busy: the caller claims again, and finds the row
	}
	if !b.wait(l, wakeBound) {
		t.Fatalf("Idle answered idle while a signalled insert was in flight, and its commit never woke the listener (%v)", wakeBound)
	}
}

// anotherTable: another table's signal does not wake this table's
// listener; its own does.
func (s *workRowsSuite) anotherTable(t *testing.T, b wrWakeBundle) {
	other := s.factory(t)
	if other.Signalled == nil {
		t.Fatal("conformance: the harness has no Signalled")
	}
	l := b.listen(b.w)
	b.idle(l)
	b.commit(b.signalled(other, wrFresh(1)...))
	if b.wait(l, wrQuiet) {
		t.Fatal("another table's signalled insert woke this table's listener")
	}
	b.commit(b.signalled(b.h, wrFresh(1)...))
	if !b.wait(l, wakeBound) {
		t.Fatalf("no signal within %v of this table's own signalled insert", wakeBound)
	}
}

// idleAfterBusy: a listener that gave its idle state back and became idle
// again is woken by the next signalled insert.
func (s *workRowsSuite) idleAfterBusy(t *testing.T, b wrWakeBundle) {
	l := b.listen(b.w)
	b.idle(l)
	if err := l.Busy(b.ctx); err != nil {
		t.Fatalf("Busy: %v", err)
	}
	b.idle(l)
	b.commit(b.signalled(b.h, wrFresh(1)...))
	if !b.wait(l, wakeBound) {
		t.Fatalf("no signal within %v of a signalled insert after Busy and Idle", wakeBound)
	}
}

// InsertOnCommit is Signalled for a store whose insert is its own commit
// and signal (the memory store's Insert): the rows are inserted when the
// transaction commits, and never when it rolls back.
func InsertOnCommit(insert func(ctx context.Context, rows []WorkRow) error) func(context.Context, []WorkRow) (WorkRowsTx, error) {
	return func(ctx context.Context, rows []WorkRow) (WorkRowsTx, error) {
		return &insertOnCommit{insert: insert, rows: rows}, ctx.Err()
	}
}

type insertOnCommit struct {
	insert func(ctx context.Context, rows []WorkRow) error
	rows   []WorkRow
	done   bool
}

func (t *insertOnCommit) Commit(ctx context.Context) error {
	if t.done {
		return errors.New("conformance: the transaction has ended")
	}
	t.done = true
	return t.insert(ctx, t.rows)
}

func (t *insertOnCommit) Rollback(context.Context) error {
	t.done = true
	return nil
}
