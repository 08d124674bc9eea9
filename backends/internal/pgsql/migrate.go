package pgsql

import (
	"context"
	"fmt"
	"strings"
)

// Migrate brings baton's tables in the schema up to the latest migration
// this binary knows, and repairs what it safely can. It is safe to call
// from every node at every start:
//
//   - Everything runs in one transaction (a savepoint inside a caller's
//     transaction), so a failure leaves the schema as it was.
//   - The transaction first takes a transaction-scoped advisory lock
//     derived from the schema name (MigrationLockKey), so concurrent
//     callers, of either adapter, run one after another and the later ones
//     find nothing to do.
//   - Applied versions are recorded in baton_schema_migrations in the same
//     schema, which makes a repeated call a no-op.
//   - A schema with baton's tables but no recorded versions (made by an
//     external tool, or by bun's models before the adapters shared these
//     files) is adopted: the versions whose tables and added columns are
//     all there are recorded without running them again, and only the
//     later ones run.
//   - Afterwards the schema is verified: a missing baton index is created
//     again; any other difference (a missing or retyped column, a missing
//     table) is a *SchemaError whose DDL says exactly what to run, and
//     nothing is changed.
//   - When the database records a version newer than this binary knows, it
//     returns an error wrapping ErrSchemaTooNew and changes nothing.
//
// The migration files name no schema: search_path points at the target
// schema while they run and is put back afterwards.
func Migrate(ctx context.Context, b Beginner, c SchemaOptions) error {
	c = c.withDefaults()
	if err := c.check(b, "Migrate"); err != nil {
		return err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return c.Adapter.errorf("migrate: begin: %w", err)
	}
	defer rollback(ctx, tx)
	schema, err := resolveSchema(ctx, tx, c)
	if err != nil {
		return err
	}
	fail := func(format string, args ...any) error {
		return c.Adapter.errorf("migrate schema %q: "+format, append([]any{schema}, args...)...)
	}
	// Lock before looking at anything, so that the existence checks below
	// cannot race another node's CREATE.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", MigrationLockKey(schema)); err != nil {
		return fail("take the migration lock: %w", err)
	}
	if c.Schema != "" {
		if err := ensureSchema(ctx, tx, schema); err != nil {
			return fail("%w", err)
		}
	}
	restore, err := setSearchPath(ctx, tx, schema)
	if err != nil {
		return fail("%w", err)
	}
	table := qualified(schema, migrationsTable)
	if _, err := tx.Exec(ctx, migrationsTableDDL(table)); err != nil {
		return fail("create %s: %w", migrationsTable, err)
	}
	applied, err := appliedVersions(ctx, tx, table)
	if err != nil {
		return fail("%w", err)
	}
	if newest := maxVersion(applied); newest > latestVersion {
		return fmt.Errorf("%w: schema %q records migration version %d, but this binary knows versions up to %d; upgrade this binary (or run the newer one's migrations) instead of migrating with it",
			ErrSchemaTooNew, schema, newest, latestVersion)
	}
	adopt := 0
	if len(applied) == 0 {
		if adopt, err = adoptableVersion(ctx, tx, schema); err != nil {
			return fail("%w", err)
		}
	}

	var ran, recorded []migration
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		if m.Version > adopt {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fail("migration %s: %w", m.File, err)
			}
			ran = append(ran, m)
		} else {
			recorded = append(recorded, m)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (version, name) VALUES ($1, $2)", m.Version, m.Title); err != nil {
			return fail("record migration %s: %w", m.File, err)
		}
	}

	problems, err := verifySchema(ctx, tx, schema)
	if err != nil {
		return fail("verify: %w", err)
	}
	var repaired, left []problem
	for _, p := range problems {
		if !p.repair {
			left = append(left, p)
			continue
		}
		for _, s := range p.fix {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fail("repair: %s: %w", s, err)
			}
		}
		repaired = append(repaired, p)
	}
	if len(left) > 0 {
		return schemaError(c.Adapter, schema, left, true)
	}
	if err := restore(); err != nil {
		return fail("%w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail("commit: %w", err)
	}
	// Logged after the commit, so a record never announces a change that
	// was rolled back.
	for _, m := range recorded {
		c.Logger.InfoContext(ctx, "baton: recorded schema migration found applied", "schema", schema, "version", m.Version, "name", m.Title)
	}
	for _, m := range ran {
		c.Logger.InfoContext(ctx, "baton: applied schema migration", "schema", schema, "version", m.Version, "name", m.Title)
	}
	for _, p := range repaired {
		c.Logger.InfoContext(ctx, "baton: repaired schema", "schema", schema, "problem", p.text, "ddl", strings.Join(p.fix, "; "))
	}
	return nil
}

// adoptableVersion is, for a schema without recorded versions, the last
// migration whose tables and added columns, and all earlier migrations',
// are there: 0 for a schema without baton's tables. A schema holding
// tables of a later migration but lacking an earlier one's was not made by
// running them, and is refused. (A column a migration adds is added with IF
// NOT EXISTS, so one found early is no reason to refuse.)
func adoptableVersion(ctx context.Context, q Querier, schema string) (int, error) {
	present, err := readTables(ctx, q, schema, Tables())
	if err != nil {
		return 0, err
	}
	adopt := latestVersion
	for _, t := range expectedShape {
		got := present[t.Name]
		if got == nil {
			adopt = min(adopt, t.Version-1)
			continue
		}
		for _, c := range t.Columns {
			if _, ok := got.Columns[c.Name]; !ok && c.Version > 0 {
				adopt = min(adopt, c.Version-1)
			}
		}
	}
	for _, t := range expectedShape {
		if present[t.Name] != nil && t.Version > adopt {
			return 0, fmt.Errorf("it records no migrations and has %s (migration %d) but not every table of the migrations before; create or drop baton's tables by hand so that it has those of migrations 1 to N only",
				t.Name, t.Version)
		}
	}
	return adopt, nil
}

// setSearchPath points the transaction's search_path at the schema and
// returns what puts it back: a savepoint inside a caller's transaction
// would otherwise leave it changed.
func setSearchPath(ctx context.Context, tx Tx, schema string) (restore func() error, err error) {
	var saved string
	if err := tx.QueryRow(ctx, "SELECT current_setting('search_path')").Scan(&saved); err != nil {
		return nil, fmt.Errorf("read search_path: %w", err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", quote(schema)); err != nil {
		return nil, fmt.Errorf("set search_path: %w", err)
	}
	return func() error {
		if _, err := tx.Exec(ctx, "SELECT set_config('search_path', $1, true)", saved); err != nil {
			return fmt.Errorf("restore search_path: %w", err)
		}
		return nil
	}, nil
}

// DropSchema drops baton's tables, the generation sequence and the version
// table from the schema, when they exist, in one transaction under
// Migrate's lock: the way back from Migrate. Their data is gone.
func DropSchema(ctx context.Context, b Beginner, c SchemaOptions) error {
	c = c.withDefaults()
	if err := c.check(b, "DropSchema"); err != nil {
		return err
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		return c.Adapter.errorf("drop schema: begin: %w", err)
	}
	defer rollback(ctx, tx)
	schema, err := resolveSchema(ctx, tx, c)
	if err != nil {
		return err
	}
	tables := []string{qualified(schema, migrationsTable)}
	for i := len(expectedShape) - 1; i >= 0; i-- {
		tables = append(tables, qualified(schema, expectedShape[i].Name))
	}
	for _, s := range []string{
		"SELECT pg_advisory_xact_lock($1)",
		"DROP TABLE IF EXISTS " + strings.Join(tables, ", "),
		"DROP SEQUENCE IF EXISTS " + qualified(schema, ProjectionGenerationSequence),
	} {
		var args []any
		if strings.Contains(s, "$1") {
			args = append(args, MigrationLockKey(schema))
		}
		if _, err := tx.Exec(ctx, s, args...); err != nil {
			return c.Adapter.errorf("drop schema %q: %w", schema, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return c.Adapter.errorf("drop schema %q: commit: %w", schema, err)
	}
	for _, t := range tables {
		c.Logger.InfoContext(ctx, "baton: dropped table", "schema", schema, "table", t)
	}
	return nil
}

// resolveSchema returns the schema to work in: the configured name, or
// the session's current schema when it is empty.
func resolveSchema(ctx context.Context, q Querier, c SchemaOptions) (string, error) {
	if c.Schema != "" {
		return c.Schema, nil
	}
	var current *string
	if err := q.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil {
		return "", c.Adapter.errorf("find the current schema: %w", err)
	}
	if current == nil {
		return "", c.Adapter.errorf("%s is empty, which means the current schema, but the connection has none: no schema in its search_path exists; create one or set %s", c.Field, c.Field)
	}
	if err := ValidateSchemaName("the current schema", *current); err != nil {
		return "", err
	}
	return *current, nil
}

// ensureSchema creates the schema when it does not exist. It checks first
// rather than running CREATE SCHEMA IF NOT EXISTS unconditionally, because
// that statement demands the CREATE privilege on the database even when
// the schema is already there.
func ensureSchema(ctx context.Context, q Querier, schema string) error {
	var exists bool
	if err := q.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return fmt.Errorf("look the schema up: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := q.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+quote(schema)); err != nil {
		return fmt.Errorf("create the schema: %w", err)
	}
	return nil
}

// appliedVersions reads the versions recorded in the (quoted) version
// table.
func appliedVersions(ctx context.Context, q Querier, table string) (map[int]bool, error) {
	rows, err := q.Query(ctx, "SELECT version FROM "+table)
	versions, err := collect(rows, err, func(r Rows) (int32, error) {
		var v int32
		return v, r.Scan(&v)
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", migrationsTable, err)
	}
	applied := make(map[int]bool, len(versions))
	for _, v := range versions {
		applied[int(v)] = true
	}
	return applied, nil
}

func maxVersion(applied map[int]bool) int {
	newest := 0
	for v := range applied {
		newest = max(newest, v)
	}
	return newest
}
