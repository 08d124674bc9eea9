package bunstore_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/internal/testenv"
)

// TestExample_RunsTheServiceEndToEndOnATestDatabase runs Example's code:
// the migrations make a schema VerifySchema accepts, every delivery is
// announced and then delivered once, in queue order, and a rollback of the
// migrations removes baton's tables again.
func TestExample_RunsTheServiceEndToEndOnATestDatabase(t *testing.T) {
	env := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sqldb, err := sql.Open("pgx", env.URL)
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	defer db.Close()

	var out strings.Builder
	if err := runExample(ctx, db, &out); err != nil {
		t.Fatalf("runExample: %v\noutput so far:\n%s", err, out.String())
	}
	want := `announced 3 deliveries
delivered https://a.example/hook (attempt 1, still ours: true)
delivered https://b.example/hook (attempt 1, still ours: true)
delivered https://c.example/hook (attempt 1, still ours: true)
0 deliveries left`
	if got := strings.TrimSpace(out.String()); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
	if err := pgxstore.VerifySchema(ctx, env.Pool, pgxstore.VerifyOptions{}); err != nil {
		t.Fatalf("after the bun migrations: %v", err)
	}
	if _, err := migrateRollbackAll(ctx, db); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace
WHERE s.nspname = $1 AND c.relname LIKE 'baton%'`, env.Schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d baton relations remain after rolling the migrations back", n)
	}
}
