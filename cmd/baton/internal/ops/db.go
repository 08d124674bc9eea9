package ops

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/internal/cli"
)

// Target is the database an operator command works on, and how it
// prints: the --postgres, --schema and --json flags every operator command
// shares.
type Target struct {
	// URL is the PostgreSQL URL; empty, BATON_DATABASE_URL.
	URL string
	// Schema holds baton's tables; empty, the connection's current schema.
	Schema string
	// JSON prints JSON instead of a table.
	JSON bool
}

// database is an open connection pool and the schema the command works in.
type database struct {
	pool   *pgxpool.Pool
	schema string
}

func (d *database) Close() { d.pool.Close() }

// table is the schema-qualified, quoted name of one of baton's tables.
func (d *database) table(name string) string {
	return pgx.Identifier{d.schema, name}.Sanitize()
}

// open connects and resolves the schema: --schema, or the connection's
// current schema. The schema must exist.
func (t Target) open(ctx context.Context) (*database, error) {
	db, err := t.connect(ctx)
	if err != nil {
		return nil, err
	}
	exists, err := SchemaExists(ctx, db.pool, db.schema)
	if err != nil {
		db.Close()
		return nil, err
	}
	if !exists {
		db.Close()
		return nil, cli.Usagef("schema %q does not exist; create baton's tables with: baton migrate --schema %s", db.schema, db.schema)
	}
	return db, nil
}

// connect is open for the commands that may create the schema: it need
// not exist yet.
func (t Target) connect(ctx context.Context) (*database, error) {
	pool, err := cli.OpenPool(ctx, t.URL, "--postgres")
	if err != nil {
		return nil, err
	}
	schema, err := resolveSchema(ctx, pool, t.Schema)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &database{pool: pool, schema: schema}, nil
}

// resolveSchema returns the --schema value, or the connection's current
// schema when it is empty.
func resolveSchema(ctx context.Context, pool *pgxpool.Pool, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	var current *string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&current); err != nil {
		return "", fmt.Errorf("find the connection's current schema: %w", err)
	}
	if current == nil {
		return "", cli.Usagef("the connection has no current schema (no schema in its search_path exists); pass --schema")
	}
	return *current, nil
}

// SchemaExists reports whether schema exists.
func SchemaExists(ctx context.Context, pool *pgxpool.Pool, schema string) (bool, error) {
	var exists bool
	err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)", schema).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look schema %q up: %w", schema, err)
	}
	return exists, nil
}

// requireTables fails with a usage error naming the first of tables that is
// missing from the schema, and says to migrate.
func (d *database) requireTables(ctx context.Context, tables ...string) error {
	for _, t := range tables {
		var found bool
		err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
			JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2)`, d.schema, t).Scan(&found)
		if err != nil {
			return fmt.Errorf("look table %s.%s up: %w", d.schema, t, err)
		}
		if !found {
			return cli.Usagef("schema %q has no %s table; create baton's tables with: baton migrate --schema %s", d.schema, t, d.schema)
		}
	}
	return nil
}

// MigrationRecord is one row of baton_schema_migrations.
type MigrationRecord struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"applied_at"`
}

// ReadMigrations lists the migrations recorded in the schema; none when the
// record table does not exist.
func ReadMigrations(ctx context.Context, pool *pgxpool.Pool, schema string) ([]MigrationRecord, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = 'baton_schema_migrations')`, schema).Scan(&exists); err != nil {
		return nil, fmt.Errorf("look baton_schema_migrations up: %w", err)
	}
	if !exists {
		return nil, nil
	}
	rows, err := pool.Query(ctx, "SELECT version, name, applied_at FROM "+
		pgx.Identifier{schema, "baton_schema_migrations"}.Sanitize()+" ORDER BY version")
	if err != nil {
		return nil, fmt.Errorf("read baton_schema_migrations: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MigrationRecord, error) {
		var m MigrationRecord
		err := r.Scan(&m.Version, &m.Name, &m.AppliedAt)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read baton_schema_migrations: %w", err)
	}
	return out, nil
}

// schemaNameError turns the store's invalid-schema-name error into a usage
// error about --schema.
func schemaNameError(err error) error {
	if errors.Is(err, pgxstore.ErrInvalidSchemaName) {
		return cli.Usagef("--schema: %v", err)
	}
	return err
}
