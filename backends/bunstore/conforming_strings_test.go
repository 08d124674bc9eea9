package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// nonConformingDB is a bun.DB on pgx's stdlib driver over env's schema
// whose sessions have standard_conforming_strings off, set for these
// connections only (a start-up parameter); the server's configuration is
// not touched.
func nonConformingDB(t *testing.T, env *testenv.PostgresEnv) *bun.DB {
	t.Helper()
	cc, err := pgxConnConfig(env.URL, map[string]string{"standard_conforming_strings": "off"})
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(stdlib.OpenDB(*cc), pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	var v string
	if err := db.QueryRowContext(testContext(t), "SHOW standard_conforming_strings").Scan(&v); err != nil || v != "off" {
		t.Fatalf("standard_conforming_strings is %q (%v); the test needs a session with it off", v, err)
	}
	return db
}

// injectedLane closes bun's quoted literal when a backslash escapes a
// quote (standard_conforming_strings off), chooses the payload with SQL of
// its own, and comments out the rest of the line.
const injectedLane = `\'::text, to_jsonb(current_user) --`

// TestEnqueue_ALaneCannotInjectSQLWhateverStandardConformingStrings: the
// values travel as parameters, so a lane written to end a quoted literal
// early is stored as it is, on a session with the setting off as on one
// with it on.
func TestEnqueue_ALaneCannotInjectSQLWhateverStandardConformingStrings(t *testing.T) {
	env, on := bunEnv(t)
	ctx := testContext(t)
	for setting, db := range map[string]*bun.DB{"off": nonConformingDB(t, env), "on": on} {
		id := outbox.NewID()
		payload := `{"harmless": true}`
		err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			return Enqueue(ctx, tx, id, injectedLane, []byte(payload))
		})
		if err != nil {
			t.Fatalf("standard_conforming_strings %s: Enqueue: %v", setting, err)
		}
		var lane, stored string
		if err := env.Pool.QueryRow(ctx, `SELECT lane, payload::text FROM baton_outbox WHERE id = $1`, [16]byte(id)).Scan(&lane, &stored); err != nil {
			t.Fatalf("standard_conforming_strings %s: reading the entry back: %v", setting, err)
		}
		if lane != injectedLane || stored != payload {
			t.Errorf("standard_conforming_strings %s: the entry holds lane %q and payload %s, want lane %q and payload %s: the lane's text ran as SQL",
				setting, lane, stored, injectedLane, payload)
		}
	}
}

// TestStores_RefuseBunsOwnDriverNamingTheOneToUse: every entry point given
// a handle on bun's pgdriver refuses it, naming pgx's database/sql driver,
// before sending anything; a release watcher cannot even be built on it.
func TestStores_RefuseBunsOwnDriverNamingTheOneToUse(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	db := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(env.URL))), pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for what, err := range map[string]error{
		"NewLeaseStore":      errOf(NewLeaseStore(ctx, db, LeaseStoreOptions{})),
		"NewOutboxStore":     errOf(NewOutboxStore(ctx, db, OutboxStoreOptions{})),
		"NewProjectionStore": errOf(NewProjectionStore(ctx, db, ProjectionStoreOptions{})),
		"NewWorkRows":        errOf(NewWorkRows[int64, suiteRow](ctx, db, suiteOptions())),
		"Migrate":            Migrate(ctx, db, SchemaOptions{}),
		"VerifySchema":       VerifySchema(ctx, db, SchemaOptions{}),
		"DropSchema":         DropSchema(ctx, db, SchemaOptions{}),
		"Enqueue":            Enqueue(ctx, tx, outbox.NewID(), "lane", []byte(`{}`)),
	} {
		if !errors.Is(err, ErrUnsupportedDriver) || !strings.Contains(err.Error(), what) || !strings.Contains(err.Error(), "github.com/jackc/pgx/v5/stdlib") {
			t.Errorf("%s on pgdriver: %v; want ErrUnsupportedDriver naming pgx/v5/stdlib", what, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Errorf("the transaction after the refused Enqueue: %v", err)
	}
	if tables := countBatonTables(t, env); tables != 0 {
		t.Errorf("%d baton tables after refused calls", tables)
	}
}

func countBatonTables(t *testing.T, env *testenv.PostgresEnv) int {
	t.Helper()
	var n int
	if err := env.Pool.QueryRow(testContext(t), `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
WHERE s.nspname = $1 AND c.relname LIKE 'baton%'`, env.Schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestStores_RefuseASessionWithoutStandardConformingStrings(t *testing.T) {
	env, _ := bunEnv(t)
	ctx := testContext(t)
	db := nonConformingDB(t, env)
	for what, err := range map[string]error{
		"NewLeaseStore":      errOf(NewLeaseStore(ctx, db, LeaseStoreOptions{})),
		"NewOutboxStore":     errOf(NewOutboxStore(ctx, db, OutboxStoreOptions{})),
		"NewProjectionStore": errOf(NewProjectionStore(ctx, db, ProjectionStoreOptions{})),
		"NewWorkRows":        errOf(NewWorkRows[int64, suiteRow](ctx, db, suiteOptions())),
	} {
		if !errors.Is(err, ErrNonStandardStrings) || !strings.Contains(err.Error(), what) {
			t.Errorf("%s on a session with standard_conforming_strings off: %v; want ErrNonStandardStrings", what, err)
		}
	}
	// And on a session with the setting on, the same calls succeed.
	ok := openBun(t, env)
	if _, err := NewOutboxStore(ctx, ok, OutboxStoreOptions{}); err != nil {
		t.Errorf("NewOutboxStore on a conforming session: %v", err)
	}
}
