package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/internal/cli"
)

// batonTables are the tables baton's migrations create (besides the
// migration record), to tell "not migrated at all" from "migrated, but not
// in the shape this binary expects".
var batonTables = []string{
	"baton_lock_fences",
	pgxstore.LeaseTable,
	pgxstore.OutboxTable,
	pgxstore.OutboxStateTable,
	pgxstore.OutboxDeadTable,
	pgxstore.ProjectionHeaderTable,
	pgxstore.ProjectionDetailTable,
}

func newSchemaCommand() *cobra.Command {
	var (
		asJSON bool
		from   int
	)
	print := &cobra.Command{
		Use:   "print",
		Short: "Print baton's schema as one SQL script (no database needed)",
		Long: `Print every migration in order, plus the rows that record them, as one SQL
script. It names no schema: the objects land in the first schema of the
search_path. Run it in one transaction, for example:

  baton schema print > baton.sql
  PGOPTIONS='-c search_path=baton' psql -v ON_ERROR_STOP=1 --single-transaction -f baton.sql

The schema must exist first (CREATE SCHEMA baton). "baton migrate" does the
same against a live database, and creates the schema.

With --from N it prints the upgrade of a schema at version N ("baton schema
status" says which): only the migrations after N, with their rows.`,
		Example: "  baton schema print > baton.sql\n  baton schema print --from 3 > upgrade.sql",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sql, err := pgxstore.SchemaSQLFrom(from)
			if err != nil {
				return cli.Usagef("--from %d: %v", from, err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), map[string]string{"sql": sql})
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), sql)
			return err
		},
	}
	print.Flags().BoolVar(&asJSON, "json", false, `print {"sql": "..."} instead of the script`)
	print.Flags().IntVar(&from, "from", 0, "print the upgrade from this migration version (0: the whole schema)")
	return groupCommand("schema", "Print baton's PostgreSQL schema, or show which versions a database has",
		`Commands about baton's PostgreSQL schema. See also "baton migrate"; "baton schema verify" is "baton verify".`, print, newSchemaStatusCommand(), newVerifyCommand())
}

// schemaStatusReport is what schema status prints with --json.
type schemaStatusReport struct {
	Schema  string            `json:"schema"`
	Applied []migrationRecord `json:"applied"`
	Pending []migrationRecord `json:"pending"` // applied_at is zero
	Version int               `json:"version"`
	Known   int               `json:"known"` // the newest version this binary knows
}

func newSchemaStatusCommand() *cobra.Command {
	var f dbFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the migration versions applied to a schema, and when, and those pending",
		Long: `List, read-only, the migration versions recorded in the schema's
baton_schema_migrations with the time each was applied, and the versions this
binary knows that are not applied yet ("baton migrate" applies them; "baton
schema print --from N" prints their SQL).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSchemaStatus(cmd.Context(), cmd, &f)
		},
	}
	f.register(cmd)
	return cmd
}

// schemaState reads the applied migrations and lists the known ones not
// among them.
func schemaState(ctx context.Context, pool *pgxpool.Pool, schema string) (schemaStatusReport, error) {
	rep := schemaStatusReport{Schema: schema, Applied: []migrationRecord{}, Pending: []migrationRecord{}}
	applied, err := readMigrations(ctx, pool, schema)
	if err != nil {
		return rep, err
	}
	had := map[int]bool{}
	for _, m := range applied {
		had[m.Version] = true
		rep.Version = max(rep.Version, m.Version)
	}
	rep.Applied = append(rep.Applied, applied...)
	for _, m := range pgxstore.KnownMigrations() {
		rep.Known = max(rep.Known, m.Version)
		if !had[m.Version] {
			rep.Pending = append(rep.Pending, migrationRecord{Version: m.Version, Name: m.Name})
		}
	}
	return rep, nil
}

func runSchemaStatus(ctx context.Context, cmd *cobra.Command, f *dbFlags) error {
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	rep, err := schemaState(ctx, db.pool, db.schema)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.json {
		return writeJSON(out, rep)
	}
	if len(rep.Applied) == 0 {
		fmt.Fprintf(out, "schema %q records no baton migrations\n", db.schema)
	} else {
		t := newTable(out, "VERSION", "NAME", "APPLIED AT")
		for _, m := range rep.Applied {
			t.row(fmt.Sprintf("%04d", m.Version), m.Name, formatTime(m.AppliedAt))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	switch {
	case rep.Version > rep.Known:
		fmt.Fprintf(out, "schema %q is at version %d, newer than this binary knows (%d): use the newer baton\n", db.schema, rep.Version, rep.Known)
	case len(rep.Pending) == 0:
		fmt.Fprintf(out, "up to date: version %d, the newest this binary knows\n", rep.Version)
	default:
		fmt.Fprintf(out, "pending: %d migration(s) this binary knows; baton migrate applies them, baton schema print --from %d prints them\n", len(rep.Pending), rep.Version)
		t := newTable(out, "VERSION", "NAME")
		for _, m := range rep.Pending {
			t.row(fmt.Sprintf("%04d", m.Version), m.Name)
		}
		return t.flush()
	}
	return nil
}

func newMigrateCommand() *cobra.Command {
	var (
		f      dbFlags
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create baton's tables, or bring them up to this binary's version",
		Long: `Apply every migration this binary knows that the schema has not recorded, in
one transaction, creating the schema when it does not exist. It is safe to
run again, and from several nodes at once: a second run changes nothing.

A schema holding baton's tables without recorded versions (migrated by goose,
golang-migrate or an older bun adapter) is adopted: the versions found applied
are recorded, not run again. Afterwards a missing baton index is created again;
any other difference is refused, changing nothing, with the statements that
fix it. A schema migrated by a newer baton is left alone (exit status 1).

With --dry-run it lists the migrations it would apply and changes nothing.`,
		Example: "  baton migrate --postgres postgres://app@db:5432/app --schema baton",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dryRun {
				return runMigrateDryRun(cmd.Context(), cmd, &f)
			}
			return runMigrate(cmd.Context(), cmd, &f)
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the migrations it would apply, and change nothing")
	return cmd
}

// migrateReport is what migrate prints with --json.
type migrateReport struct {
	Schema  string            `json:"schema"`
	Applied []migrationRecord `json:"applied"`
	Version int               `json:"version"`
}

// runMigrateDryRun says what migrate would do, read-only.
func runMigrateDryRun(ctx context.Context, cmd *cobra.Command, f *dbFlags) error {
	pool, err := cli.OpenPool(ctx, f.url, "--postgres")
	if err != nil {
		return err
	}
	defer pool.Close()
	schema, err := resolveSchema(ctx, pool, f.schema)
	if err != nil {
		return err
	}
	rep, err := schemaState(ctx, pool, schema)
	if err != nil {
		return err
	}
	adopt := false
	if len(rep.Applied) == 0 {
		n, err := countTables(ctx, pool, schema, batonTables)
		if err != nil {
			return err
		}
		adopt = n > 0
	}
	out := cmd.OutOrStdout()
	if f.json {
		return writeJSON(out, map[string]any{"schema": schema, "dry_run": true, "version": rep.Version,
			"would_apply": rep.Pending, "adopts_unrecorded_tables": adopt})
	}
	switch {
	case rep.Version > rep.Known:
		fmt.Fprintf(out, "dry run: schema %q is at version %d, newer than this binary knows (%d): migrate would refuse it\n", schema, rep.Version, rep.Known)
		return nil
	case len(rep.Pending) == 0:
		fmt.Fprintf(out, "dry run: schema %q is up to date (migration version %d); migrate would change nothing\n", schema, rep.Version)
		return nil
	case adopt:
		fmt.Fprintf(out, "dry run: schema %q holds baton's tables without recorded versions: migrate would record the versions it finds applied and apply the rest of these\n", schema)
	default:
		fmt.Fprintf(out, "dry run: schema %q is at version %d; migrate would apply %d migration(s), in one transaction:\n", schema, rep.Version, len(rep.Pending))
	}
	t := newTable(out, "VERSION", "NAME")
	for _, m := range rep.Pending {
		t.row(fmt.Sprintf("%04d", m.Version), m.Name)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "nothing was changed; baton schema print --from %d prints their SQL\n", rep.Version)
	return nil
}

func runMigrate(ctx context.Context, cmd *cobra.Command, f *dbFlags) error {
	pool, err := cli.OpenPool(ctx, f.url, "--postgres")
	if err != nil {
		return err
	}
	defer pool.Close()
	schema, err := resolveSchema(ctx, pool, f.schema)
	if err != nil {
		return err
	}
	before, err := readMigrations(ctx, pool, schema)
	if err != nil {
		return err
	}
	if err := pgxstore.Migrate(ctx, pool, pgxstore.MigrateOptions{Schema: schema}); err != nil {
		return schemaNameError(err)
	}
	after, err := readMigrations(ctx, pool, schema)
	if err != nil {
		return err
	}
	had := map[int]bool{}
	for _, m := range before {
		had[m.Version] = true
	}
	rep := migrateReport{Schema: schema, Applied: []migrationRecord{}}
	for _, m := range after {
		if !had[m.Version] {
			rep.Applied = append(rep.Applied, m)
		}
		rep.Version = max(rep.Version, m.Version)
	}
	out := cmd.OutOrStdout()
	if f.json {
		return writeJSON(out, rep)
	}
	if len(rep.Applied) == 0 {
		fmt.Fprintf(out, "schema %q is up to date (migration version %d)\n", schema, rep.Version)
		return nil
	}
	fmt.Fprintf(out, "schema %q: applied %d migration(s); now at version %d\n", schema, len(rep.Applied), rep.Version)
	t := newTable(out, "VERSION", "NAME", "APPLIED AT")
	for _, m := range rep.Applied {
		t.row(fmt.Sprintf("%04d", m.Version), m.Name, formatTime(m.AppliedAt))
	}
	return t.flush()
}

func newVerifyCommand() *cobra.Command {
	var f dbFlags
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check, read-only, that baton's tables have the shape this binary expects",
		Long: `Compare the schema's tables, columns and indexes with what this version of
baton expects, read-only, and list every difference with what fixes it:
"baton migrate" (which recreates a missing index and applies the migrations
not recorded yet), or the SQL statements printed after the list (a missing or
retyped column, a missing table: migrate refuses those and changes nothing).
Extra tables, columns and indexes are fine, and so is a schema migrated by a
newer baton. The same command is "baton schema verify".

Exit status: 0 when the schema matches, 1 when it does not (each problem is
listed), 2 when the schema or baton's tables do not exist at all.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runVerify(cmd.Context(), cmd, &f)
		},
	}
	f.register(cmd)
	return cmd
}

// verifyReport is what verify prints with --json.
type verifyReport struct {
	Schema   string   `json:"schema"`
	OK       bool     `json:"ok"`
	Version  int      `json:"version"`
	Problems []string `json:"problems"`
	// DDL fixes the problems, on a session whose search_path is the schema.
	DDL []string `json:"ddl"`
	// Repairs says, problem by problem, what fixes it.
	Repairs []repairJSON `json:"repairs"`
}

// repairJSON is a pgxstore.SchemaError's Repair.
type repairJSON struct {
	Problem string   `json:"problem"`
	Migrate bool     `json:"migrate"` // baton migrate fixes it by itself
	DDL     []string `json:"ddl"`
}

func runVerify(ctx context.Context, cmd *cobra.Command, f *dbFlags) error {
	db, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := countTables(ctx, db.pool, db.schema, batonTables)
	if err != nil {
		return err
	}
	if n == 0 {
		return cli.Usagef("schema %q has none of baton's tables; create them with: baton migrate --schema %s", db.schema, db.schema)
	}
	rep := verifyReport{Schema: db.schema, Problems: []string{}, DDL: []string{}, Repairs: []repairJSON{}}
	if recs, err := readMigrations(ctx, db.pool, db.schema); err == nil {
		for _, m := range recs {
			rep.Version = max(rep.Version, m.Version)
		}
	}
	err = pgxstore.VerifySchema(ctx, db.pool, pgxstore.VerifyOptions{Schema: db.schema})
	var se *pgxstore.SchemaError
	switch {
	case err == nil:
		rep.OK = true
	case errors.As(err, &se):
		rep.Problems, rep.DDL = se.Problems, se.DDL
		for _, r := range se.Repairs {
			rep.Repairs = append(rep.Repairs, repairJSON{Problem: r.Problem, Migrate: r.Migrate, DDL: append([]string{}, r.DDL...)})
		}
	default:
		return schemaNameError(err)
	}
	out := cmd.OutOrStdout()
	switch {
	case f.json:
		if err := writeJSON(out, rep); err != nil {
			return err
		}
	case rep.OK:
		fmt.Fprintf(out, "schema %q matches this version of baton (migration version %d)\n", db.schema, rep.Version)
	default:
		if err := printMismatch(out, db.schema, rep); err != nil {
			return err
		}
	}
	if !rep.OK {
		return errChecksFailed
	}
	return nil
}

// printMismatch lists the problems, each with what fixes it, then says
// what to run: the statements for those migrate does not fix, then baton
// migrate for the rest.
func printMismatch(out io.Writer, schema string, rep verifyReport) error {
	fmt.Fprintf(out, "schema %q does not match this version of baton: %d problem(s)\n", schema, len(rep.Problems))
	byMigrate := 0
	t := newTable(out, "#", "PROBLEM", "FIX")
	for i, r := range rep.Repairs {
		fix := "by hand: no statement is safe to give"
		switch {
		case r.Migrate && len(r.DDL) > 0:
			fix = "baton migrate, or the SQL below"
		case r.Migrate:
			fix = "baton migrate"
		case len(r.DDL) > 0:
			fix = "the SQL below"
		}
		if r.Migrate {
			byMigrate++
		}
		t.row(strconv.Itoa(i+1), r.Problem, fix)
	}
	if err := t.flush(); err != nil {
		return err
	}
	// Migrate repairs only a schema whose other problems are fixed: it
	// refuses the rest, changing nothing.
	switch {
	case byMigrate == len(rep.Repairs):
		fmt.Fprintf(out, "fix: baton migrate --schema %s fixes every one of them by itself\n", schema)
	case byMigrate > 0:
		fmt.Fprintf(out, "fix: run the SQL below, then baton migrate --schema %s: it fixes %d of them by itself, "+
			"but refuses the schema, changing nothing, while the others remain\n", schema, byMigrate)
	default:
		fmt.Fprintf(out, "fix: run the SQL below; baton migrate refuses the schema while these remain, changing nothing\n")
	}
	if len(rep.DDL) > 0 {
		fmt.Fprintf(out, "\nstatements that fix them, in this order (check the data first):\nSET search_path TO %s;\n", pgx.Identifier{schema}.Sanitize())
		for _, s := range rep.DDL {
			fmt.Fprintf(out, "%s;\n", s)
		}
	}
	return nil
}

// countTables counts how many of names exist in schema.
func countTables(ctx context.Context, pool *pgxpool.Pool, schema string, names []string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind IN ('r', 'p')`, schema, names).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("look baton's tables up in schema %q: %w", schema, err)
	}
	return n, nil
}
