package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/internal/cli"
)

// BatonTables are the tables baton's migrations create (besides the
// migration record), to tell "not migrated at all" from "migrated, but not
// in the shape this binary expects".
var BatonTables = []string{
	"baton_lock_fences",
	pgxstore.LeaseTable,
	pgxstore.OutboxTable,
	pgxstore.OutboxStateTable,
	pgxstore.OutboxDeadTable,
	pgxstore.ProjectionHeaderTable,
	pgxstore.ProjectionDetailTable,
}

// SchemaPrint prints baton's schema as one SQL script, or with from the
// upgrade of a schema at that version; with asJSON as {"sql": "..."}
// (baton schema print).
func SchemaPrint(out io.Writer, from int, asJSON bool) error {
	sql, err := pgxstore.SchemaSQLFrom(from)
	if err != nil {
		return cli.Usagef("--from %d: %v", from, err)
	}
	if asJSON {
		return writeJSON(out, map[string]string{"sql": sql})
	}
	_, err = fmt.Fprint(out, sql)
	return err
}

// SchemaStatusReport is what schema status prints with --json.
type SchemaStatusReport struct {
	Schema  string            `json:"schema"`
	Applied []MigrationRecord `json:"applied"`
	Pending []MigrationRecord `json:"pending"` // applied_at is zero
	Version int               `json:"version"`
	Known   int               `json:"known"` // the newest version this binary knows
}

// schemaState reads the applied migrations and lists the known ones not
// among them.
func schemaState(ctx context.Context, pool *pgxpool.Pool, schema string) (SchemaStatusReport, error) {
	rep := SchemaStatusReport{Schema: schema, Applied: []MigrationRecord{}, Pending: []MigrationRecord{}}
	applied, err := ReadMigrations(ctx, pool, schema)
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
			rep.Pending = append(rep.Pending, MigrationRecord{Version: m.Version, Name: m.Name})
		}
	}
	return rep, nil
}

// SchemaStatus lists the migrations applied to the schema, and when, and
// those pending (baton schema status).
func SchemaStatus(ctx context.Context, out io.Writer, target Target) error {
	db, err := target.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	rep, err := schemaState(ctx, db.pool, db.schema)
	if err != nil {
		return err
	}
	if target.JSON {
		return writeJSON(out, rep)
	}
	if len(rep.Applied) == 0 {
		fmt.Fprintf(out, "schema %q records no baton migrations\n", db.schema)
	} else {
		t := newTable(out, "VERSION", "NAME", "APPLIED AT")
		for _, m := range rep.Applied {
			t.row(fmt.Sprintf("%04d", m.Version), m.Name, FormatTime(m.AppliedAt))
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

// MigrateReport is what migrate prints with --json.
type MigrateReport struct {
	Schema  string            `json:"schema"`
	Applied []MigrationRecord `json:"applied"`
	Version int               `json:"version"`
}

// MigrateDryRun says what Migrate would do, read-only (baton migrate
// --dry-run).
func MigrateDryRun(ctx context.Context, out io.Writer, target Target) error {
	db, err := target.connect(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	pool, schema := db.pool, db.schema
	rep, err := schemaState(ctx, pool, schema)
	if err != nil {
		return err
	}
	adopt := false
	if len(rep.Applied) == 0 {
		n, err := CountTables(ctx, pool, schema, BatonTables)
		if err != nil {
			return err
		}
		adopt = n > 0
	}
	if target.JSON {
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

// Migrate applies the migrations the schema has not recorded, creating the
// schema when it does not exist (baton migrate).
func Migrate(ctx context.Context, out io.Writer, target Target) error {
	db, err := target.connect(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	pool, schema := db.pool, db.schema
	before, err := ReadMigrations(ctx, pool, schema)
	if err != nil {
		return err
	}
	if err := pgxstore.Migrate(ctx, pool, pgxstore.MigrateOptions{Schema: schema}); err != nil {
		return schemaNameError(err)
	}
	after, err := ReadMigrations(ctx, pool, schema)
	if err != nil {
		return err
	}
	had := map[int]bool{}
	for _, m := range before {
		had[m.Version] = true
	}
	rep := MigrateReport{Schema: schema, Applied: []MigrationRecord{}}
	for _, m := range after {
		if !had[m.Version] {
			rep.Applied = append(rep.Applied, m)
		}
		rep.Version = max(rep.Version, m.Version)
	}
	if target.JSON {
		return writeJSON(out, rep)
	}
	if len(rep.Applied) == 0 {
		fmt.Fprintf(out, "schema %q is up to date (migration version %d)\n", schema, rep.Version)
		return nil
	}
	fmt.Fprintf(out, "schema %q: applied %d migration(s); now at version %d\n", schema, len(rep.Applied), rep.Version)
	t := newTable(out, "VERSION", "NAME", "APPLIED AT")
	for _, m := range rep.Applied {
		t.row(fmt.Sprintf("%04d", m.Version), m.Name, FormatTime(m.AppliedAt))
	}
	return t.flush()
}

// VerifyReport is what verify prints with --json.
type VerifyReport struct {
	Schema   string   `json:"schema"`
	OK       bool     `json:"ok"`
	Version  int      `json:"version"`
	Problems []string `json:"problems"`
	// DDL fixes the problems, on a session whose search_path is the schema.
	DDL []string `json:"ddl"`
	// Repairs says, problem by problem, what fixes it.
	Repairs []RepairJSON `json:"repairs"`
}

// RepairJSON is a pgxstore.SchemaError's Repair.
type RepairJSON struct {
	Problem string   `json:"problem"`
	Migrate bool     `json:"migrate"` // baton migrate fixes it by itself
	DDL     []string `json:"ddl"`
}

// Verify checks, read-only, that baton's tables have the shape this binary
// expects, and lists what fixes each difference (baton verify); it returns
// cli.ErrChecksFailed when they do not.
func Verify(ctx context.Context, out io.Writer, target Target) error {
	db, err := target.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	n, err := CountTables(ctx, db.pool, db.schema, BatonTables)
	if err != nil {
		return err
	}
	if n == 0 {
		return cli.Usagef("schema %q has none of baton's tables; create them with: baton migrate --schema %s", db.schema, db.schema)
	}
	rep := VerifyReport{Schema: db.schema, Problems: []string{}, DDL: []string{}, Repairs: []RepairJSON{}}
	if recs, err := ReadMigrations(ctx, db.pool, db.schema); err == nil {
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
			rep.Repairs = append(rep.Repairs, RepairJSON{Problem: r.Problem, Migrate: r.Migrate, DDL: append([]string{}, r.DDL...)})
		}
	default:
		return schemaNameError(err)
	}
	switch {
	case target.JSON:
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
		return cli.ErrChecksFailed
	}
	return nil
}

// printMismatch lists the problems, each with what fixes it, then says
// what to run: the statements for those migrate does not fix, then baton
// migrate for the rest.
func printMismatch(out io.Writer, schema string, rep VerifyReport) error {
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

// CountTables counts how many of names exist in schema.
func CountTables(ctx context.Context, pool *pgxpool.Pool, schema string, names []string) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind IN ('r', 'p')`, schema, names).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("look baton's tables up in schema %q: %w", schema, err)
	}
	return n, nil
}
