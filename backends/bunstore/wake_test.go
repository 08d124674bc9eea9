package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/baton-go/baton/backends/internal/waketest"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// wakeOutbox is the scenarios' outbox over db, migrated, with admin on the
// same database.
func wakeOutbox(t *testing.T, ctx context.Context, db *bun.DB, admin *pgxpool.Pool) waketest.Outbox {
	t.Helper()
	if err := Migrate(ctx, db, SchemaOptions{}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	st, err := NewOutboxStore(ctx, db, OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return waketest.Outbox{
		Store: st, Admin: admin, Table: `"` + OutboxTable + `"`,
		Enqueue: func(ctx context.Context) (outbox.ID, error) {
			id := outbox.NewID()
			return id, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				return Enqueue(ctx, tx, id, waketest.Lane, []byte(`{"wake": true}`))
			})
		},
	}
}

func wakeWork(t *testing.T, ctx context.Context, db *bun.DB, admin *pgxpool.Pool) waketest.Work[conformance.WorkRow] {
	t.Helper()
	createSuiteTable(t, ctx, db)
	st := suiteStore(t, db)
	return waketest.Work[conformance.WorkRow]{
		Store: st, Admin: admin, Table: `"work_rows"`,
		Insert: func(ctx context.Context, id int64) error {
			return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				row := suiteRow{ID: id, Seq: id}
				if _, err := tx.NewInsert().Model(&row).Exec(ctx); err != nil {
					return err
				}
				return st.Signal(ctx, tx)
			})
		},
	}
}

func TestWake_TheLeaderIsWokenByACommitNotByAPoll(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.DriverWakes(t, wakeOutbox(t, testContext(t), openBun(t, env), env.Pool))
}

func TestWake_AKilledListenConnectionFallsBackToPollingAndListensAgain(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.DriverFallback(t, wakeOutbox(t, testContext(t), openBun(t, env), env.Pool))
}

func TestWake_ASignalledEntryIsDeliveredSoonAfterAPinnedHorizonPasses(t *testing.T) {
	srv := testenv.StartPostgresServer(t)
	ctx := testContext(t)
	admin, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	sqldb, err := sql.Open("pgx", srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	waketest.PinnedHorizon(t, wakeOutbox(t, ctx, db, admin))
}

func TestWake_AWorkerIsWokenByASignalledInsert(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerWakes(t, wakeWork(t, testContext(t), openBun(t, env), env.Pool))
}

func TestWake_AKilledWorkerListenConnectionFallsBackToPollingAndListensAgain(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerFallback(t, wakeWork(t, testContext(t), openBun(t, env), env.Pool))
}

// A store over a bun.Tx cannot listen; its driver or workers poll. The
// error, like every error of the adapter, starts with its package's name.
func TestWake_AStoreOverATransactionCannotListen(t *testing.T) {
	_, db := bunEnv(t)
	ctx := testContext(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	st, err := NewOutboxStore(ctx, tx, OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, outboxErr := st.Listen(ctx)
	_, workErr := suiteStore(t, tx).Listen(ctx)
	for name, err := range map[string]error{"OutboxStore.Listen": outboxErr, "WorkRows.Listen": workErr} {
		if !errors.Is(err, ErrListenUnsupported) || !strings.HasPrefix(err.Error(), "baton/bunstore: ") {
			t.Errorf("%s over a bun.Tx: %v, want ErrListenUnsupported, starting with baton/bunstore:", name, err)
		}
	}
}

// SignalWorkRows refuses an invalid table name before it sends anything,
// in an error that starts with the package's name.
func TestWake_SignalWorkRowsRefusesAnEmptyTableName(t *testing.T) {
	err := SignalWorkRows(testContext(t), offlineDB(t), "", "")
	if err == nil || !strings.HasPrefix(err.Error(), "baton/bunstore: SignalWorkRows: table") {
		t.Fatalf("SignalWorkRows with no table: %v, want an error starting with baton/bunstore: SignalWorkRows: table", err)
	}
}
