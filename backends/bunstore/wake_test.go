package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
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
	st := mustOutboxStore(t, db, OutboxStoreOptions{})
	quiet := mustOutboxStore(t, db, OutboxStoreOptions{SignalDisabled: true})
	enqueue := map[waketest.Producer]func(context.Context, bun.IDB, outbox.ID, string, []byte) error{
		waketest.PackageEnqueue: Enqueue, waketest.StoreEnqueue: st.Enqueue, waketest.QuietEnqueue: quiet.Enqueue,
	}
	return waketest.Outbox{
		Store: st, Admin: admin, Table: `"` + OutboxTable + `"`,
		Commit: func(ctx context.Context, p waketest.Producer, n int) ([]outbox.ID, error) {
			ids := make([]outbox.ID, n)
			return ids, db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				for i := range ids {
					ids[i] = outbox.NewID()
					if err := enqueue[p](ctx, tx, ids[i], waketest.Lane, []byte(`{"wake": true}`)); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
}

// wakeWork is the scenarios' work table table (created like the suite's
// work_rows, which is created first) in db's search_path, with admin on the
// same database.
func wakeWork(t *testing.T, ctx context.Context, db *bun.DB, admin *pgxpool.Pool, table string) waketest.Work[conformance.WorkRow] {
	t.Helper()
	quoted := pgx.Identifier{table}.Sanitize()
	if table == "work_rows" {
		createSuiteTable(t, ctx, db)
	} else if _, err := db.ExecContext(ctx, "CREATE TABLE "+quoted+" (LIKE work_rows INCLUDING ALL)"); err != nil {
		t.Fatal(err)
	}
	opts := suiteOptions()
	opts.Table = table
	st, err := NewWorkRows[int64, conformance.WorkRow](ctx, db, opts)
	if err != nil {
		t.Fatalf("NewWorkRows: %v", err)
	}
	return waketest.Work[conformance.WorkRow]{
		Store: st, Admin: admin, Table: quoted,
		Insert: func(ctx context.Context, id int64, signal bool) error {
			return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				row := suiteRow{ID: id, Seq: id}
				if _, err := tx.NewInsert().Model(&row).ModelTableExpr(quoted).Exec(ctx); err != nil {
					return err
				}
				if !signal {
					return nil
				}
				return st.Signal(ctx, tx)
			})
		},
	}
}

// throwaway is a bun.DB, and a pool beside it, on a server of the test's
// own, without autovacuum, so no other transaction moves its horizon.
func throwaway(t *testing.T, ctx context.Context) (*bun.DB, *pgxpool.Pool) {
	t.Helper()
	srv := testenv.StartPostgresServer(t, "autovacuum=off")
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
	return db, admin
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
	ctx := testContext(t)
	db, admin := throwaway(t, ctx)
	waketest.PinnedHorizon(t, wakeOutbox(t, ctx, db, admin))
}

func TestWake_ABurstOfCommitsDuringAPassIsOneFurtherPass(t *testing.T) {
	ctx := testContext(t)
	db, admin := throwaway(t, ctx)
	waketest.BurstIsOneFurtherPass(t, wakeOutbox(t, ctx, db, admin))
}

func TestWake_APollOnlyDriverNeverListensAndDeliversByPolling(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.DriverPollOnly(t, wakeOutbox(t, testContext(t), openBun(t, env), env.Pool))
}

func TestWake_AStoreWithSignalDisabledNeverSignals(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.SignalDisabledNeverSignals(t, wakeOutbox(t, testContext(t), openBun(t, env), env.Pool))
}

func TestWake_TheSignalsOfOneTransactionFoldIntoOne(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.SignalsOfOneTransactionFold(t, wakeOutbox(t, testContext(t), openBun(t, env), env.Pool))
}

func TestWake_AWorkerIsWokenByASignalledInsert(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerWakes(t, wakeWork(t, testContext(t), openBun(t, env), env.Pool, "work_rows"))
}

func TestWake_AKilledWorkerListenConnectionFallsBackToPollingAndListensAgain(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerFallback(t, wakeWork(t, testContext(t), openBun(t, env), env.Pool, "work_rows"))
}

func TestWake_APollOnlyWorkerNeverListensAndClaimsByPolling(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerPollOnly(t, wakeWork(t, testContext(t), openBun(t, env), env.Pool, "work_rows"))
}

func TestWake_AnotherTablesSignalInTheSameSchemaDoesNotWakeAWorker(t *testing.T) {
	env := testenv.Postgres(t)
	ctx, db := testContext(t), openBun(t, env)
	own := wakeWork(t, ctx, db, env.Pool, "work_rows")
	waketest.WorkerOwnTable(t, own, wakeWork(t, ctx, db, env.Pool, "other_rows"))
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

func TestWake_TwoIdleWorkersOfOneTableShareTheGateAndAreBothWoken(t *testing.T) {
	env := testenv.Postgres(t)
	ctx, db := testContext(t), openBun(t, env)
	waketest.WorkersShareTheGate(t, wakeWork(t, ctx, db, env.Pool, "work_rows"))
}
