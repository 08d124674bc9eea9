package pgxstore

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/backends/internal/waketest"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// wakeOutbox is the scenarios' outbox over pool's search_path.
func wakeOutbox(t *testing.T, ctx context.Context, pool *pgxpool.Pool) waketest.Outbox {
	return wakeOutboxIn(t, ctx, pool, "")
}

// wakeOutboxIn is the scenarios' outbox in schema ("" for pool's
// search_path). Outside the search_path there is no package-level Enqueue.
func wakeOutboxIn(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) waketest.Outbox {
	t.Helper()
	mustMigrate(t, ctx, pool, MigrateOptions{Schema: schema})
	st := mustOutboxStore(t, pool, OutboxStoreOptions{Schema: schema})
	quiet := mustOutboxStore(t, pool, OutboxStoreOptions{Schema: schema, SignalDisabled: true})
	enqueue := map[waketest.Producer]enqueueFunc{waketest.StoreEnqueue: st.Enqueue, waketest.QuietEnqueue: quiet.Enqueue}
	if schema == "" {
		enqueue[waketest.PackageEnqueue] = Enqueue
	}
	return waketest.Outbox{
		Store: st, Admin: pool, Table: pgsql.Qualified(schema, OutboxTable),
		Commit: func(ctx context.Context, p waketest.Producer, n int) ([]outbox.ID, error) {
			ids := make([]outbox.ID, n)
			return ids, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
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
// work_rows, which is created first) in pool's search_path.
func wakeWork(t *testing.T, ctx context.Context, pool *pgxpool.Pool, table string) waketest.Work[conformance.WorkRow] {
	t.Helper()
	if table == "work_rows" {
		createSuiteTable(t, ctx, pool)
	} else if _, err := pool.Exec(ctx, "CREATE TABLE "+pgx.Identifier{table}.Sanitize()+" (LIKE work_rows INCLUDING ALL)"); err != nil {
		t.Fatal(err)
	}
	st, err := NewWorkRows[int64](pool, WorkRowsOptions[conformance.WorkRow]{
		Table: table, Live: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder,
	})
	if err != nil {
		t.Fatalf("NewWorkRows: %v", err)
	}
	quoted := pgx.Identifier{table}.Sanitize()
	return waketest.Work[conformance.WorkRow]{
		Store: st, Admin: pool, Table: quoted,
		Insert: func(ctx context.Context, id int64, signal bool) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO `+quoted+` (id, seq) VALUES ($1, $1)`, id); err != nil {
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

// throwawayPool is a pool on a server of the test's own, without
// autovacuum, so no other transaction moves its horizon.
func throwawayPool(t *testing.T, ctx context.Context) *pgxpool.Pool {
	t.Helper()
	srv := testenv.StartPostgresServer(t, "autovacuum=off")
	pool, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestWake_TheLeaderIsWokenByACommitNotByAPoll(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.DriverWakes(t, wakeOutbox(t, testContext(t), env.Pool))
}

func TestWake_AKilledListenConnectionFallsBackToPollingAndListensAgain(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.DriverFallback(t, wakeOutbox(t, testContext(t), env.Pool))
}

func TestWake_ASignalledEntryIsDeliveredSoonAfterAPinnedHorizonPasses(t *testing.T) {
	ctx := testContext(t)
	waketest.PinnedHorizon(t, wakeOutbox(t, ctx, throwawayPool(t, ctx)))
}

func TestWake_ABurstOfCommitsDuringAPassIsOneFurtherPass(t *testing.T) {
	ctx := testContext(t)
	waketest.BurstIsOneFurtherPass(t, wakeOutbox(t, ctx, throwawayPool(t, ctx)))
}

func TestWake_APollOnlyDriverNeverListensAndDeliversByPolling(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.DriverPollOnly(t, wakeOutbox(t, testContext(t), env.Pool))
}

func TestWake_AStoreWithSignalDisabledNeverSignals(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.SignalDisabledNeverSignals(t, wakeOutbox(t, testContext(t), env.Pool))
}

// The signal names its table through a constant of the statement: in a
// schema whose name needs quoting and escaping, beside an outbox in the
// search_path, a store signals its own table's channel.
func TestWake_AStoreInASchemaNeedingQuotesSignalsItsOwnTable(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	schema := extraSchema(t, env, `Wake "odd" 'schema' \ `)
	waketest.SignalDisabledNeverSignals(t, wakeOutboxIn(t, ctx, env.Pool, schema))
}

func TestWake_TheSignalsOfOneTransactionFoldIntoOne(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.SignalsOfOneTransactionFold(t, wakeOutbox(t, testContext(t), env.Pool))
}

func TestWake_AWorkerIsWokenByASignalledInsert(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerWakes(t, wakeWork(t, testContext(t), env.Pool, "work_rows"))
}

func TestWake_AKilledWorkerListenConnectionFallsBackToPollingAndListensAgain(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerFallback(t, wakeWork(t, testContext(t), env.Pool, "work_rows"))
}

func TestWake_APollOnlyWorkerNeverListensAndClaimsByPolling(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerPollOnly(t, wakeWork(t, testContext(t), env.Pool, "work_rows"))
}

func TestWake_AnotherTablesSignalInTheSameSchemaDoesNotWakeAWorker(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	own := wakeWork(t, ctx, env.Pool, "work_rows")
	waketest.WorkerOwnTable(t, own, wakeWork(t, ctx, env.Pool, "other_rows"))
}

// Every error of the adapter starts with its package's name, the errors of
// the listening sessions and of SignalWorkRows too. The pool is closed, so
// nothing reaches a server.
func TestWake_ErrorsStartWithThePackagesName(t *testing.T) {
	ctx := testContext(t)
	pool, err := pgxpool.New(ctx, "postgres://127.0.0.1:1/baton")
	if err != nil {
		t.Fatal(err)
	}
	pool.Close()
	_, outboxErr := mustOutboxStore(t, pool, OutboxStoreOptions{}).Listen(ctx)
	_, workErr := suiteStore(t, pool).Listen(ctx)
	_, logErr := NewOutboxLogStore(nil, OutboxLogOptions{})
	for name, err := range map[string]error{
		"OutboxStore.Listen":        outboxErr,
		"WorkRows.Listen":           workErr,
		"LeaseStore.WatchReleases":  mustLeaseStore(t, pool, LeaseStoreOptions{}).WatchReleases(ctx, func(string) {}),
		"SignalWorkRows":            SignalWorkRows(ctx, nil, "", ""),
		"NewOutboxLogStore(nil, …)": logErr,
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "baton/pgxstore: ") {
			t.Errorf("%s: %v; want an error starting with baton/pgxstore:", name, err)
		}
	}
}

func TestWake_TwoIdleWorkersOfOneTableShareTheGateAndAreBothWoken(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkersShareTheGate(t, wakeWork(t, testContext(t), env.Pool, "work_rows"))
}
