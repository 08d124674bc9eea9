package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

func mustOutboxStore(t testing.TB, db bun.IDB, opts OutboxStoreOptions) *OutboxStore {
	t.Helper()
	st, err := NewOutboxStore(context.Background(), db, opts)
	if err != nil {
		t.Fatalf("NewOutboxStore: %v", err)
	}
	return st
}

// bunOutboxTx is a producer transaction of the conformance suite: a bun.Tx
// with Enqueue on it, as an application would write it.
type bunOutboxTx struct{ tx bun.Tx }

func (p bunOutboxTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	return Enqueue(ctx, p.tx, id, lane, payload)
}
func (p bunOutboxTx) Commit(context.Context) error   { return p.tx.Commit() }
func (p bunOutboxTx) Rollback(context.Context) error { return p.tx.Rollback() }

func bunOutboxProducer(db *bun.DB) conformance.OutboxProducer {
	return conformance.OutboxProducerFunc(func(ctx context.Context) (conformance.OutboxTx, error) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{})
		if err != nil {
			return nil, err
		}
		return bunOutboxTx{tx: tx}, nil
	})
}

func TestOutboxStore_Conformance(t *testing.T) {
	conformance.RunOutboxStore(t, func(t *testing.T) conformance.OutboxHarness {
		_, db := bunEnv(t)
		st := mustOutboxStore(t, db, OutboxStoreOptions{})
		return conformance.OutboxHarness{
			Store:      st,
			Producer:   bunOutboxProducer(db),
			HoldSettle: holdSettle(st, db),
			Unmigrated: func(t *testing.T) conformance.OutboxHarness {
				bare := openBun(t, testenv.Postgres(t))
				return conformance.OutboxHarness{Store: mustOutboxStore(t, bare, OutboxStoreOptions{}), Producer: bunOutboxProducer(bare)}
			},
			SchemaMismatch: ErrSchemaMismatch,
		}
	}, conformance.OutboxFeatures{})
}

// holdSettle runs the store's own settlement in a transaction it leaves
// open, and reports producers waiting on that transaction's backend.
func holdSettle(st *OutboxStore, db *bun.DB) func(context.Context, outbox.Settlement) (conformance.HeldSettlement, error) {
	return func(ctx context.Context, s outbox.Settlement) (conformance.HeldSettlement, error) {
		h, err := open(db, "holdSettle")
		if err != nil {
			return nil, err
		}
		tx, err := h.Begin(ctx)
		if err != nil {
			return nil, err
		}
		held := &heldSettlement{db: db, tx: tx}
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&held.pid); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
		if err := st.SettleIn(ctx, tx, s); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
		return held, nil
	}
}

type heldSettlement struct {
	db  *bun.DB
	tx  pgsql.Tx
	pid int
}

func (h *heldSettlement) Blocking(ctx context.Context) (bool, error) {
	var blocking bool
	err := h.db.NewRaw("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE ?::int = ANY (pg_blocking_pids(pid)))", h.pid).Scan(ctx, &blocking)
	return blocking, err
}

func (h *heldSettlement) Commit(ctx context.Context) error {
	if err := h.tx.Commit(ctx); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

func (h *heldSettlement) Rollback(ctx context.Context) error {
	if err := h.tx.Rollback(ctx); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

// See the PostgreSQL adapter's test of the same name.
func TestOutboxStore_ParkingAnEntryWithADeadLettersIDReplacesItInsteadOfFailing(t *testing.T) {
	_, db := bunEnv(t)
	ctx := testContext(t)
	st := mustOutboxStore(t, db, OutboxStoreOptions{})
	id := outbox.NewID()
	if _, err := db.NewRaw(`INSERT INTO baton_outbox_dead (id, xid, lane, payload, error) VALUES (?, '1', 'old', '{"v": 1}', 'first')`, id.String()).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.NewRaw(`INSERT INTO baton_outbox (id, lane, payload) VALUES (?, 'new', '{"v": 2}')`, id.String()).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	var es []outbox.Entry
	for deadline := time.Now().Add(10 * time.Second); len(es) == 0; time.Sleep(10 * time.Millisecond) {
		var err error
		if es, err = st.Scan(ctx, outbox.Cursor{}, 10); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("the entry did not become visible")
		}
	}
	err := st.Settle(ctx, outbox.Settlement{To: es[0].Cursor(), Park: []outbox.Parked{{Entry: es[0], Reason: "second"}}})
	if err != nil {
		t.Fatalf("parking an entry whose id has a dead letter: %v; the settlement must not fail on it", err)
	}
	d, err := st.GetDead(ctx, id)
	if err != nil || d.Lane != "new" || !strings.HasPrefix(d.Error, "second (this replaced a dead letter") {
		t.Fatalf("the dead letter is %+v, %v; want the newer entry, its error saying what it replaced", d, err)
	}
}

// Over a *bun.DB a granted settlement is the one statement that commits on
// its own, and the driver may scan while it settles; over a bun.Tx, whose
// failed statement would end the caller's transaction and whose one
// session cannot serve two calls at once, neither.
func TestOutboxStore_SettlesAtOnceAndScansConcurrentlyOnlyOverTheDatabase(t *testing.T) {
	ctx := testContext(t)
	_, db := bunEnv(t)
	h, err := open(db, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.outboxDB().(pgsql.Autocommitter); !ok {
		t.Error("the handle over a *bun.DB does not settle at once")
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	h, err = open(tx, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := h.outboxDB().(pgsql.Autocommitter); ok {
		t.Error("the handle over a bun.Tx settles with statements that commit on their own")
	}
	for _, c := range []struct {
		db   bun.IDB
		want bool
	}{{db, true}, {tx, false}} {
		st, err := NewOutboxStore(ctx, c.db, OutboxStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := st.ScansConcurrently(); got != c.want {
			t.Errorf("a store over a %T: ScansConcurrently() = %v, want %v", c.db, got, c.want)
		}
	}
}
