package bunorm

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/postgres"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/internal/testenv"
)

func TestCreateSchema_PassesVerifySchemaWithNoDifferences(t *testing.T) {
	env, _ := bunEnv(t)
	if err := postgres.VerifySchema(testContext(t), env.Pool, postgres.VerifyOptions{}); err != nil {
		t.Fatalf("VerifySchema of the schema bun created: %v", err)
	}
}

// catalog describes every object of a schema that baton's shape covers, one
// line per fact, with the schema's name replaced by "S": columns (position,
// type, nullability, default, collation), constraints, indexes, the
// persistence of every relation and the ownership of sequences. The
// migration bookkeeping table of the pgx adapter is left out.
func catalog(t *testing.T, env *testenv.PostgresEnv, schemaName string) []string {
	t.Helper()
	ctx := testContext(t)
	const q = `
SELECT format('column %s.%s #%s %s%s default=%s collation=%s', c.relname, a.attname, a.attnum,
              format_type(a.atttypid, a.atttypmod), CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
              coalesce(pg_get_expr(d.adbin, d.adrelid), '-'), coalesce(co.collname, '-'))
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 100
WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
  AND c.relname <> 'baton_schema_migrations'
UNION ALL
SELECT format('constraint %s.%s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname <> 'baton_schema_migrations'
UNION ALL
SELECT format('index %s', replace(pg_get_indexdef(i.indexrelid), quote_ident($1) || '.', 'S.'))
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname <> 'baton_schema_migrations'
UNION ALL
SELECT format('relation %s kind=%s persistence=%s', c.relname, c.relkind, c.relpersistence)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname NOT LIKE 'baton_schema_migrations%'
UNION ALL
SELECT format('sequence %s as %s owned by %s', c.relname, format_type(s.seqtypid, NULL), coalesce(
         (SELECT t.relname || '.' || a.attname FROM pg_depend dep
          JOIN pg_class t ON t.oid = dep.refobjid
          JOIN pg_attribute a ON a.attrelid = dep.refobjid AND a.attnum = dep.refobjsubid
          WHERE dep.objid = c.oid AND dep.deptype = 'a'), '-'))
FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1`
	rows, err := env.Pool.Query(ctx, q, schemaName)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return lines
}

// TestCreateSchema_BuildsTheSameCatalogAsThePgxMigrations is the one-shape
// guard: a schema made by postgres.Migrate and one made by CreateSchema
// must agree on every column (order, type, nullability, default,
// collation), constraint, index, persistence and sequence. A change on
// either side alone fails it.
func TestCreateSchema_BuildsTheSameCatalogAsThePgxMigrations(t *testing.T) {
	ctx := testContext(t)
	pgxEnv := testenv.Postgres(t)
	if err := postgres.Migrate(ctx, pgxEnv.Pool, postgres.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	bunEnv, _ := bunEnv(t)
	want, got := catalog(t, pgxEnv, pgxEnv.Schema), catalog(t, bunEnv, bunEnv.Schema)
	if len(want) < 40 {
		t.Fatalf("the pgx schema's catalog has only %d lines:\n%s", len(want), strings.Join(want, "\n"))
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			t.Errorf("the bun schema lacks: %s", l)
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			t.Errorf("the bun schema has, the pgx one has not: %s", l)
		}
	}
}

// TestCreateSchema_IsIdempotentAndRestoresWhatIsMissing: a second call
// changes nothing; after a column, a check and an index are dropped, a
// third call puts them back (the shape is computed against the database,
// not a remembered history).
func TestCreateSchema_IsIdempotentAndRestoresWhatIsMissing(t *testing.T) {
	env, db := bunEnv(t)
	ctx := testContext(t)
	before := catalog(t, env, env.Schema)
	if err := CreateSchema(ctx, db, SchemaOptions{}); err != nil {
		t.Fatalf("second CreateSchema: %v", err)
	}
	if after := catalog(t, env, env.Schema); !slices.Equal(before, after) {
		t.Fatalf("a second CreateSchema changed the catalog")
	}
	for _, q := range []string{
		"ALTER TABLE baton_role_leases DROP COLUMN holder_address",
		"ALTER TABLE baton_outbox DROP CONSTRAINT baton_outbox_lane_check",
		"DROP INDEX baton_outbox_dead_parked",
	} {
		if _, err := env.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := postgres.VerifySchema(ctx, env.Pool, postgres.VerifyOptions{}); err == nil {
		t.Fatal("VerifySchema accepted the damaged schema")
	}
	if err := CreateSchema(ctx, db, SchemaOptions{}); err != nil {
		t.Fatalf("CreateSchema on the damaged schema: %v", err)
	}
	// The re-added column comes last: compare columns without positions.
	position := regexp.MustCompile(` #[0-9]+ `)
	after := catalog(t, env, env.Schema)
	for i := range after {
		after[i] = position.ReplaceAllString(after[i], " ")
	}
	for _, l := range before {
		if l = position.ReplaceAllString(l, " "); !slices.Contains(after, l) {
			t.Errorf("not restored: %s", l)
		}
	}
	if err := postgres.VerifySchema(ctx, env.Pool, postgres.VerifyOptions{}); err != nil {
		t.Fatalf("after the repair: %v", err)
	}
}

// TestCreateSchema_InANamedSchemaInsideACallersTransaction: inside a bun.Tx
// (a savepoint), a schema whose name needs quoting is created and filled,
// and the caller's search_path is as it was afterwards; the stores work
// there with their Schema option.
func TestCreateSchema_InANamedSchemaInsideACallersTransaction(t *testing.T) {
	env := testenv.Postgres(t)
	db := openBun(t, env)
	ctx := testContext(t)
	named := `Baton "Q" ` + env.Schema
	t.Cleanup(func() {
		_, _ = env.Pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{named}.Sanitize()+" CASCADE")
	})
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var before, after string
		if err := tx.NewRaw("SELECT current_setting('search_path')").Scan(ctx, &before); err != nil {
			return err
		}
		if err := CreateSchema(ctx, tx, SchemaOptions{Schema: named}); err != nil {
			return err
		}
		if err := tx.NewRaw("SELECT current_setting('search_path')").Scan(ctx, &after); err != nil {
			return err
		}
		if before != after {
			t.Errorf("search_path was %q before CreateSchema and %q after", before, after)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.VerifySchema(ctx, env.Pool, postgres.VerifyOptions{Schema: named}); err != nil {
		t.Fatal(err)
	}
	st := mustOutboxStore(t, db, OutboxStoreOptions{Schema: named})
	id := outbox.NewID()
	if err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		return st.Enqueue(ctx, tx, id, "quoted", []byte(`{}`))
	}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		es, err := st.Scan(ctx, outbox.Cursor{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 1 && es[0].ID == id {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the entry in schema %q is not visible: %v", named, es)
		}
	}
	ls := mustLeaseStore(t, db, LeaseStoreOptions{Schema: named})
	if recs, err := ls.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "r"}}}); err != nil || !recs[0].Held {
		t.Fatalf("Heartbeat in schema %q: %v %+v", named, err, recs)
	}
	ps := mustProjectionStore(t, db, ProjectionStoreOptions{Schema: named})
	gen, err := ps.Reserve(ctx)
	if err != nil {
		t.Fatalf("Reserve in schema %q: %v", named, err)
	}
	if err := ps.Replace(ctx, projection.Subject{Type: "user", ID: "u"}, gen, nil); err != nil {
		t.Fatalf("Replace in schema %q: %v", named, err)
	}
	if err := DropSchema(ctx, db, SchemaOptions{Schema: named}); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = $1`, named).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d relations left after DropSchema", n)
	}
}

func TestSchemaOptions_RejectInvalidSchemaNamesNamingTheField(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"pg_baton", strings.Repeat("s", 64), "a\x00b", "  "} {
		err := CreateSchema(ctx, offlineDB(t), SchemaOptions{Schema: name})
		if !errors.Is(err, ErrInvalidSchemaName) || !strings.Contains(err.Error(), "SchemaOptions.Schema") {
			t.Errorf("CreateSchema(Schema %q) = %v; want ErrInvalidSchemaName naming SchemaOptions.Schema", name, err)
		}
	}
}
