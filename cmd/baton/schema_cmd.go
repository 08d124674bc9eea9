package main

import (
	"github.com/spf13/cobra"

	"github.com/baton-go/baton/cmd/baton/internal/ops"
)

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
			return ops.SchemaPrint(cmd.OutOrStdout(), from, asJSON)
		},
	}
	print.Flags().BoolVar(&asJSON, "json", false, `print {"sql": "..."} instead of the script`)
	print.Flags().IntVar(&from, "from", 0, "print the upgrade from this migration version (0: the whole schema)")
	return groupCommand("schema", "Print baton's PostgreSQL schema, or show which versions a database has",
		`Commands about baton's PostgreSQL schema. See also "baton migrate"; "baton schema verify" is "baton verify".`, print, newSchemaStatusCommand(), newVerifyCommand())
}

func newSchemaStatusCommand() *cobra.Command {
	var f ops.Target
	cmd := &cobra.Command{
		Use:   "status",
		Short: "List the migration versions applied to a schema, and when, and those pending",
		Long: `List, read-only, the migration versions recorded in the schema's
baton_schema_migrations with the time each was applied, and the versions this
binary knows that are not applied yet ("baton migrate" applies them; "baton
schema print --from N" prints their SQL).`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ops.SchemaStatus(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	registerDB(cmd, &f)
	return cmd
}

func newMigrateCommand() *cobra.Command {
	var (
		f      ops.Target
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
				return ops.MigrateDryRun(cmd.Context(), cmd.OutOrStdout(), f)
			}
			return ops.Migrate(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	registerDB(cmd, &f)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the migrations it would apply, and change nothing")
	return cmd
}

func newVerifyCommand() *cobra.Command {
	var f ops.Target
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
			return ops.Verify(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	registerDB(cmd, &f)
	return cmd
}
