package pgxstore

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/waketest"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// wakeOutbox is the scenarios' outbox over pool's search_path.
func wakeOutbox(t *testing.T, ctx context.Context, pool *pgxpool.Pool) waketest.Outbox {
	t.Helper()
	mustMigrate(t, ctx, pool, MigrateOptions{})
	st := mustOutboxStore(t, pool, OutboxStoreOptions{})
	return waketest.Outbox{
		Store: st, Admin: pool, Table: `"` + OutboxTable + `"`,
		Enqueue: func(ctx context.Context) (outbox.ID, error) {
			id := outbox.NewID()
			return id, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				return Enqueue(ctx, tx, id, waketest.Lane, []byte(`{"wake": true}`))
			})
		},
	}
}

func wakeWork(t *testing.T, ctx context.Context, pool *pgxpool.Pool) waketest.Work[conformance.WorkRow] {
	t.Helper()
	createSuiteTable(t, ctx, pool)
	st := suiteStore(t, pool)
	return waketest.Work[conformance.WorkRow]{
		Store: st, Admin: pool, Table: `"work_rows"`,
		Insert: func(ctx context.Context, id int64) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `INSERT INTO work_rows (id, seq) VALUES ($1, $1)`, id); err != nil {
					return err
				}
				return st.Signal(ctx, tx)
			})
		},
	}
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
	srv := testenv.StartPostgresServer(t)
	ctx := testContext(t)
	pool, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	waketest.PinnedHorizon(t, wakeOutbox(t, ctx, pool))
}

func TestWake_AWorkerIsWokenByASignalledInsert(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerWakes(t, wakeWork(t, testContext(t), env.Pool))
}

func TestWake_AKilledWorkerListenConnectionFallsBackToPollingAndListensAgain(t *testing.T) {
	env := testenv.Postgres(t)
	waketest.WorkerFallback(t, wakeWork(t, testContext(t), env.Pool))
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
