package pgsql

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
)

// SchemaError is the report of everything in a schema that differs from
// what this version of baton expects, with the statements that fix it.
type SchemaError struct {
	// Schema is the schema that was checked.
	Schema string
	// Problems has one sentence per difference, e.g.
	// "column baton_lock_fences.token has type integer, want bigint".
	Problems []string
	// DDL are statements that fix the problems, in the order to run them,
	// on a session whose search_path is the schema (the migration files'
	// own statements where one makes the missing object). Migrate runs the
	// ones that only add an index itself; the others may fail on, or
	// change, the data there is: check it before running them.
	DDL []string
	// Repairs says, problem by problem (in the order of Problems), what
	// fixes it: Migrate by itself, or statements (also in DDL).
	Repairs []Repair

	adapter Adapter
	migrate bool // the report of Migrate, which repaired what it could
}

// Error lists every problem, one per line, after a summary line, then the
// statements that fix them.
func (e *SchemaError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "baton/%s: schema %q does not match what this version of baton expects (%d problem", e.adapter, e.Schema, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	if e.migrate {
		b.WriteString("); Migrate does not repair these by itself")
	} else {
		fmt.Fprintf(&b, "); run %s.Migrate (which recreates missing indexes) or fix them", e.adapter)
	}
	b.WriteString(":")
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p)
	}
	if len(e.DDL) > 0 {
		b.WriteString("\n  the statements that fix them (check the data first):\n    SET search_path TO ")
		b.WriteString(quote(e.Schema))
		b.WriteString(";")
		for _, s := range e.DDL {
			b.WriteString("\n    ")
			b.WriteString(s)
			b.WriteString(";")
		}
	}
	return b.String()
}

// Repair is what fixes one problem of a SchemaError.
type Repair struct {
	// Problem is the difference, as Problems words it.
	Problem string
	// Migrate is set when Migrate fixes it by itself: it recreates a
	// missing index and applies the migrations not recorded yet. Never set
	// in Migrate's own report, which lists what it left.
	Migrate bool
	// DDL are the statements that fix it, in the order to run them, on a
	// session whose search_path is the schema; none when only Migrate, or
	// a person, can.
	DDL []string
}

// MigrateRepairs counts the problems Migrate fixes by itself.
func (e *SchemaError) MigrateRepairs() int {
	n := 0
	for _, r := range e.Repairs {
		if r.Migrate {
			n++
		}
	}
	return n
}

// Is reports whether target is ErrSchemaMismatch.
func (e *SchemaError) Is(target error) bool { return target == ErrSchemaMismatch }

// problem is one difference from the expected shape, with the statements
// that fix it (the migration files' own, where one makes the object).
type problem struct {
	text   string
	fix    []string
	repair bool // Migrate may run the fix itself: it only adds an index
	// migrates: Migrate fixes it by applying what is not recorded yet.
	migrates bool
	// version is the migration that makes the object; 0 when none does.
	version int
}

// schemaError collects problems into a SchemaError, with their fixes once
// each, in an order that runs: schemas, then sequences and tables (in the
// files' order), then columns and persistence, then keys, indexes and
// sequence ownership.
func schemaError(a Adapter, schema string, problems []problem, migrate bool) *SchemaError {
	e := &SchemaError{Schema: schema, adapter: a, migrate: migrate}
	for _, p := range problems {
		e.Problems = append(e.Problems, p.text)
		e.Repairs = append(e.Repairs, Repair{Problem: p.text, Migrate: !migrate && (p.repair || p.migrates), DDL: p.fix})
		for _, f := range p.fix {
			if !slices.Contains(e.DDL, f) {
				e.DDL = append(e.DDL, f)
			}
		}
	}
	filePos := func(sql string) int {
		for _, st := range statements {
			if st.sql == sql {
				return st.pos
			}
		}
		return len(statements)
	}
	phase := func(sql string) int {
		switch {
		case strings.HasPrefix(sql, "CREATE SCHEMA"):
			return 0
		case strings.HasPrefix(sql, "CREATE SEQUENCE"), strings.HasPrefix(sql, "CREATE TABLE"), strings.HasPrefix(sql, "CREATE UNLOGGED TABLE"):
			return 1
		case strings.HasPrefix(sql, "ALTER TABLE") && !strings.Contains(sql, " ADD PRIMARY KEY "):
			return 2
		}
		return 3
	}
	slices.SortStableFunc(e.DDL, func(x, y string) int {
		if d := phase(x) - phase(y); d != 0 || phase(x) != 1 {
			return d
		}
		return filePos(x) - filePos(y)
	})
	return e
}

// SchemaOptions say which schema Migrate, VerifySchema or DropSchema work
// on, and for whom.
type SchemaOptions struct {
	Adapter Adapter
	// Field is the option Schema came from, for errors
	// ("MigrateOptions.Schema").
	Field string
	// Schema "" means the session's current schema.
	Schema string
	// Logger receives Migrate's records; nil discards them.
	Logger *slog.Logger
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c SchemaOptions) withDefaults() SchemaOptions {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// check validates options that have their defaults, and the handle b.
func (c SchemaOptions) check(b Beginner, op string) error {
	if b == nil {
		return c.Adapter.errorf("%s: the database handle is nil", op)
	}
	if c.Schema != "" {
		return ValidateSchemaName(c.Field, c.Schema)
	}
	return nil
}

// VerifySchema checks, read-only, that baton's tables in the schema have
// the shape this binary expects: every table, column (type and
// nullability), index (key columns, uniqueness, the predicate of a partial
// index) and persistence, and the projection generation sequence, which
// must not cache numbers per session. It returns nil, a *SchemaError
// listing every difference at once with the statements that fix them, or
// another error when the catalog could not be read.
//
// Extra tables, columns and indexes are not problems: an operator may add
// indexes, and a schema migrated by a newer baton still serves an older
// binary during a rolling deploy. When baton_schema_migrations exists, a
// recorded version behind the latest migration is a problem too; with an
// external migration tool that table is absent and the shape alone
// decides.
func VerifySchema(ctx context.Context, b Beginner, c SchemaOptions) error {
	c = c.withDefaults()
	if err := c.check(b, "VerifySchema"); err != nil {
		return err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return c.Adapter.errorf("verify schema: begin: %w", err)
	}
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
		return c.Adapter.errorf("verify schema: %w", err)
	}
	schema, err := resolveSchema(ctx, tx, c)
	if err != nil {
		return err
	}
	problems, err := verifySchema(ctx, tx, schema)
	if err != nil {
		return c.Adapter.errorf("verify schema %q: %w", schema, err)
	}
	version, recorded, err := recordedVersion(ctx, tx, schema)
	if err != nil {
		return c.Adapter.errorf("verify schema %q: %w", schema, err)
	}
	if recorded && version < latestVersion {
		pending, err := readPending(ctx, tx, schema)
		if err != nil {
			return c.Adapter.errorf("verify schema %q: %w", schema, err)
		}
		for i, p := range problems {
			if pending.absent[p.version] {
				// Migrate applies the migration that makes it; its
				// statements run alone would make Migrate's fail.
				problems[i].migrates, problems[i].fix = true, nil
			}
		}
		problems = append(problems, pending.problem(version))
	}
	if len(problems) > 0 {
		return schemaError(c.Adapter, schema, problems, false)
	}
	return nil
}

// verifySchema lists the schema's differences from the expected shape.
func verifySchema(ctx context.Context, q Querier, schema string) ([]problem, error) {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look the schema up: %w", err)
	}
	var problems []problem
	if !exists {
		problems = append(problems, problem{text: fmt.Sprintf("schema %q does not exist", schema),
			fix: []string{"CREATE SCHEMA " + quote(schema)}})
	}
	actual, err := readTables(ctx, q, schema, Tables())
	if err != nil {
		return nil, err
	}
	problems = append(problems, compareShapes(expectedShape, actual)...)
	seq, err := sequenceProblem(ctx, q, schema)
	if err != nil {
		return nil, err
	}
	if seq.text != "" {
		problems = append(problems, seq)
	}
	return problems, nil
}

// sequenceProblem describes what is wrong with the generation sequence.
// Projection refreshes are ordered by it, which holds only while every
// session draws from it directly: a cache above 1 hands each session a
// block of its own, and a number drawn later could be smaller.
func sequenceProblem(ctx context.Context, q Querier, schema string) (problem, error) {
	rows, err := q.Query(ctx, `SELECT s.seqcache FROM pg_catalog.pg_sequence s
JOIN pg_catalog.pg_class c ON c.oid = s.seqrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`, schema, ProjectionGenerationSequence)
	caches, err := collect(rows, err, func(r Rows) (int64, error) {
		var cache int64
		return cache, r.Scan(&cache)
	})
	switch {
	case err != nil:
		return problem{}, fmt.Errorf("read sequence %s: %w", ProjectionGenerationSequence, err)
	case len(caches) == 0:
		p := problem{text: fmt.Sprintf("sequence %s is missing", ProjectionGenerationSequence)}
		for _, pattern := range []string{`^CREATE SEQUENCE %s `, `^ALTER SEQUENCE %s OWNED BY`} {
			if s, ok := statement(pattern, ProjectionGenerationSequence); ok {
				p.fix, p.version = append(p.fix, s.sql), s.version
			}
		}
		return p, nil
	case caches[0] != 1:
		return problem{text: fmt.Sprintf("sequence %s caches %d numbers per session, want 1 (projection refreshes are ordered by the numbers it hands out)",
			ProjectionGenerationSequence, caches[0]), fix: []string{"ALTER SEQUENCE " + quote(ProjectionGenerationSequence) + " CACHE 1"}}, nil
	}
	return problem{}, nil
}

// pendingMigrations are the migrations a version table does not record,
// sorted by what fixes them. Migrate runs every migration not recorded,
// which fails on the objects of one that was applied and only its record
// lost; a version table with no record at all it adopts instead, recording
// the migrations whose tables it finds. So a migration not recorded with
// none of its objects (the tables it makes and the columns it adds) is
// Migrate's (absent), one with all of them takes the statement that
// records it (unless Migrate adopts), and one with some is left to a
// person.
type pendingMigrations struct {
	absent  map[int]bool // versions with none of their objects
	record  []string     // the statements recording those with all of them
	partial bool         // a version has some of its objects only
}

func readPending(ctx context.Context, q Querier, schema string) (pendingMigrations, error) {
	pm := pendingMigrations{absent: map[int]bool{}}
	applied, err := appliedVersions(ctx, q, qualified(schema, migrationsTable))
	if err != nil {
		return pm, err
	}
	present, err := readTables(ctx, q, schema, Tables())
	if err != nil {
		return pm, err
	}
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		objects, found := 0, 0
		for _, t := range expectedShape {
			got := present[t.Name]
			if t.Version == m.Version {
				objects++
				if got != nil {
					found++
				}
			}
			for _, c := range t.Columns {
				if c.Version == m.Version {
					objects++
					if _, ok := got.columns()[c.Name]; ok {
						found++
					}
				}
			}
		}
		switch {
		case found == 0:
			pm.absent[m.Version] = true
		case len(applied) == 0: // adopted: Migrate records the ones it finds
		case found == objects:
			pm.record = append(pm.record, m.record())
		default:
			pm.partial = true
		}
	}
	return pm, nil
}

// problem is the version table's own problem, recording version.
func (pm pendingMigrations) problem(version int) problem {
	return problem{
		text:     fmt.Sprintf("%s records migration version %d, want %d", migrationsTable, version, latestVersion),
		fix:      pm.record,
		migrates: len(pm.record) == 0 && !pm.partial,
	}
}

// recordedVersion returns the highest version in the schema's version
// table, and whether that table exists at all.
func recordedVersion(ctx context.Context, q Querier, schema string) (version int, exists bool, err error) {
	const lookUp = `SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p'))`
	if err := q.QueryRow(ctx, lookUp, schema, migrationsTable).Scan(&exists); err != nil {
		return 0, false, fmt.Errorf("look %s up: %w", migrationsTable, err)
	}
	if !exists {
		return 0, false, nil
	}
	var v int32
	if err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+qualified(schema, migrationsTable)).Scan(&v); err != nil {
		return 0, false, fmt.Errorf("read %s: %w", migrationsTable, err)
	}
	return int(v), true, nil
}

// columns are t's columns; none for a table that is not there (nil).
func (t *actualTable) columns() map[string]columnShape {
	if t == nil {
		return nil
	}
	return t.Columns
}

// actualTable is a table as the catalog describes it.
type actualTable struct {
	Columns map[string]columnShape
	Indexes map[string]indexShape
	// Unlogged is set for an UNLOGGED table.
	Unlogged bool
}

// readTables reads the columns and indexes of the named ordinary or
// partitioned tables of the schema from pg_catalog (information_schema
// would hide tables the current role has no privilege on). Tables that do
// not exist are absent from the result; nil names means every table.
// Index keys come as a JSON array,
// which every driver reads as text.
func readTables(ctx context.Context, q Querier, schema string, names []string) (map[string]*actualTable, error) {
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
SELECT t.relname, i.relname, x.indisunique, x.indisprimary,
       to_json(ARRAY(SELECT pg_catalog.pg_get_indexdef(x.indexrelid, k, true)
                    || CASE WHEN x.indoption[k - 1] & 1 = 1 THEN ' DESC' ELSE '' END
             FROM generate_series(1, x.indnkeyatts) AS k ORDER BY k))::text,
       coalesce(pg_catalog.pg_get_expr(x.indpred, x.indrelid, true), '')
FROM pg_catalog.pg_index x
JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
JOIN pg_catalog.pg_class t ON t.oid = x.indrelid
JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = $1 AND t.relkind IN ('r', 'p')
  AND ($2::text[] IS NULL OR t.relname = ANY ($2::text[]))
ORDER BY t.relname, i.relname`

	tables := make(map[string]*actualTable)
	rows, err := q.Query(ctx, columnsQuery, schema, names)
	err = each(rows, err, func(r Rows) error {
		var (
			table       string
			column, typ *string // NULL for a table without columns
			notNull     *bool
			unlogged    bool
		)
		if err := r.Scan(&table, &column, &typ, &notNull, &unlogged); err != nil {
			return err
		}
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

	rows, err = q.Query(ctx, indexesQuery, schema, names)
	err = each(rows, err, func(r Rows) error {
		var (
			table, keys string
			ix          indexShape
		)
		if err := r.Scan(&table, &ix.Name, &ix.Unique, &ix.Primary, &keys, &ix.Predicate); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(keys), &ix.Columns); err != nil {
			return fmt.Errorf("index %s: keys %s: %w", ix.Name, keys, err)
		}
		if t := tables[table]; t != nil {
			t.Indexes[ix.Name] = ix
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	return tables, nil
}

// compareShapes lists every way actual falls short of expected, in the
// order of the description: tables, then their columns, then their
// indexes; each with what fixes it.
func compareShapes(expected []tableShape, actual map[string]*actualTable) []problem {
	var problems []problem
	version := 0 // of the table being compared
	add := func(p problem, format string, args ...any) {
		p.text = fmt.Sprintf(format, args...)
		if p.version == 0 { // a column a later migration adds has its own
			p.version = version
		}
		problems = append(problems, p)
	}
	for _, want := range expected {
		version = want.Version
		t := quote(want.Name)
		got := actual[want.Name]
		if got == nil {
			var fix []string
			for _, s := range tableStatements(want.Name) {
				fix = append(fix, s.sql)
			}
			add(problem{fix: fix}, "table %s is missing", want.Name)
			continue
		}
		if got.Unlogged != want.Unlogged {
			add(problem{fix: []string{"ALTER TABLE " + t + " SET " + strings.ToUpper(persistence(want.Unlogged))}},
				"table %s is %s, want %s", want.Name, persistence(got.Unlogged), persistence(want.Unlogged))
		}
		keyed := false // a missing column's definition restores the primary key
		for _, wc := range want.Columns {
			gc, ok := got.Columns[wc.Name]
			c := t + " ALTER COLUMN " + quote(wc.Name)
			switch {
			case !ok:
				var fix []string
				if def := columnDefinition(want.Name, wc.Name); def != "" {
					fix = []string{"ALTER TABLE " + t + " ADD COLUMN " + def}
					keyed = keyed || strings.Contains(def, "PRIMARY KEY")
				}
				add(problem{fix: fix, version: wc.Version}, "column %s.%s is missing (want %s)", want.Name, wc.Name, describeColumn(wc))
				continue
			case gc.Type != wc.Type:
				typ := wc.Type
				if def := columnDefinition(want.Name, wc.Name); strings.Contains(def, ` COLLATE "C"`) {
					typ += ` COLLATE "C"`
				}
				add(problem{fix: []string{"ALTER TABLE " + c + " TYPE " + typ + " USING " + quote(wc.Name) + "::" + wc.Type}},
					"column %s.%s has type %s, want %s", want.Name, wc.Name, gc.Type, wc.Type)
			}
			if gc.NotNull != wc.NotNull {
				set := "ALTER TABLE " + c + " DROP NOT NULL"
				if wc.NotNull {
					set = "ALTER TABLE " + c + " SET NOT NULL"
				}
				add(problem{fix: []string{set}}, "column %s.%s is %s, want %s", want.Name, wc.Name, nullability(gc.NotNull), nullability(wc.NotNull))
			}
		}
		for _, wi := range want.Indexes {
			gi, ok := got.Indexes[wi.Name]
			if !ok {
				p := problem{}
				switch s, found := statement(`^CREATE (UNIQUE )?INDEX %s ON `, wi.Name); {
				case found:
					p.fix, p.repair = []string{s.sql}, true
				case wi.Primary && !keyed:
					p.fix = []string{"ALTER TABLE " + t + " ADD PRIMARY KEY (" + strings.Join(wi.Columns, ", ") + ")"}
				}
				add(p, "index %s on %s is missing (want %s)", wi.Name, want.Name, describeIndex(wi))
				continue
			}
			var fix []string
			if s, found := statement(`^CREATE (UNIQUE )?INDEX %s ON `, wi.Name); found {
				fix = []string{"DROP INDEX " + quote(wi.Name), s.sql}
			}
			if !slices.Equal(gi.Columns, wi.Columns) {
				add(problem{fix: fix}, "index %s on %s has columns (%s), want (%s)", wi.Name, want.Name, strings.Join(gi.Columns, ", "), strings.Join(wi.Columns, ", "))
				fix = nil
			}
			if gi.Unique != wi.Unique {
				add(problem{fix: fix}, "index %s on %s is %s, want %s", wi.Name, want.Name, uniqueness(gi.Unique), uniqueness(wi.Unique))
				fix = nil
			}
			if gi.Predicate != wi.Predicate {
				add(problem{fix: fix}, "index %s on %s covers %s, want %s", wi.Name, want.Name, coverage(gi.Predicate), coverage(wi.Predicate))
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
