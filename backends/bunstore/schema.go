package bunstore

import (
	"context"
	"log/slog"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
)

// SchemaOptions configure Migrate, VerifySchema and DropSchema. The zero
// value uses the defaults.
type SchemaOptions struct {
	// Schema receives baton's tables; Migrate creates it when missing.
	// Empty means the connection's current schema: the first existing
	// schema of its search_path.
	Schema string
	// Logger receives one Info record per migration applied or found
	// applied, repair made and table dropped. nil discards them.
	Logger *slog.Logger
}

func (o SchemaOptions) config() pgsql.SchemaOptions {
	return pgsql.SchemaOptions{Adapter: adapter, Field: "SchemaOptions.Schema", Schema: o.Schema, Logger: o.Logger}
}

// SchemaError is VerifySchema's (and Migrate's) report of everything in the
// database that differs from what this version of baton expects, with the
// statements that fix it; the pgx adapter's type.
type SchemaError = pgsql.SchemaError

// Repair is what fixes one problem of a SchemaError (its Repairs, one per
// problem): Migrate by itself, or the statements in its DDL.
type Repair = pgsql.Repair

// Migrate brings baton's tables in the schema up to the latest migration,
// in one transaction (a savepoint when db is a bun.Tx, with the caller's
// search_path put back afterwards): the pgx adapter's Migrate, running the
// same migration files and recording them in the same
// baton_schema_migrations, so a schema migrated by either adapter is
// migrated and verified by the other. Concurrent callers of either adapter
// on one schema run one after another on its advisory lock.
//
// A schema made by this package before it ran the migration files (from
// the models, without version rows) is adopted: its versions are recorded
// and nothing is created twice. A missing baton index is created again;
// any other difference from the expected shape is a *SchemaError whose DDL
// holds the exact statements to run.
func Migrate(ctx context.Context, db bun.IDB, opts SchemaOptions) error {
	h, err := open(db, "Migrate")
	if err != nil {
		return err
	}
	return pgsql.Migrate(ctx, h, opts.config())
}

// VerifySchema checks, read-only, that baton's tables in the schema have
// the shape this binary expects; see the pgx adapter's VerifySchema, whose
// checks these are.
func VerifySchema(ctx context.Context, db bun.IDB, opts SchemaOptions) error {
	h, err := open(db, "VerifySchema")
	if err != nil {
		return err
	}
	return pgsql.VerifySchema(ctx, h, opts.config())
}

// DropSchema drops baton's tables, the generation sequence and
// baton_schema_migrations from the schema, when they exist, in one
// transaction: the down migration of MigrateUp. Their data is gone.
func DropSchema(ctx context.Context, db bun.IDB, opts SchemaOptions) error {
	h, err := open(db, "DropSchema")
	if err != nil {
		return err
	}
	return pgsql.DropSchema(ctx, h, opts.config())
}

// MigrateUp runs baton's migrations in the connection's current schema: a
// migrate.MigrationFunc for bun's migrator. Register it in your own
// migrations, in a file whose name gives it its place in your history
// (bun names a Go migration after its file):
//
//	// migrations/20260801120000_baton.go
//	func init() { Migrations.MustRegister(bunstore.MigrateUp, bunstore.MigrateDown) }
//
// It calls Migrate, so a later migration that calls it again applies the
// migrations a newer baton brings.
func MigrateUp(ctx context.Context, db *bun.DB) error {
	return Migrate(ctx, db, SchemaOptions{})
}

// MigrateDown drops baton's tables from the connection's current schema:
// the down half of MigrateUp.
func MigrateDown(ctx context.Context, db *bun.DB) error {
	return DropSchema(ctx, db, SchemaOptions{})
}
