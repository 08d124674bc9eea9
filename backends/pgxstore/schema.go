package pgxstore

import (
	"context"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/backends/internal/pgsql"
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
const MaxSchemaNameLength = pgsql.MaxIdentifierLength

// The schema's sentinel errors: the values the bun adapter returns too, so
// errors.Is gives the same answer on either.
var (
	// ErrSchemaMismatch is wrapped by every error caused by a missing or out
	// of date table or column, and matched by every *SchemaError.
	ErrSchemaMismatch = pgsql.ErrSchemaMismatch
	// ErrInvalidSchemaName is returned (wrapped, naming the option and the
	// reason) for a schema name PostgreSQL cannot hold as given.
	ErrInvalidSchemaName = pgsql.ErrInvalidSchemaName
	// ErrSchemaTooNew is returned (wrapped) by Migrate when the database
	// records a migration version this binary does not know: a newer baton
	// has migrated it. Migrate changes nothing then. A caller that runs old
	// and new binaries side by side (a rolling deploy) may treat it as
	// non-fatal and rely on VerifySchema, which accepts a newer schema as
	// long as everything this binary needs is present.
	ErrSchemaTooNew = pgsql.ErrSchemaTooNew
)

// SchemaError is VerifySchema's (and Migrate's) report of everything in the
// database that differs from what this version of baton expects: one
// sentence per difference in Problems, and in DDL the statements that fix
// them. It matches ErrSchemaMismatch with errors.Is.
type SchemaError = pgsql.SchemaError

// Repair is what fixes one problem of a SchemaError (its Repairs, one per
// problem): Migrate by itself, or the statements in its DDL.
type Repair = pgsql.Repair

// MigrateOptions configures Migrate.
type MigrateOptions struct {
	// Schema is the schema that receives baton's tables. It is created when
	// missing. Empty means the connection's current schema: the first
	// existing schema of its search_path.
	Schema string

	// Logger receives one Info record per applied, adopted or repaired
	// migration step. nil discards them, like every baton logger.
	Logger *slog.Logger
}

// Migrate brings baton's tables in the schema up to the latest migration
// this binary knows, and repairs what it safely can. It is safe to call
// from every node at every start:
//
//   - All pending migrations run in one transaction, so a failure leaves the
//     schema as it was.
//   - The transaction first takes a transaction-scoped advisory lock derived
//     from the schema name, so concurrent callers (of this adapter or the
//     bun one) run one after another and the later ones find nothing to do.
//   - Applied versions are recorded in baton_schema_migrations in the same
//     schema, which makes a repeated call a no-op.
//   - A schema with baton's tables but no recorded versions (migrated by
//     goose or golang-migrate, or made by an older bun adapter) is adopted:
//     the versions whose tables and added columns are there are recorded,
//     not run again.
//   - The result is verified: a missing baton index is created again; any
//     other difference returns a *SchemaError whose DDL holds the exact
//     statements to run, and nothing is changed.
//   - When the database records a version newer than this binary knows, it
//     returns an error wrapping ErrSchemaTooNew and changes nothing.
//
// The migration files name no schema; Migrate points the transaction's
// search_path at the target schema so they land there.
func Migrate(ctx context.Context, db TxStarter, opts MigrateOptions) error {
	return pgsql.Migrate(ctx, beginner(db), pgsql.SchemaOptions{Adapter: adapter, Field: "MigrateOptions.Schema", Schema: opts.Schema, Logger: opts.Logger})
}

// VerifyOptions configures VerifySchema.
type VerifyOptions struct {
	// Schema is the schema to check. Empty means the connection's current
	// schema: the first existing schema of its search_path.
	Schema string
}

// VerifySchema checks, read-only, that baton's tables in the schema have the
// shape this binary expects: every table, column (type and nullability),
// index (key columns, uniqueness, and the predicate of a partial index) and
// persistence, and the projection generation sequence, which must not cache
// numbers per session. It returns nil, a *SchemaError listing every
// difference at once with the statements that fix them, or another error
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
	return pgsql.VerifySchema(ctx, beginner(db), pgsql.SchemaOptions{Adapter: adapter, Field: "VerifyOptions.Schema", Schema: opts.Schema})
}

func beginner(db TxStarter) pgsql.Beginner {
	if db == nil {
		return nil
	}
	return starter{db}
}

// Migrations returns the migration files, at the root of the returned file
// system, for running them with a migration tool instead of Migrate:
// golang-migrate's iofs source (iofs.New(pgxstore.Migrations(), ".")) or
// goose (goose.NewProvider with this file system). Every file is named
// NNNN_title.up.sql and starts with "-- +goose Up"; none names a schema, so
// the tables land in the connection's search_path.
func Migrations() fs.FS { return pgsql.Migrations() }

// SchemaSQL returns the whole current schema as one SQL script: every
// migration in order, each under a header comment, plus the rows Migrate
// would record in baton_schema_migrations, so Migrate later finds nothing to
// do. Like the migration files it names no schema: the objects are created in
// the first schema of search_path. Run it in one transaction, for example:
//
//	PGOPTIONS='-c search_path=baton' psql -v ON_ERROR_STOP=1 --single-transaction -f baton.sql
func SchemaSQL() string { return pgsql.SchemaSQL() }

// SchemaSQLFrom is SchemaSQL for a schema at migration version from: the
// upgrade script, only the migrations after it. A version this binary does
// not know is an error.
func SchemaSQLFrom(from int) (string, error) { return pgsql.SchemaSQLFrom(from) }

// MigrationInfo names one migration this binary knows.
type MigrationInfo = pgsql.MigrationInfo

// KnownMigrations lists the migrations this binary knows, in version order.
func KnownMigrations() []MigrationInfo { return pgsql.Known() }
