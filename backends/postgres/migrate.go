package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/internal/pgrules"
)

// TxStarter is what Migrate and VerifySchema need from a database handle:
// a way to start a transaction. *pgxpool.Pool and *pgx.Conn both satisfy it.
// Everything runs inside that one transaction, so it also works through a
// transaction-pooling proxy such as PgBouncer.
type TxStarter interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// MaxSchemaNameLength is the longest schema name, in bytes, that Migrate and
// VerifySchema accept. PostgreSQL silently cuts longer names to this length,
// which would make two different configured names meet in one schema.
const MaxSchemaNameLength = 63

var (
	// ErrInvalidSchemaName is returned (wrapped, naming the option and the
	// reason) for a schema name PostgreSQL cannot hold as given.
	ErrInvalidSchemaName = errors.New("baton/postgres: invalid schema name")

	// ErrSchemaTooNew is returned (wrapped) by Migrate when the database
	// records a migration version this binary does not know: a newer baton
	// has migrated it. Migrate changes nothing then. A caller that runs old
	// and new binaries side by side (a rolling deploy) may treat it as
	// non-fatal and rely on VerifySchema, which accepts a newer schema as
	// long as everything this binary needs is present.
	ErrSchemaTooNew = errors.New("baton/postgres: the database schema is newer than this binary")
)

// MigrateOptions configures Migrate.
type MigrateOptions struct {
	// Schema is the schema that receives baton's tables. It is created when
	// missing. Empty means the connection's current schema: the first
	// existing schema of its search_path.
	Schema string

	// Logger receives one Info record per applied migration. nil discards
	// them, like every baton logger.
	Logger *slog.Logger
}

// Migrate brings baton's tables in the schema up to the latest migration
// this binary knows. It is safe to call from every node at every start:
//
//   - All pending migrations run in one transaction, so a failure leaves the
//     schema as it was.
//   - The transaction first takes a transaction-scoped advisory lock derived
//     from the schema name, so concurrent callers run one after another and
//     the later ones find nothing to do.
//   - Applied versions are recorded in baton_schema_migrations in the same
//     schema, which makes a repeated call a no-op.
//   - When the database records a version newer than this binary knows, it
//     returns an error wrapping ErrSchemaTooNew and changes nothing.
//
// The migration files name no schema; Migrate points the transaction's
// search_path at the target schema (SET LOCAL) so they land there.
func Migrate(ctx context.Context, db TxStarter, opts MigrateOptions) error {
	if db == nil {
		return errors.New("baton/postgres: Migrate: the database handle is nil")
	}
	if opts.Schema != "" {
		if err := validateSchemaName("MigrateOptions.Schema", opts.Schema); err != nil {
			return err
		}
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}

	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("baton/postgres: migrate: begin: %w", err)
	}
	// A no-op after Commit; otherwise it undoes everything, even when ctx
	// has ended.
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()

	schema, err := resolveSchema(ctx, tx, opts.Schema, "MigrateOptions.Schema")
	if err != nil {
		return err
	}
	// Lock before looking at anything, so that the existence checks below
	// cannot race another node's CREATE.
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLockKey(schema)); err != nil {
		return fmt.Errorf("baton/postgres: migrate schema %q: take the migration lock: %w", schema, err)
	}
	if opts.Schema != "" {
		if err := ensureSchema(ctx, tx, schema); err != nil {
			return err
		}
	}
	quotedSchema := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+quotedSchema); err != nil {
		return fmt.Errorf("baton/postgres: migrate schema %q: set search_path: %w", schema, err)
	}
	table := pgx.Identifier{schema, migrationsTable}.Sanitize()
	if _, err := tx.Exec(ctx, migrationsTableDDL(table)); err != nil {
		return fmt.Errorf("baton/postgres: migrate schema %q: create %s: %w", schema, migrationsTable, err)
	}

	applied, err := appliedVersions(ctx, tx, table)
	if err != nil {
		return fmt.Errorf("baton/postgres: migrate schema %q: %w", schema, err)
	}
	if newest := maxVersion(applied); newest > latestVersion {
		return fmt.Errorf("%w: schema %q records migration version %d, but this binary knows versions up to %d; upgrade this binary (or run the newer one's migrations) instead of migrating with it",
			ErrSchemaTooNew, schema, newest, latestVersion)
	}

	var done []migration
	for _, m := range migrations {
		if applied[m.Version] {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("baton/postgres: migrate schema %q: migration %s: %w", schema, m.File, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (version, name) VALUES ($1, $2)", m.Version, m.Title); err != nil {
			return fmt.Errorf("baton/postgres: migrate schema %q: record migration %s: %w", schema, m.File, err)
		}
		done = append(done, m)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("baton/postgres: migrate schema %q: commit: %w", schema, err)
	}
	// Logged after the commit, so a record never announces a migration that
	// was rolled back.
	for _, m := range done {
		logger.InfoContext(ctx, "baton: applied schema migration",
			"schema", schema, "version", m.Version, "name", m.Title)
	}
	return nil
}

// validateSchemaName rejects names that PostgreSQL would reject or silently
// change (pgrules.SchemaProblem). field names the option the name came
// from, for the error.
func validateSchemaName(field, name string) error {
	if why := pgrules.SchemaProblem(name); why != "" {
		return fmt.Errorf("%w: %s %q: %s", ErrInvalidSchemaName, field, name, why)
	}
	return nil
}

// resolveSchema returns the schema to work in: the given name, or the
// session's current schema when the name is empty.
func resolveSchema(ctx context.Context, tx pgx.Tx, schema, field string) (string, error) {
	if schema != "" {
		return schema, nil
	}
	var current *string
	if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil {
		return "", fmt.Errorf("baton/postgres: find the current schema: %w", err)
	}
	if current == nil {
		return "", fmt.Errorf("baton/postgres: %s is empty, which means the current schema, but the connection has none: no schema in its search_path exists; create one or set %s", field, field)
	}
	if err := validateSchemaName("the current schema", *current); err != nil {
		return "", err
	}
	return *current, nil
}

// ensureSchema creates the schema when it does not exist. It checks first
// rather than running CREATE SCHEMA IF NOT EXISTS unconditionally, because
// that statement demands the CREATE privilege on the database even when the
// schema is already there.
func ensureSchema(ctx context.Context, tx pgx.Tx, schema string) error {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return fmt.Errorf("baton/postgres: migrate schema %q: look the schema up: %w", schema, err)
	}
	if exists {
		return nil
	}
	if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("baton/postgres: migrate schema %q: create the schema: %w", schema, err)
	}
	return nil
}

// appliedVersions reads the versions recorded in the (quoted) version table.
func appliedVersions(ctx context.Context, tx pgx.Tx, table string) (map[int]bool, error) {
	rows, err := tx.Query(ctx, "SELECT version FROM "+table)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", migrationsTable, err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int32])
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

// migrationLockKey serializes Migrate calls on one schema, and bun's
// CreateSchema with them (pgrules.MigrationLockKey).
func migrationLockKey(schema string) int64 { return pgrules.MigrationLockKey(schema) }
