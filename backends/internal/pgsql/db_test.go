package pgsql

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testDB runs this package's statements on a pgx pool, for the tests that
// need a server and no adapter: single statements only.
type testDB struct{ pool *pgxpool.Pool }

func (d testDB) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := d.pool.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (d testDB) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	return d.pool.Query(ctx, sql, args...)
}

func (d testDB) QueryRow(ctx context.Context, sql string, args ...any) Row {
	return d.pool.QueryRow(ctx, sql, args...)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// texts are the problems' sentences.
func texts(problems []problem) []string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = p.text
	}
	return out
}

// TestExpectedShapeAndMigrationsAgree is the guard for the two descriptions
// of the schema: after running the migration files on a fresh schema, the
// catalog must hold exactly the tables, columns and indexes of
// expectedShape, no more and no fewer. A migration added without its
// shape entry (or the reverse) fails here.
func TestExpectedShapeAndMigrationsAgree(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	if _, err := env.Pool.Exec(ctx, SchemaSQL()); err != nil {
		t.Fatal(err)
	}
	db := testDB{env.Pool}
	if problems, err := verifySchema(ctx, db, env.Schema); err != nil || len(problems) > 0 {
		t.Fatalf("the migrated schema: problems %q, %v", texts(problems), err)
	}
	actual, err := readTables(ctx, db, env.Schema, nil)
	if err != nil {
		t.Fatal(err)
	}
	delete(actual, migrationsTable)
	expected := make(map[string]tableShape)
	for _, ts := range expectedShape {
		expected[ts.Name] = ts
	}
	for _, name := range slices.Sorted(maps.Keys(actual)) {
		want, ok := expected[name]
		if !ok {
			t.Errorf("the migrations create table %s, which expectedShape does not describe", name)
			continue
		}
		got := actual[name]
		if len(got.Columns) != len(want.Columns) {
			t.Errorf("table %s has columns %q, expectedShape lists %d", name, slices.Sorted(maps.Keys(got.Columns)), len(want.Columns))
		}
		for _, c := range want.Columns {
			c.Version = 0 // the catalog does not know which migration added a column
			if got.Columns[c.Name] != c {
				t.Errorf("column %s.%s is %+v in the database, %+v in expectedShape", name, c.Name, got.Columns[c.Name], c)
			}
		}
		if len(got.Indexes) != len(want.Indexes) {
			t.Errorf("table %s has indexes %q, expectedShape lists %d", name, slices.Sorted(maps.Keys(got.Indexes)), len(want.Indexes))
		}
		for _, ix := range want.Indexes {
			if g := got.Indexes[ix.Name]; !slices.Equal(g.Columns, ix.Columns) || g.Unique != ix.Unique || g.Predicate != ix.Predicate || g.Primary != ix.Primary {
				t.Errorf("index %s is %+v in the database, %+v in expectedShape", ix.Name, g, ix)
			}
		}
	}
	if len(actual) != len(expectedShape) {
		t.Errorf("the migrations create %d tables, expectedShape describes %d", len(actual), len(expectedShape))
	}
}

// TestEveryProblemOfADroppedObjectHasTheStatementThatRestoresIt drops each
// object of the shape in turn from a migrated schema and runs the fix
// verifySchema gives for it: afterwards the schema verifies again. So
// every table, column and index of the shape has a fix, and the fixes are
// the migration files' own definitions.
func TestEveryProblemOfADroppedObjectHasTheStatementThatRestoresIt(t *testing.T) {
	var damages []string
	for _, ts := range expectedShape {
		damages = append(damages, "DROP TABLE "+ts.Name+" CASCADE")
		for _, c := range ts.Columns {
			damages = append(damages, "ALTER TABLE "+ts.Name+" DROP COLUMN "+c.Name+" CASCADE")
		}
		for _, ix := range ts.Indexes {
			if ix.Primary {
				damages = append(damages, "ALTER TABLE "+ts.Name+" DROP CONSTRAINT "+ix.Name)
			} else {
				damages = append(damages, "DROP INDEX "+ix.Name)
			}
		}
	}
	damages = append(damages, "ALTER TABLE baton_lock_fences ALTER COLUMN token TYPE integer",
		"ALTER TABLE baton_projection_header ALTER COLUMN subject_id TYPE varchar(300)",
		"ALTER TABLE baton_outbox_state ALTER COLUMN value SET NOT NULL",
		"ALTER TABLE baton_projection_detail SET LOGGED",
		"ALTER SEQUENCE baton_projection_generation CACHE 20")
	env := testenv.Postgres(t)
	ctx := testContext(t)
	db := testDB{env.Pool}
	for _, damage := range damages {
		if _, err := env.Pool.Exec(ctx, SchemaSQL()); err != nil {
			t.Fatal(err)
		}
		if _, err := env.Pool.Exec(ctx, damage); err != nil {
			t.Fatalf("%s: %v", damage, err)
		}
		problems, err := verifySchema(ctx, db, env.Schema)
		if err != nil || len(problems) == 0 {
			t.Fatalf("after %s: problems %q, %v", damage, texts(problems), err)
		}
		e := schemaError("postgres", env.Schema, problems, false)
		for _, s := range e.DDL {
			if _, err := env.Pool.Exec(ctx, s); err != nil {
				t.Errorf("after %s the fix %s: %v", damage, s, err)
			}
		}
		if after, err := verifySchema(ctx, db, env.Schema); err != nil || len(after) > 0 {
			t.Errorf("after %s and its fix %q: problems %q, %v", damage, e.DDL, texts(after), err)
		}
		if _, err := env.Pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{migrationsTable}.Sanitize()+", "+
			pgx.Identifier{LockFencesTable}.Sanitize()+", "+pgx.Identifier{LeaseTable}.Sanitize()+", "+
			pgx.Identifier{OutboxTable}.Sanitize()+", "+pgx.Identifier{OutboxStateTable}.Sanitize()+", "+
			pgx.Identifier{OutboxDeadTable}.Sanitize()+", "+pgx.Identifier{ProjectionHeaderTable}.Sanitize()+", "+
			pgx.Identifier{ProjectionDetailTable}.Sanitize()+" CASCADE; DROP SEQUENCE IF EXISTS "+ProjectionGenerationSequence); err != nil {
			t.Fatal(err)
		}
	}
}
