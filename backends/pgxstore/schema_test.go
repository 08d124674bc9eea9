package pgxstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// logRecorder is a slog handler that keeps the messages it receives.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

// applied returns the version attribute of every "applied" record.
func (r *logRecorder) applied() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var versions []int64
	for _, rec := range r.records {
		if rec.Level != slog.LevelInfo || !strings.Contains(rec.Message, "applied schema migration") {
			continue
		}
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "version" {
				versions = append(versions, a.Value.Int64())
			}
			return true
		})
	}
	return versions
}

func allVersions() []int64 {
	var vs []int64
	for _, v := range pgsql.Versions() {
		vs = append(vs, int64(v))
	}
	return vs
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// extraSchema returns a fresh schema name built from base, and drops that
// schema (if anything created it) when the test ends. testenv only drops
// env.Schema.
func extraSchema(t *testing.T, env *testenv.PostgresEnv, base string) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	name := base + " " + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, env.ServerURL)
		if err != nil {
			t.Errorf("drop schema %q: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %q: %v", name, err)
		}
	})
	return name
}

func schemaExists(t *testing.T, ctx context.Context, env *testenv.PostgresEnv, name string) bool {
	t.Helper()
	var exists bool
	err := env.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", name).Scan(&exists)
	if err != nil {
		t.Fatal(err)
	}
	return exists
}

func tablesIn(t *testing.T, ctx context.Context, env *testenv.PostgresEnv, schema string) []string {
	t.Helper()
	rows, err := env.Pool.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func recordedVersions(t *testing.T, ctx context.Context, env *testenv.PostgresEnv, schema string) []int64 {
	t.Helper()
	rows, err := env.Pool.Query(ctx, "SELECT version FROM "+pgx.Identifier{schema, migrationsTable}.Sanitize()+" ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return versions
}

func mustMigrate(t *testing.T, ctx context.Context, db TxStarter, opts MigrateOptions) {
	t.Helper()
	if err := Migrate(ctx, db, opts); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
}

func schemaProblems(t *testing.T, err error) []string {
	t.Helper()
	var se *SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("VerifySchema = %v, want a *SchemaError", err)
	}
	if !errors.Is(err, ErrSchemaMismatch) {
		t.Errorf("errors.Is(%v, ErrSchemaMismatch) = false", err)
	}
	return se.Problems
}

func TestMigrateCreatesTablesInTheCurrentSchemaAndLogsEachMigration(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	rec := &logRecorder{}

	mustMigrate(t, ctx, env.Pool, MigrateOptions{Logger: slog.New(rec)})

	want := expectedTableNames()
	slices.Sort(want)
	if got := tablesIn(t, ctx, env, env.Schema); !slices.Equal(got, want) {
		t.Errorf("tables in %s = %q, want %q", env.Schema, got, want)
	}
	if got := recordedVersions(t, ctx, env, env.Schema); !slices.Equal(got, allVersions()) {
		t.Errorf("recorded versions = %v, want %v", got, allVersions())
	}
	if got := rec.applied(); !slices.Equal(got, allVersions()) {
		t.Errorf("logged versions = %v, want %v", got, allVersions())
	}
}

func TestMigrateTwiceIsANoOpTheSecondTime(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	first, second := &logRecorder{}, &logRecorder{}

	mustMigrate(t, ctx, env.Pool, MigrateOptions{Logger: slog.New(first)})
	var appliedAt time.Time
	if err := env.Pool.QueryRow(ctx, "SELECT max(applied_at) FROM baton_schema_migrations").Scan(&appliedAt); err != nil {
		t.Fatal(err)
	}
	mustMigrate(t, ctx, env.Pool, MigrateOptions{Logger: slog.New(second)})

	if got := second.applied(); len(got) != 0 {
		t.Errorf("second Migrate applied %v, want nothing", got)
	}
	if got := recordedVersions(t, ctx, env, env.Schema); !slices.Equal(got, allVersions()) {
		t.Errorf("recorded versions = %v, want %v", got, allVersions())
	}
	var again time.Time
	if err := env.Pool.QueryRow(ctx, "SELECT max(applied_at) FROM baton_schema_migrations").Scan(&again); err != nil {
		t.Fatal(err)
	}
	if !again.Equal(appliedAt) {
		t.Errorf("applied_at moved from %v to %v", appliedAt, again)
	}
}

func TestConcurrentMigrateOnSeparateConnectionsAppliesEachMigrationOnce(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	// A schema that does not exist yet, so the racers also contend on
	// creating it.
	schema := extraSchema(t, env, "baton race")
	rec := &logRecorder{}
	logger := slog.New(rec)

	const n = 8
	conns := make([]*pgx.Conn, n)
	for i := range conns {
		c, err := pgx.Connect(ctx, env.URL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		conns[i] = c
	}
	start := make(chan struct{})
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			<-start
			errs[i] = Migrate(ctx, c, MigrateOptions{Schema: schema, Logger: logger})
		})
	}
	close(start)
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Errorf("Migrate on connection %d: %v", i, err)
		}
	}
	if got := rec.applied(); !slices.Equal(got, allVersions()) {
		t.Errorf("applied across all callers = %v, want each of %v once", got, allVersions())
	}
	if got := recordedVersions(t, ctx, env, schema); !slices.Equal(got, allVersions()) {
		t.Errorf("recorded versions = %v, want %v", got, allVersions())
	}
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{Schema: schema}); err != nil {
		t.Errorf("VerifySchema: %v", err)
	}
}

func TestMigrateCreatesAndUsesASchemaNameNeedingQuotes(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schema := extraSchema(t, env, `My "odd" Schema`)
	if schemaExists(t, ctx, env, schema) {
		t.Fatalf("schema %q exists before the test", schema)
	}

	mustMigrate(t, ctx, env.Pool, MigrateOptions{Schema: schema})

	if !schemaExists(t, ctx, env, schema) {
		t.Fatalf("Migrate did not create schema %q", schema)
	}
	want := expectedTableNames()
	if got := tablesIn(t, ctx, env, schema); !slices.Equal(got, want) {
		t.Errorf("tables in %q = %q, want %q", schema, got, want)
	}
	if got := tablesIn(t, ctx, env, env.Schema); len(got) != 0 {
		t.Errorf("the connection's own schema got tables %q; the migrations must follow SET LOCAL search_path", got)
	}
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{Schema: schema}); err != nil {
		t.Errorf("VerifySchema: %v", err)
	}
	// SET LOCAL must not leak into the pooled session.
	var path string
	if err := env.Pool.QueryRow(ctx, "SHOW search_path").Scan(&path); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(path, "odd") {
		t.Errorf("search_path after Migrate = %q, the migration's setting leaked", path)
	}
	mustMigrate(t, ctx, env.Pool, MigrateOptions{Schema: schema}) // and again: no-op
}

func TestInvalidSchemaNameErrorsAndWritesNothing(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	long := "baton_too_long_" + strings.Repeat("x", 64)
	cases := []struct {
		name   string
		schema string
		// leftovers are the names PostgreSQL would have created had the
		// name reached it.
		leftovers []string
	}{
		{"too long", long, []string{long[:MaxSchemaNameLength]}},
		{"NUL byte", "baton_nul\x00tail", []string{"baton_nul", "baton_nul\x00tail"}},
		{"only spaces", "   ", []string{"   "}},
		{"invalid UTF-8", "baton_\xff", nil},
		{"reserved prefix", "pg_baton", []string{"pg_baton"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Migrate(ctx, env.Pool, MigrateOptions{Schema: c.schema})
			if !errors.Is(err, ErrInvalidSchemaName) || !strings.Contains(err.Error(), "MigrateOptions.Schema") {
				t.Errorf("Migrate = %v, want ErrInvalidSchemaName naming MigrateOptions.Schema", err)
			}
			err = VerifySchema(ctx, env.Pool, VerifyOptions{Schema: c.schema})
			if !errors.Is(err, ErrInvalidSchemaName) || !strings.Contains(err.Error(), "VerifyOptions.Schema") {
				t.Errorf("VerifySchema = %v, want ErrInvalidSchemaName naming VerifyOptions.Schema", err)
			}
			for _, name := range c.leftovers {
				if strings.IndexByte(name, 0) < 0 && schemaExists(t, ctx, env, name) {
					t.Errorf("schema %q was created", name)
				}
			}
			if got := tablesIn(t, ctx, env, env.Schema); len(got) != 0 {
				t.Errorf("tables were created in the current schema: %q", got)
			}
		})
	}
}

func TestMigrateAndVerifyErrorWhenTheConnectionHasNoCurrentSchema(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	cfg, err := pgx.ParseConfig(env.ServerURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = "baton_no_such_schema_" + strings.ReplaceAll(env.Schema, "baton_test_", "")
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	err = Migrate(ctx, conn, MigrateOptions{})
	if err == nil || !strings.Contains(err.Error(), "MigrateOptions.Schema") || !strings.Contains(err.Error(), "search_path") {
		t.Errorf("Migrate = %v, want an error naming MigrateOptions.Schema and search_path", err)
	}
	err = VerifySchema(ctx, conn, VerifyOptions{})
	if err == nil || !strings.Contains(err.Error(), "VerifyOptions.Schema") || errors.Is(err, ErrSchemaMismatch) {
		t.Errorf("VerifySchema = %v, want a configuration error naming VerifyOptions.Schema", err)
	}
}

func TestMigrateRefusesASchemaNewerThanThisBinary(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	future := latestVersion + 1
	if _, err := env.Pool.Exec(ctx, "INSERT INTO baton_schema_migrations (version, name) VALUES ($1, 'from_the_future')", future); err != nil {
		t.Fatal(err)
	}
	rec := &logRecorder{}

	err := Migrate(ctx, env.Pool, MigrateOptions{Logger: slog.New(rec)})

	if !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("Migrate = %v, want ErrSchemaTooNew", err)
	}
	for _, part := range []string{env.Schema, strconv.Itoa(future), strconv.Itoa(latestVersion)} {
		if !strings.Contains(err.Error(), part) {
			t.Errorf("error %q does not mention %q", err, part)
		}
	}
	if got := rec.applied(); len(got) != 0 {
		t.Errorf("applied %v on a newer schema", got)
	}
	// Everything this binary needs is still there, so readiness holds.
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Errorf("VerifySchema on a newer but compatible schema: %v", err)
	}
}

func TestVerifySchemaAfterMigrateReturnsNil(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})

	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Errorf("VerifySchema (current schema): %v", err)
	}
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{Schema: env.Schema}); err != nil {
		t.Errorf("VerifySchema (explicit schema): %v", err)
	}
}

func TestVerifySchemaOnAnEmptySchemaNamesEveryTableAsMissing(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)

	problems := schemaProblems(t, VerifySchema(ctx, env.Pool, VerifyOptions{}))

	var want []string
	for _, name := range pgsql.Tables() {
		want = append(want, "table "+name+" is missing")
	}
	want = append(want, "sequence "+ProjectionGenerationSequence+" is missing")
	if !slices.Equal(problems, want) {
		t.Errorf("problems = %q, want %q", problems, want)
	}
}

func TestVerifySchemaOnAMissingSchemaSaysSoAndNamesEveryTable(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schema := extraSchema(t, env, "baton absent")

	problems := schemaProblems(t, VerifySchema(ctx, env.Pool, VerifyOptions{Schema: schema}))

	if len(problems) != 1+len(pgsql.Tables())+1 || !strings.Contains(problems[0], "does not exist") {
		t.Errorf("problems = %q, want the schema, every table and the sequence named", problems)
	}
	if schemaExists(t, ctx, env, schema) {
		t.Error("VerifySchema created the schema")
	}
}

func TestVerifySchemaNamesEachAlteration(t *testing.T) {
	cases := []struct {
		name  string
		alter []string
		want  []string
	}{
		{
			name:  "dropped column",
			alter: []string{"ALTER TABLE baton_lock_fences DROP COLUMN updated_at"},
			want:  []string{"column baton_lock_fences.updated_at is missing (want timestamp with time zone NOT NULL)"},
		},
		{
			name:  "changed column type",
			alter: []string{"ALTER TABLE baton_lock_fences ALTER COLUMN token TYPE integer"},
			want:  []string{"column baton_lock_fences.token has type integer, want bigint"},
		},
		{
			name:  "dropped NOT NULL",
			alter: []string{"ALTER TABLE baton_lock_fences ALTER COLUMN token DROP NOT NULL"},
			want:  []string{"column baton_lock_fences.token is nullable, want NOT NULL"},
		},
		{
			name:  "dropped index",
			alter: []string{"ALTER TABLE baton_lock_fences DROP CONSTRAINT baton_lock_fences_pkey"},
			want:  []string{"index baton_lock_fences_pkey on baton_lock_fences is missing (want unique (name))"},
		},
		{
			name: "index on other columns",
			alter: []string{
				"ALTER TABLE baton_lock_fences DROP CONSTRAINT baton_lock_fences_pkey",
				"CREATE UNIQUE INDEX baton_lock_fences_pkey ON baton_lock_fences (name, token)",
			},
			want: []string{"index baton_lock_fences_pkey on baton_lock_fences has columns (name, token), want (name)"},
		},
		{
			name: "index no longer unique",
			alter: []string{
				"ALTER TABLE baton_lock_fences DROP CONSTRAINT baton_lock_fences_pkey",
				"CREATE INDEX baton_lock_fences_pkey ON baton_lock_fences (name)",
			},
			want: []string{"index baton_lock_fences_pkey on baton_lock_fences is not unique, want unique"},
		},
		{
			name:  "dropped table",
			alter: []string{"DROP TABLE baton_lock_fences"},
			want:  []string{"table baton_lock_fences is missing"},
		},
		{
			name:  "schema behind the latest migration",
			alter: []string{"DELETE FROM baton_schema_migrations WHERE version = (SELECT max(version) FROM baton_schema_migrations)"},
			want:  []string{"baton_schema_migrations records migration version " + strconv.Itoa(latestVersion-1) + ", want " + strconv.Itoa(latestVersion)},
		},
		{
			name: "several at once",
			alter: []string{
				"ALTER TABLE baton_lock_fences DROP CONSTRAINT baton_lock_fences_pkey",
				"ALTER TABLE baton_lock_fences ALTER COLUMN name DROP NOT NULL",
				"ALTER TABLE baton_lock_fences ALTER COLUMN token TYPE integer",
				"ALTER TABLE baton_lock_fences DROP COLUMN updated_at",
				"DELETE FROM baton_schema_migrations",
			},
			want: []string{
				"column baton_lock_fences.name is nullable, want NOT NULL",
				"column baton_lock_fences.token has type integer, want bigint",
				"column baton_lock_fences.updated_at is missing (want timestamp with time zone NOT NULL)",
				"index baton_lock_fences_pkey on baton_lock_fences is missing (want unique (name))",
				"baton_schema_migrations records migration version 0, want " + strconv.Itoa(latestVersion),
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := testenv.Postgres(t)
			ctx := testContext(t)
			mustMigrate(t, ctx, env.Pool, MigrateOptions{})
			for _, stmt := range c.alter {
				if _, err := env.Pool.Exec(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}

			err := VerifySchema(ctx, env.Pool, VerifyOptions{})

			problems := schemaProblems(t, err)
			if !slices.Equal(problems, c.want) {
				t.Errorf("problems:\n got %q\nwant %q", problems, c.want)
			}
			for _, p := range c.want {
				if !strings.Contains(err.Error(), "\n  - "+p) {
					t.Errorf("Error() does not list %q on its own line:\n%s", p, err)
				}
			}
		})
	}
}

func TestVerifySchemaIgnoresWhatItDoesNotExpect(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	for _, stmt := range []string{
		"ALTER TABLE baton_lock_fences ADD COLUMN note text",
		"CREATE INDEX baton_lock_fences_updated ON baton_lock_fences (updated_at)",
		"CREATE TABLE app_orders (id bigint PRIMARY KEY)",
	} {
		if _, err := env.Pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Errorf("VerifySchema with extra objects: %v", err)
	}
}

func TestVerifySchemaWritesNothing(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schema := extraSchema(t, env, "baton verify")

	_ = VerifySchema(ctx, env.Pool, VerifyOptions{Schema: schema})
	_ = VerifySchema(ctx, env.Pool, VerifyOptions{})

	if schemaExists(t, ctx, env, schema) {
		t.Error("VerifySchema created a schema")
	}
	if got := tablesIn(t, ctx, env, env.Schema); len(got) != 0 {
		t.Errorf("VerifySchema created tables %q", got)
	}
}

// TestSchemaSQLIsTheWholeShape proves the script stands on its own: applied
// with one plain Exec to an empty schema, it leaves a schema VerifySchema
// accepts and Migrate has nothing to add to.
func TestSchemaSQLIsTheWholeShape(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)

	if _, err := env.Pool.Exec(ctx, SchemaSQL()); err != nil {
		t.Fatalf("Exec(SchemaSQL()): %v", err)
	}

	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Errorf("VerifySchema after SchemaSQL: %v", err)
	}
	rec := &logRecorder{}
	mustMigrate(t, ctx, env.Pool, MigrateOptions{Logger: slog.New(rec)})
	if got := rec.applied(); len(got) != 0 {
		t.Errorf("Migrate after SchemaSQL applied %v, want nothing", got)
	}
	if got := recordedVersions(t, ctx, env, env.Schema); !slices.Equal(got, allVersions()) {
		t.Errorf("recorded versions = %v, want %v", got, allVersions())
	}
}

func TestMigrateRollsBackEverythingWhenAStepFails(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	// An index of another table holding the name of the outbox's walk
	// index makes the third migration fail, after two have run.
	for _, q := range []string{"CREATE TABLE other (x int)", "CREATE INDEX baton_outbox_walk ON other (x)"} {
		if _, err := env.Pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	err := Migrate(ctx, env.Pool, MigrateOptions{Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})

	if err == nil || !strings.Contains(err.Error(), "0003_outbox.up.sql") {
		t.Fatalf("Migrate = %v, want an error naming 0003_outbox.up.sql", err)
	}
	if got := tablesIn(t, ctx, env, env.Schema); !slices.Equal(got, []string{"other"}) {
		t.Errorf("tables after a failed Migrate = %q, want only the pre-existing one", got)
	}
}

func TestMigrateAndVerifyAcceptAPgxConn(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	conn, err := pgx.Connect(ctx, env.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)

	mustMigrate(t, ctx, conn, MigrateOptions{})
	if err := VerifySchema(ctx, conn, VerifyOptions{}); err != nil {
		t.Errorf("VerifySchema: %v", err)
	}
}

// expectedTableNames is every table Migrate creates: the expected shape plus
// the version table, sorted.
func expectedTableNames() []string {
	names := []string{migrationsTable}
	names = append(names, pgsql.Tables()...)
	slices.Sort(names)
	return names
}

// logged lists the messages of the records at Info level.
func (r *logRecorder) logged() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		if rec.Level == slog.LevelInfo {
			out = append(out, rec.Message)
		}
	}
	return out
}

func mustExec(t *testing.T, ctx context.Context, env *testenv.PostgresEnv, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := env.Pool.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestMigrate_RecreatesAMissingBatonIndex(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	mustExec(t, ctx, env, "DROP INDEX baton_outbox_dead_parked", "DROP INDEX baton_projection_header_active")
	rec := &logRecorder{}

	mustMigrate(t, ctx, env.Pool, MigrateOptions{Logger: slog.New(rec)})

	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Fatalf("VerifySchema after Migrate repaired the indexes: %v", err)
	}
	if got := rec.logged(); len(got) != 2 || got[0] != "baton: repaired schema" {
		t.Errorf("logged %q, want two repairs", got)
	}
}

func TestMigrate_RefusesAMissingColumnWithItsExactDDLAndChangesNothing(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	mustExec(t, ctx, env, "ALTER TABLE baton_role_leases DROP COLUMN holder_address",
		"ALTER TABLE baton_lock_fences ALTER COLUMN token TYPE integer", "DROP INDEX baton_outbox_walk")

	err := Migrate(ctx, env.Pool, MigrateOptions{})

	var se *SchemaError
	if !errors.As(err, &se) || !errors.Is(err, ErrSchemaMismatch) {
		t.Fatalf("Migrate = %v, want a *SchemaError", err)
	}
	wantDDL := []string{
		`ALTER TABLE "baton_lock_fences" ALTER COLUMN "token" TYPE bigint USING "token"::bigint`,
		`ALTER TABLE "baton_role_leases" ADD COLUMN holder_address text NOT NULL DEFAULT ''`,
	}
	if !slices.Equal(se.DDL, wantDDL) {
		t.Errorf("DDL = %q, want %q", se.DDL, wantDDL)
	}
	for _, want := range append(wantDDL, `SET search_path TO "`+env.Schema+`"`, "column baton_role_leases.holder_address is missing") {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not print %q:\n%s", want, err)
		}
	}
	// The index repair was rolled back with the rest.
	if problems := schemaProblems(t, VerifySchema(ctx, env.Pool, VerifyOptions{})); len(problems) != 3 {
		t.Errorf("after the refused Migrate: %q, want the three problems still there", problems)
	}
	// The printed statements fix it; Migrate then repairs the index.
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, s := range append([]string{"SET LOCAL search_path TO " + pgx.Identifier{env.Schema}.Sanitize()}, se.DDL...) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Errorf("after the DDL and Migrate: %v", err)
	}
}

// migrationFile returns the text of one embedded migration file.
func migrationFile(t *testing.T, name string) string {
	t.Helper()
	b, err := fs.ReadFile(Migrations(), name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestMigrate_AdoptsTheMigrationsAnExternalToolRanAndAppliesTheRest(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustExec(t, ctx, env, migrationFile(t, "0001_lock_fences.up.sql"), migrationFile(t, "0002_role_leases.up.sql"))
	rec := &logRecorder{}

	mustMigrate(t, ctx, env.Pool, MigrateOptions{Logger: slog.New(rec)})

	if got := rec.applied(); !slices.Equal(got, []int64{3, 4, 5}) {
		t.Errorf("applied %v, want 3 to 5 (1 and 2 ran already)", got)
	}
	if got := recordedVersions(t, ctx, env, env.Schema); !slices.Equal(got, allVersions()) {
		t.Errorf("recorded versions = %v, want %v", got, allVersions())
	}
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Error(err)
	}
}

func TestMigrate_RefusesALaterMigrationsTablesWithoutTheEarlierOnes(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustExec(t, ctx, env, migrationFile(t, "0003_outbox.up.sql"))

	err := Migrate(ctx, env.Pool, MigrateOptions{})

	if err == nil || !strings.Contains(err.Error(), "baton_outbox (migration 3)") {
		t.Fatalf("Migrate = %v, want a refusal naming a table of migration 3", err)
	}
	if got := tablesIn(t, ctx, env, env.Schema); !slices.Equal(got, []string{"baton_outbox", "baton_outbox_dead", "baton_outbox_state"}) {
		t.Errorf("tables = %q, want those the file made and nothing more", got)
	}
}

// schemaAt makes the schema a binary of that migration version left: the
// script of SchemaSQL up to it, with its baton_schema_migrations rows, or,
// unrecorded, only the migration files, as an external tool runs them.
func schemaAt(t *testing.T, ctx context.Context, env *testenv.PostgresEnv, version int, recorded bool) {
	t.Helper()
	if recorded {
		whole := SchemaSQL()
		cut := strings.Index(whole, fmt.Sprintf("\n-- Migration %04d", version+1))
		if cut < 0 {
			t.Fatalf("SchemaSQL has no migration %d", version+1)
		}
		mustExec(t, ctx, env, whole[:cut])
		return
	}
	for _, m := range pgsql.Known()[:version] {
		mustExec(t, ctx, env, migrationFile(t, fmt.Sprintf("%04d_%s.up.sql", m.Version, m.Name)))
	}
}

// oldEnqueueSQL is the statement of a binary from before migration 5,
// which names no trace_context: it must keep working on a migrated schema
// while a rolling deploy replaces it.
const oldEnqueueSQL = `INSERT INTO baton_outbox (id, lane, payload)
SELECT $1::uuid, $2::text, $3::jsonb
WHERE NOT EXISTS (SELECT 1 FROM baton_outbox_dead WHERE id = $1::uuid)`

// TestMigrate_UpgradesAVersion4SchemaToCarryTraceContexts: a schema left by
// a binary of migration version 4 fails VerifySchema with the two missing
// trace_context columns and the exact statements that add them; Migrate
// runs migration 5 alone, and the entries written before it, or by the old
// statement after it, scan with no trace context.
func TestMigrate_UpgradesAVersion4SchemaToCarryTraceContexts(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schemaAt(t, ctx, env, 4, true)
	before := outbox.NewID()
	if _, err := env.Pool.Exec(ctx, oldEnqueueSQL, [16]byte(before), "lane", `{"n": 1}`); err != nil {
		t.Fatal(err)
	}

	se := schemaError(t, ctx, env)

	want := []string{
		"column baton_outbox.trace_context is missing (want text)",
		"column baton_outbox_dead.trace_context is missing (want text)",
		"baton_schema_migrations records migration version 4, want " + strconv.Itoa(latestVersion),
	}
	if !slices.Equal(se.Problems, want) {
		t.Errorf("VerifySchema of a version 4 schema:\n got %q\nwant %q", se.Problems, want)
	}
	if se.MigrateRepairs() != len(se.Repairs) || len(se.DDL) != 0 {
		t.Errorf("repairs %+v, DDL %q: want every one Migrate's (it applies migration 5), with no statement", se.Repairs, se.DDL)
	}

	rec := &logRecorder{}
	mustMigrate(t, ctx, env.Pool, MigrateOptions{Logger: slog.New(rec)})

	if got := rec.applied(); !slices.Equal(got, []int64{5}) {
		t.Errorf("Migrate applied %v, want only 5", got)
	}
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Fatalf("VerifySchema after Migrate: %v", err)
	}
	after := outbox.NewID()
	if _, err := env.Pool.Exec(ctx, oldEnqueueSQL, [16]byte(after), "lane", `{"n": 2}`); err != nil {
		t.Fatalf("the old Enqueue statement on the migrated schema: %v", err)
	}
	traced := outbox.NewID()
	tc := outbox.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	if err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		return Enqueue(outbox.WithTraceContext(ctx, tc), tx, traced, "lane", []byte(`{"n": 3}`))
	}); err != nil {
		t.Fatal(err)
	}
	st, err := NewOutboxStore(env.Pool, OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := awaitScan(t, ctx, st, 3)
	for i, want := range []struct {
		id outbox.ID
		tc outbox.TraceContext
	}{{before, outbox.TraceContext{}}, {after, outbox.TraceContext{}}, {traced, tc}} {
		if got[i].ID != want.id || got[i].TraceContext != want.tc {
			t.Errorf("entry %d: %s with trace context %+v, want %s with %+v", i, got[i].ID, got[i].TraceContext, want.id, want.tc)
		}
	}
}

// TestMigrate_AdoptsAnUnrecordedVersion4SchemaAndAddsTheTraceContext: a
// schema an external tool migrated to version 4 has every table but not
// the columns of migration 5, so adoption records 1 to 4 and runs 5.
func TestMigrate_AdoptsAnUnrecordedVersion4SchemaAndAddsTheTraceContext(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schemaAt(t, ctx, env, 4, false)
	rec := &logRecorder{}

	mustMigrate(t, ctx, env.Pool, MigrateOptions{Logger: slog.New(rec)})

	if got := rec.applied(); !slices.Equal(got, []int64{5}) {
		t.Errorf("applied %v, want only 5 (1 to 4 are there)", got)
	}
	if got := recordedVersions(t, ctx, env, env.Schema); !slices.Equal(got, allVersions()) {
		t.Errorf("recorded versions = %v, want %v", got, allVersions())
	}
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Error(err)
	}
}

// awaitScan scans until n entries are visible (the horizon is the
// cluster's, so another test's transaction may hold them back a while).
func awaitScan(t *testing.T, ctx context.Context, st *OutboxStore, n int) []outbox.Entry {
	t.Helper()
	for {
		got, err := st.Scan(ctx, outbox.Cursor{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= n {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d entries visible: %v", len(got), n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// schemaError returns VerifySchema's *SchemaError, checking that it has
// one Repair per problem, in the same order.
func schemaError(t *testing.T, ctx context.Context, env *testenv.PostgresEnv) *SchemaError {
	t.Helper()
	err := VerifySchema(ctx, env.Pool, VerifyOptions{})
	var se *SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("VerifySchema = %v, want a *SchemaError", err)
	}
	if len(se.Repairs) != len(se.Problems) {
		t.Fatalf("%d repairs for %d problems", len(se.Repairs), len(se.Problems))
	}
	for i, r := range se.Repairs {
		if r.Problem != se.Problems[i] {
			t.Errorf("repair %d is of %q, problem %d is %q", i, r.Problem, i, se.Problems[i])
		}
		for _, s := range r.DDL {
			if !slices.Contains(se.DDL, s) {
				t.Errorf("repair %q runs %q, which DDL lacks", r.Problem, s)
			}
		}
	}
	return se
}

func TestVerifySchema_RepairsSayWhatMigrateFixesByItselfAndWhatTakesStatements(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	mustExec(t, ctx, env, "ALTER TABLE baton_role_leases DROP COLUMN holder_address", "DROP INDEX baton_outbox_walk")
	column := Repair{Problem: "column baton_role_leases.holder_address is missing (want text NOT NULL)",
		DDL: []string{`ALTER TABLE "baton_role_leases" ADD COLUMN holder_address text NOT NULL DEFAULT ''`}}
	index := Repair{Problem: "index baton_outbox_walk on baton_outbox is missing (want not unique (xid, id))", Migrate: true,
		DDL: []string{"CREATE INDEX baton_outbox_walk ON baton_outbox (xid, id)"}}
	same := func(a, b Repair) bool {
		return a.Problem == b.Problem && a.Migrate == b.Migrate && slices.Equal(a.DDL, b.DDL)
	}
	if se := schemaError(t, ctx, env); !slices.EqualFunc(se.Repairs, []Repair{column, index}, same) || se.MigrateRepairs() != 1 {
		t.Errorf("repairs\n%+v\nwant the column's statement, and the index Migrate's", se.Repairs)
	}
	// Migrate's own report lists what it left: nothing it fixes by itself.
	var left *SchemaError
	if err := Migrate(ctx, env.Pool, MigrateOptions{}); !errors.As(err, &left) || !slices.EqualFunc(left.Repairs, []Repair{column}, same) {
		t.Errorf("Migrate = %v, want the column left, with its statement", err)
	}

	// The migration's tables are there, only its record is lost: Migrate
	// would run it again, and fail.
	mustExec(t, ctx, env, "DELETE FROM baton_schema_migrations WHERE version = "+strconv.Itoa(latestVersion))
	se := schemaError(t, ctx, env)
	record := Repair{Problem: fmt.Sprintf("baton_schema_migrations records migration version %d, want %d", latestVersion-1, latestVersion),
		DDL: []string{fmt.Sprintf("INSERT INTO baton_schema_migrations (version, name) VALUES (%d, '%s')", latestVersion, KnownMigrations()[latestVersion-1].Name)}}
	if !slices.EqualFunc(se.Repairs, []Repair{column, index, record}, same) {
		t.Errorf("repairs\n%+v\nwant the record's statement too", se.Repairs)
	}
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for _, s := range append([]string{"SET LOCAL search_path TO " + pgx.Identifier{env.Schema}.Sanitize()}, se.DDL...) {
		if _, err := tx.Exec(ctx, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Errorf("after the statements: %v", err)
	}
}

func TestVerifySchema_MigrateRepairsAnOlderSchemaByItself(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schemaAt(t, ctx, env, 3, true) // without the tables of 4 and the columns of 5

	se := schemaError(t, ctx, env)
	if se.MigrateRepairs() != len(se.Repairs) || len(se.DDL) != 0 {
		t.Errorf("repairs %+v, DDL %q: want every one Migrate's, with no statement (run alone, they would make Migrate fail)", se.Repairs, se.DDL)
	}
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Errorf("after Migrate: %v", err)
	}
}

// A trace_context column dropped from a schema that records migration 5
// takes the migration's own ADD COLUMN, which restores it.
func TestVerifySchema_AMissingTraceContextColumnTakesItsMigrationsStatement(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	mustExec(t, ctx, env, "ALTER TABLE baton_outbox_dead DROP COLUMN trace_context")

	se := schemaError(t, ctx, env)

	want := Repair{Problem: "column baton_outbox_dead.trace_context is missing (want text)",
		DDL: []string{`ALTER TABLE "baton_outbox_dead" ADD COLUMN trace_context text`}}
	if len(se.Repairs) != 1 || se.Repairs[0].Problem != want.Problem || se.Repairs[0].Migrate || !slices.Equal(se.Repairs[0].DDL, want.DDL) {
		t.Fatalf("repairs %+v, want %+v", se.Repairs, want)
	}
	mustExec(t, ctx, env, want.DDL[0]) // the pool's search_path is the schema
	if err := VerifySchema(ctx, env.Pool, VerifyOptions{}); err != nil {
		t.Errorf("after the statement: %v", err)
	}
}
