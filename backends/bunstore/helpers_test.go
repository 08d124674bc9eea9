package bunstore

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/baton-go/baton/internal/testenv"
)

// openBun opens a bun.DB on pgx's database/sql driver, on the test's
// schema, closed when the test ends: what a bun node of the service has.
func openBun(t testing.TB, env *testenv.PostgresEnv) *bun.DB {
	t.Helper()
	sqldb, err := sql.Open("pgx", env.URL)
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// testContext is a context that ends with the test, bounded to 2 minutes.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// bunEnv gives the test its own schema, migrated through this package, and
// a bun.DB on it.
func bunEnv(t testing.TB) (*testenv.PostgresEnv, *bun.DB) {
	t.Helper()
	env := testenv.Postgres(t)
	db := openBun(t, env)
	if err := Migrate(testContext(t), db, SchemaOptions{}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return env, db
}

// offlineDB is a bun.DB that never connects (sql.OpenDB dials lazily): for
// checks that must fail before anything is sent.
func offlineDB(t testing.TB) *bun.DB {
	t.Helper()
	sqldb, err := sql.Open("pgx", "postgres://baton@127.0.0.1:1/baton")
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// pgxConnConfig parses url for pgx's stdlib driver with extra start-up
// parameters.
func pgxConnConfig(url string, params map[string]string) (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	for k, v := range params {
		cc.RuntimeParams[k] = v
	}
	return cc, nil
}
