package bunstore

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/internal/testenv"
)

func TestMigrate_PassesBothAdaptersVerifySchema(t *testing.T) {
	env, db := bunEnv(t)
	if err := pgxstore.VerifySchema(testContext(t), env.Pool, pgxstore.VerifyOptions{}); err != nil {
		t.Fatalf("pgxstore.VerifySchema of the schema bun migrated: %v", err)
	}
	if err := VerifySchema(testContext(t), db, SchemaOptions{}); err != nil {
		t.Fatalf("bunstore.VerifySchema of the schema bun migrated: %v", err)
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

// appliedBy records the versions Migrate logs as applied.
type appliedBy struct {
	mu       sync.Mutex
	versions []int64
	found    []int64
}

func (r *appliedBy) Enabled(context.Context, slog.Level) bool { return true }
func (r *appliedBy) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *appliedBy) WithGroup(string) slog.Handler            { return r }
func (r *appliedBy) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "version" {
			switch rec.Message {
			case "baton: applied schema migration":
				r.versions = append(r.versions, a.Value.Int64())
			case "baton: recorded schema migration found applied":
				r.found = append(r.found, a.Value.Int64())
			}
		}
		return true
	})
	return nil
}

// TestMigrate_EitherAdapterMigratesAndVerifiesTheOthersSchema: a schema
// migrated by pgxstore.Migrate is up to date for bunstore.Migrate and passes
// bunstore.VerifySchema; one migrated by bunstore.Migrate likewise for the pgx
// adapter. Either way the second Migrate applies nothing, and the two
// catalogs are the same.
func TestMigrate_EitherAdapterMigratesAndVerifiesTheOthersSchema(t *testing.T) {
	ctx := testContext(t)
	pgxFirst := testenv.Postgres(t)
	if err := pgxstore.Migrate(ctx, pgxFirst.Pool, pgxstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	onPgx := openBun(t, pgxFirst)
	rec := &appliedBy{}
	if err := Migrate(ctx, onPgx, SchemaOptions{Logger: slog.New(rec)}); err != nil || len(rec.versions)+len(rec.found) > 0 {
		t.Errorf("bunstore.Migrate of a pgx-migrated schema: %v, applied %v, found %v; want nothing to do", err, rec.versions, rec.found)
	}
	if err := VerifySchema(ctx, onPgx, SchemaOptions{}); err != nil {
		t.Errorf("bunstore.VerifySchema of a pgx-migrated schema: %v", err)
	}

	bunFirst, _ := bunEnv(t)
	rec = &appliedBy{}
	if err := pgxstore.Migrate(ctx, bunFirst.Pool, pgxstore.MigrateOptions{Logger: slog.New(rec)}); err != nil || len(rec.versions)+len(rec.found) > 0 {
		t.Errorf("pgxstore.Migrate of a bun-migrated schema: %v, applied %v, found %v; want nothing to do", err, rec.versions, rec.found)
	}
	if err := pgxstore.VerifySchema(ctx, bunFirst.Pool, pgxstore.VerifyOptions{}); err != nil {
		t.Errorf("pgxstore.VerifySchema of a bun-migrated schema: %v", err)
	}
	if want, got := catalog(t, pgxFirst, pgxFirst.Schema), catalog(t, bunFirst, bunFirst.Schema); !slices.Equal(want, got) {
		t.Errorf("the catalogs differ:\npgx: %q\nbun: %q", want, got)
	}
}

// modelsSchema builds, in env's schema, the schema this package built from
// its models before it ran the migration files (the statements that code
// sent, kept in testdata): every table, no version rows.
func modelsSchema(t *testing.T, env *testenv.PostgresEnv) {
	t.Helper()
	script, err := os.ReadFile("testdata/createschema_models.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(testContext(t), string(script)); err != nil {
		t.Fatal(err)
	}
}

// TestMigrate_AdoptsASchemaTheModelsBuilt: on a schema made by the bun
// adapter's former CreateSchema, which built the tables of migration
// version 4, either adapter's Migrate records versions 1 to 4 as found
// applied, runs only 5 (the trace_context columns the models did not have
// then), and leaves the catalog of a migrated schema.
func TestMigrate_AdoptsASchemaTheModelsBuilt(t *testing.T) {
	ctx := testContext(t)
	migrated := testenv.Postgres(t)
	if err := pgxstore.Migrate(ctx, migrated.Pool, pgxstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := catalog(t, migrated, migrated.Schema)
	for name, migrate := range map[string]func(*testenv.PostgresEnv, *slog.Logger) error{
		"pgxstore.Migrate": func(env *testenv.PostgresEnv, l *slog.Logger) error {
			return pgxstore.Migrate(ctx, env.Pool, pgxstore.MigrateOptions{Logger: l})
		},
		"bunstore.Migrate": func(env *testenv.PostgresEnv, l *slog.Logger) error {
			return Migrate(ctx, openBun(t, env), SchemaOptions{Logger: l})
		},
	} {
		env := testenv.Postgres(t)
		modelsSchema(t, env)
		var se *pgxstore.SchemaError
		if err := pgxstore.VerifySchema(ctx, env.Pool, pgxstore.VerifyOptions{}); !errors.As(err, &se) ||
			!slices.Equal(se.Problems, []string{"column baton_outbox.trace_context is missing (want text)", "column baton_outbox_dead.trace_context is missing (want text)"}) {
			t.Fatalf("the models' schema: %v; want only the columns of migration 5 missing", err)
		}
		rec := &appliedBy{}
		if err := migrate(env, slog.New(rec)); err != nil {
			t.Fatalf("%s of the models' schema: %v", name, err)
		}
		if !slices.Equal(rec.versions, []int64{5}) || !slices.Equal(rec.found, []int64{1, 2, 3, 4}) {
			t.Errorf("%s applied %v and found %v; want 1 to 4 found, 5 applied", name, rec.versions, rec.found)
		}
		if after := catalog(t, env, env.Schema); !slices.Equal(after, want) {
			t.Errorf("%s did not leave the catalog of a migrated schema:\nafter %q\nwant  %q", name, after, want)
		}
		var versions int
		if err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM baton_schema_migrations").Scan(&versions); err != nil || versions != 5 {
			t.Errorf("%s recorded %d versions (%v), want 5", name, versions, err)
		}
		if err := VerifySchema(ctx, openBun(t, env), SchemaOptions{}); err != nil {
			t.Errorf("after %s: %v", name, err)
		}
	}
}

// TestModels_MatchTheMigratedTables: bun's CreateTable on the models makes
// the columns of a migrated schema (position, type, nullability, default),
// so the models read and write the tables as they are.
func TestModels_MatchTheMigratedTables(t *testing.T) {
	ctx := testContext(t)
	migrated, _ := bunEnv(t)
	fromModels := testenv.Postgres(t)
	db := openBun(t, fromModels)
	if _, err := db.ExecContext(ctx, "CREATE SEQUENCE baton_projection_generation"); err != nil { // a column default names it
		t.Fatal(err)
	}
	for _, m := range Models() {
		if _, err := db.NewCreateTable().Model(m).Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	collation := regexp.MustCompile(` collation=\S+$`)
	columns := func(env *testenv.PostgresEnv) []string {
		var out []string
		for _, l := range catalog(t, env, env.Schema) {
			if strings.HasPrefix(l, "column ") {
				out = append(out, collation.ReplaceAllString(l, ""))
			}
		}
		return out
	}
	if want, got := columns(migrated), columns(fromModels); !slices.Equal(want, got) {
		t.Errorf("the models' columns differ from the migrated tables':\nmigrated %q\nmodels   %q", want, got)
	}
}

// TestMigrate_IsIdempotentRepairsAnIndexAndPrintsTheDDLForAColumn: a second
// Migrate changes nothing; a dropped index is created again; a dropped
// column is refused with the statement that restores it, which does.
func TestMigrate_IsIdempotentRepairsAnIndexAndPrintsTheDDLForAColumn(t *testing.T) {
	env, db := bunEnv(t)
	ctx := testContext(t)
	before := catalog(t, env, env.Schema)
	if err := Migrate(ctx, db, SchemaOptions{}); err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if after := catalog(t, env, env.Schema); !slices.Equal(before, after) {
		t.Fatalf("a second Migrate changed the catalog")
	}
	if _, err := env.Pool.Exec(ctx, "DROP INDEX baton_outbox_dead_parked"); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(ctx, db, SchemaOptions{}); err != nil {
		t.Fatalf("Migrate with an index missing: %v", err)
	}
	if after := catalog(t, env, env.Schema); !slices.Equal(before, after) {
		t.Fatalf("Migrate did not restore the index")
	}
	if _, err := env.Pool.Exec(ctx, "ALTER TABLE baton_role_leases DROP COLUMN holder_address"); err != nil {
		t.Fatal(err)
	}
	err := Migrate(ctx, db, SchemaOptions{})
	var se *SchemaError
	const ddl = `ALTER TABLE "baton_role_leases" ADD COLUMN holder_address text NOT NULL DEFAULT ''`
	if !errors.As(err, &se) || !errors.Is(err, ErrSchemaMismatch) || !slices.Equal(se.DDL, []string{ddl}) || !strings.Contains(err.Error(), ddl) {
		t.Fatalf("Migrate with a column missing = %v; want a *SchemaError printing %s", err, ddl)
	}
	if _, err := env.Pool.Exec(ctx, se.DDL[0]); err != nil {
		t.Fatal(err)
	}
	if err := VerifySchema(ctx, db, SchemaOptions{}); err != nil {
		t.Fatalf("after the printed DDL: %v", err)
	}
}

// TestMigrate_InANamedSchemaInsideACallersTransaction: inside a bun.Tx
// (a savepoint), a schema whose name needs quoting is created and filled,
// and the caller's search_path is as it was afterwards; the stores work
// there with their Schema option.
func TestMigrate_InANamedSchemaInsideACallersTransaction(t *testing.T) {
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
		if err := Migrate(ctx, tx, SchemaOptions{Schema: named}); err != nil {
			return err
		}
		if err := tx.NewRaw("SELECT current_setting('search_path')").Scan(ctx, &after); err != nil {
			return err
		}
		if before != after {
			t.Errorf("search_path was %q before Migrate and %q after", before, after)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pgxstore.VerifySchema(ctx, env.Pool, pgxstore.VerifyOptions{Schema: named}); err != nil {
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
		err := Migrate(ctx, offlineDB(t), SchemaOptions{Schema: name})
		if !errors.Is(err, ErrInvalidSchemaName) || !strings.Contains(err.Error(), "SchemaOptions.Schema") {
			t.Errorf("Migrate(Schema %q) = %v; want ErrInvalidSchemaName naming SchemaOptions.Schema", name, err)
		}
	}
}
