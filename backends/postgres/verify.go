package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ErrSchemaMismatch is matched (errors.Is) by every *SchemaError.
var ErrSchemaMismatch = errors.New("baton/postgres: database schema does not match")

// SchemaError is VerifySchema's report of everything in the database that
// differs from what this version of baton expects.
type SchemaError struct {
	// Schema is the schema that was checked.
	Schema string
	// Problems has one sentence per difference, e.g.
	// "column baton_lock_fences.token has type integer, want bigint".
	Problems []string
}

// Error lists every problem, one per line, after a summary line.
func (e *SchemaError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "baton/postgres: schema %q does not match what this version of baton expects (%d problem", e.Schema, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	b.WriteString("); run postgres.Migrate or apply the missing migrations:")
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p)
	}
	return b.String()
}

// Is reports whether target is ErrSchemaMismatch.
func (e *SchemaError) Is(target error) bool { return target == ErrSchemaMismatch }

// VerifyOptions configures VerifySchema.
type VerifyOptions struct {
	// Schema is the schema to check. Empty means the connection's current
	// schema: the first existing schema of its search_path.
	Schema string
}

// VerifySchema checks, read-only, that baton's tables in the schema have the
// shape this binary expects: every table, column (type and nullability) and
// index (key columns, uniqueness, and the predicate of a partial index) from
// the expected-shape description, and the projection generation sequence,
// which must not cache numbers per session. It returns nil, a *SchemaError listing
// every difference at once (so one look fixes them all), or another error
// when the catalog could not be read.
//
// Extra tables, columns and indexes are not problems: an operator may add
// indexes, and a schema migrated by a newer baton still serves an older
// binary during a rolling deploy. When baton_schema_migrations exists (the
// schema was migrated by Migrate or SchemaSQL) a recorded version behind the
// latest migration is a problem too; with an external migration tool that
// table is absent and the shape alone decides.
//
// Being cheap and side-effect free, it suits a readiness check.
func VerifySchema(ctx context.Context, db TxStarter, opts VerifyOptions) error {
	if db == nil {
		return errors.New("baton/postgres: VerifySchema: the database handle is nil")
	}
	if opts.Schema != "" {
		if err := validateSchemaName("VerifyOptions.Schema", opts.Schema); err != nil {
			return err
		}
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("baton/postgres: verify schema: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
		return fmt.Errorf("baton/postgres: verify schema: %w", err)
	}
	schema, err := resolveSchema(ctx, tx, opts.Schema, "VerifyOptions.Schema")
	if err != nil {
		return err
	}
	problems, err := verifySchema(ctx, tx, schema)
	if err != nil {
		return fmt.Errorf("baton/postgres: verify schema %q: %w", schema, err)
	}
	if len(problems) > 0 {
		return &SchemaError{Schema: schema, Problems: problems}
	}
	return nil
}

func verifySchema(ctx context.Context, tx pgx.Tx, schema string) ([]string, error) {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look the schema up: %w", err)
	}
	var problems []string
	if !exists {
		problems = append(problems, fmt.Sprintf("schema %q does not exist", schema))
	}
	names := make([]string, len(expectedShape))
	for i, t := range expectedShape {
		names[i] = t.Name
	}
	actual, err := readTables(ctx, tx, schema, names)
	if err != nil {
		return nil, err
	}
	problems = append(problems, compareShapes(expectedShape, actual)...)
	seq, err := sequenceProblem(ctx, tx, schema)
	if err != nil {
		return nil, err
	}
	if seq != "" {
		problems = append(problems, seq)
	}

	version, recorded, err := recordedVersion(ctx, tx, schema)
	if err != nil {
		return nil, err
	}
	if recorded && version < latestVersion {
		problems = append(problems, fmt.Sprintf("%s records migration version %d, want %d", migrationsTable, version, latestVersion))
	}
	return problems, nil
}

// sequenceProblem describes what is wrong with the generation sequence, or
// returns "". Projection refreshes are ordered by it, which holds only
// while every session draws from it directly: a cache above 1 hands each
// session a block of its own, and a number drawn later could be smaller.
func sequenceProblem(ctx context.Context, tx pgx.Tx, schema string) (string, error) {
	const q = `SELECT s.seqcache FROM pg_catalog.pg_sequence s
JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`
	var cache int64
	err := tx.QueryRow(ctx, q, schema, ProjectionGenerationSequence).Scan(&cache)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Sprintf("sequence %s is missing", ProjectionGenerationSequence), nil
	case err != nil:
		return "", fmt.Errorf("read sequence %s: %w", ProjectionGenerationSequence, err)
	case cache != 1:
		return fmt.Sprintf("sequence %s caches %d numbers per session, want 1 (projection refreshes are ordered by the numbers it hands out)",
			ProjectionGenerationSequence, cache), nil
	}
	return "", nil
}

// recordedVersion returns the highest version in the schema's version table,
// and whether that table exists at all.
func recordedVersion(ctx context.Context, tx pgx.Tx, schema string) (version int, exists bool, err error) {
	const q = `SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p'))`
	if err := tx.QueryRow(ctx, q, schema, migrationsTable).Scan(&exists); err != nil {
		return 0, false, fmt.Errorf("look %s up: %w", migrationsTable, err)
	}
	if !exists {
		return 0, false, nil
	}
	var v int32
	table := pgx.Identifier{schema, migrationsTable}.Sanitize()
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+table).Scan(&v); err != nil {
		return 0, false, fmt.Errorf("read %s: %w", migrationsTable, err)
	}
	return int(v), true, nil
}

// actualTable is a table as the catalog describes it.
type actualTable struct {
	Columns map[string]columnShape
	Indexes map[string]indexShape
	// Unlogged is set for an UNLOGGED table.
	Unlogged bool
}

// readTables reads the columns and indexes of the named ordinary or
// partitioned tables of the schema from pg_catalog (information_schema would
// hide tables the current role has no privilege on). Nil names means every
// table of the schema. Tables that do not exist are absent from the result.
func readTables(ctx context.Context, tx pgx.Tx, schema string, names []string) (map[string]*actualTable, error) {
	const columnsQuery = `
SELECT c.relname, a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
       c.relpersistence = 'u'
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p')
  AND ($2::text[] IS NULL OR c.relname = ANY ($2::text[]))
ORDER BY c.relname, a.attnum`
	const indexesQuery = `
SELECT t.relname, i.relname, x.indisunique,
       ARRAY(SELECT pg_catalog.pg_get_indexdef(x.indexrelid, k, true)
                    || CASE WHEN x.indoption[k - 1] & 1 = 1 THEN ' DESC' ELSE '' END
             FROM generate_series(1, x.indnkeyatts) AS k ORDER BY k),
       coalesce(pg_catalog.pg_get_expr(x.indpred, x.indrelid, true), '')
FROM pg_catalog.pg_index x
JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
JOIN pg_catalog.pg_class t ON t.oid = x.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = $1 AND t.relkind IN ('r', 'p')
  AND ($2::text[] IS NULL OR t.relname = ANY ($2::text[]))
ORDER BY t.relname, i.relname`

	tables := make(map[string]*actualTable)
	rows, err := tx.Query(ctx, columnsQuery, schema, names)
	if err != nil {
		return nil, fmt.Errorf("read columns: %w", err)
	}
	var table string
	var column, typ *string // NULL for a table without columns
	var notNull *bool
	var unlogged bool
	_, err = pgx.ForEachRow(rows, []any{&table, &column, &typ, &notNull, &unlogged}, func() error {
		t := tables[table]
		if t == nil {
			t = &actualTable{Columns: map[string]columnShape{}, Indexes: map[string]indexShape{}, Unlogged: unlogged}
			tables[table] = t
		}
		if column != nil {
			t.Columns[*column] = columnShape{Name: *column, Type: *typ, NotNull: *notNull}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read columns: %w", err)
	}

	rows, err = tx.Query(ctx, indexesQuery, schema, names)
	if err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	var index, predicate string
	var unique bool
	var keys []string
	_, err = pgx.ForEachRow(rows, []any{&table, &index, &unique, &keys, &predicate}, func() error {
		if t := tables[table]; t != nil {
			t.Indexes[index] = indexShape{Name: index, Columns: slices.Clone(keys), Unique: unique, Predicate: predicate}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	return tables, nil
}

// compareShapes lists every way actual falls short of expected, in the order
// of the description: tables, then their columns, then their indexes.
func compareShapes(expected []tableShape, actual map[string]*actualTable) []string {
	var problems []string
	for _, want := range expected {
		got := actual[want.Name]
		if got == nil {
			problems = append(problems, fmt.Sprintf("table %s is missing", want.Name))
			continue
		}
		if got.Unlogged != want.Unlogged {
			problems = append(problems, fmt.Sprintf("table %s is %s, want %s", want.Name, persistence(got.Unlogged), persistence(want.Unlogged)))
		}
		for _, wc := range want.Columns {
			gc, ok := got.Columns[wc.Name]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("column %s.%s is missing (want %s)", want.Name, wc.Name, describeColumn(wc)))
				continue
			case gc.Type != wc.Type:
				problems = append(problems, fmt.Sprintf("column %s.%s has type %s, want %s", want.Name, wc.Name, gc.Type, wc.Type))
			}
			if gc.NotNull != wc.NotNull {
				problems = append(problems, fmt.Sprintf("column %s.%s is %s, want %s", want.Name, wc.Name, nullability(gc.NotNull), nullability(wc.NotNull)))
			}
		}
		for _, wi := range want.Indexes {
			gi, ok := got.Indexes[wi.Name]
			if !ok {
				problems = append(problems, fmt.Sprintf("index %s on %s is missing (want %s)", wi.Name, want.Name, describeIndex(wi)))
				continue
			}
			if !slices.Equal(gi.Columns, wi.Columns) {
				problems = append(problems, fmt.Sprintf("index %s on %s has columns (%s), want (%s)", wi.Name, want.Name, strings.Join(gi.Columns, ", "), strings.Join(wi.Columns, ", ")))
			}
			if gi.Unique != wi.Unique {
				problems = append(problems, fmt.Sprintf("index %s on %s is %s, want %s", wi.Name, want.Name, uniqueness(gi.Unique), uniqueness(wi.Unique)))
			}
			if gi.Predicate != wi.Predicate {
				problems = append(problems, fmt.Sprintf("index %s on %s covers %s, want %s", wi.Name, want.Name, coverage(gi.Predicate), coverage(wi.Predicate)))
			}
		}
	}
	return problems
}

func describeColumn(c columnShape) string {
	if c.NotNull {
		return c.Type + " NOT NULL"
	}
	return c.Type
}

func describeIndex(i indexShape) string {
	d := fmt.Sprintf("%s (%s)", uniqueness(i.Unique), strings.Join(i.Columns, ", "))
	if i.Predicate != "" {
		d += " WHERE " + i.Predicate
	}
	return d
}

// persistence names a table's kind of storage.
func persistence(unlogged bool) string {
	if unlogged {
		return "UNLOGGED"
	}
	return "logged"
}

// coverage names the rows a (partial) index covers.
func coverage(predicate string) string {
	if predicate == "" {
		return "every row"
	}
	return "only rows WHERE " + predicate
}

func nullability(notNull bool) string {
	if notNull {
		return "NOT NULL"
	}
	return "nullable"
}

func uniqueness(unique bool) string {
	if unique {
		return "unique"
	}
	return "not unique"
}
