package bunorm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
)

// SchemaOptions configure CreateSchema and DropSchema. The zero value uses
// the defaults.
type SchemaOptions struct {
	// Schema receives baton's tables; it is created when missing. Empty
	// means the connection's current schema: the first existing schema of
	// its search_path.
	Schema string
	// Logger receives one Info record per table created and per column,
	// check or index added. nil discards them.
	Logger *slog.Logger
}

func (o *SchemaOptions) validate(field string) error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Schema != "" {
		return validateSchemaName(field, o.Schema)
	}
	return nil
}

// tableSpec is what CreateSchema makes of one model: the bun model, and
// what its struct tags cannot say.
type tableSpec struct {
	model    any
	name     string
	checks   []check
	collateC []string // text columns compared bytewise: COLLATE "C"
	unlogged bool
	indexes  []index
	// sequence is created before the table (a column default names it) and
	// owned by sequenceOwner afterwards.
	sequence, sequenceOwner string
}

type check struct{ name, expr string }

type index struct {
	name    string
	unique  bool
	columns []string // each may end in " DESC"
	where   string
}

// generationSequence numbers projection generations. It is an ordinary,
// logged sequence, so generation numbers never repeat, even after a crash
// empties the UNLOGGED tables.
const generationSequence = "baton_projection_generation"

// shape is baton's schema as CreateSchema builds it, in creation order. It
// is the shape of the PostgreSQL adapter's migrations; the schema tests
// compare the two catalogs object by object.
var shape = []tableSpec{
	{
		model: (*LockFence)(nil), name: LockFencesTable,
		checks: []check{{"baton_lock_fences_name_check", "length(name) BETWEEN 1 AND 128"}},
	},
	{
		model: (*RoleLease)(nil), name: LeaseTable,
		checks: []check{{"baton_role_leases_role_check", "octet_length(role) BETWEEN 1 AND 128"}},
	},
	{
		model: (*OutboxEntry)(nil), name: OutboxTable,
		checks:  []check{{"baton_outbox_lane_check", "octet_length(lane) BETWEEN 1 AND 128"}},
		indexes: []index{{name: "baton_outbox_walk", columns: []string{"xid", "id"}}},
	},
	{model: (*OutboxState)(nil), name: OutboxStateTable},
	{
		model: (*OutboxDeadLetter)(nil), name: OutboxDeadTable,
		checks: []check{{"baton_outbox_dead_check", "(requeued_as IS NULL) = (requeued_at IS NULL)"}},
		indexes: []index{
			{name: "baton_outbox_dead_parked", columns: []string{"parked_at DESC", "id"}},
			{name: "baton_outbox_dead_requeued", columns: []string{"requeued_at"}, where: "requeued_as IS NOT NULL"},
		},
	},
	{
		model: (*ProjectionHeader)(nil), name: ProjectionHeaderTable, unlogged: true,
		sequence: generationSequence, sequenceOwner: "generation",
		checks: []check{
			{"baton_projection_header_subject_type_check", "octet_length(subject_type) BETWEEN 1 AND 128"},
			{"baton_projection_header_subject_id_check", "octet_length(subject_id) BETWEEN 1 AND 256"},
		},
		collateC: []string{"subject_type", "subject_id"},
		indexes: []index{
			{name: "baton_projection_header_active", unique: true, columns: []string{"subject_type", "subject_id"}, where: "active"},
			{name: "baton_projection_header_superseded", columns: []string{"generation"}, where: "NOT active"},
		},
	},
	{
		model: (*ProjectionDetail)(nil), name: ProjectionDetailTable, unlogged: true,
		collateC: []string{"resource_type", "resource_id"},
	},
}

// CreateSchema brings baton's tables in the schema to the shape this
// version of baton expects, in one transaction (a savepoint when db is a
// bun.Tx): it creates what is missing (tables through bun's CreateTable on
// the models, then the columns, checks and indexes a table lacks) and
// leaves what exists alone. Run it from a migration of your own (see
// MigrateUp); calling it again, now or after upgrading baton, computes the
// difference against the database as it is, never against a remembered
// history.
//
// Concurrent callers on one schema run one after another: each takes a
// transaction-scoped advisory lock on the schema, the same one the
// PostgreSQL adapter's Migrate takes, so a bun node and a pgx node
// starting together do not race either.
func CreateSchema(ctx context.Context, db bun.IDB, opts SchemaOptions) error {
	if db == nil {
		return errors.New("baton/bunorm: CreateSchema: the database handle is nil")
	}
	if err := opts.validate("SchemaOptions.Schema"); err != nil {
		return err
	}
	return inSchema(ctx, db, opts.Schema, true, func(ctx context.Context, tx bun.Tx, schemaName string) error {
		for _, t := range shape {
			if err := createTable(ctx, tx, schemaName, t, opts.Logger); err != nil {
				return mapError(areaSchema, fmt.Sprintf("create %s in schema %q", t.name, schemaName), err)
			}
		}
		return nil
	})
}

// DropSchema drops baton's tables (and the generation sequence) from the
// schema, when they exist, in one transaction: the down migration of
// MigrateUp. Their data is gone.
func DropSchema(ctx context.Context, db bun.IDB, opts SchemaOptions) error {
	if db == nil {
		return errors.New("baton/bunorm: DropSchema: the database handle is nil")
	}
	if err := opts.validate("SchemaOptions.Schema"); err != nil {
		return err
	}
	return inSchema(ctx, db, opts.Schema, false, func(ctx context.Context, tx bun.Tx, schemaName string) error {
		for i := len(shape) - 1; i >= 0; i-- {
			t := shape[i]
			if _, err := tx.NewDropTable().Model(t.model).IfExists().Exec(ctx); err != nil {
				return mapError(areaSchema, "drop "+t.name, err)
			}
			opts.Logger.InfoContext(ctx, "baton: dropped table", "schema", schemaName, "table", t.name)
		}
		if _, err := tx.NewRaw("DROP SEQUENCE IF EXISTS ?", bun.Name(generationSequence)).Exec(ctx); err != nil {
			return mapError(areaSchema, "drop "+generationSequence, err)
		}
		return nil
	})
}

// MigrateUp creates baton's tables in the connection's current schema: a
// migrate.MigrationFunc for bun's migrator. Register it in your own
// migrations, in a file whose name gives it its place in your history
// (bun names a Go migration after its file):
//
//	// migrations/20260801120000_baton.go
//	func init() { Migrations.MustRegister(bunorm.MigrateUp, bunorm.MigrateDown) }
//
// It calls CreateSchema, so a later migration that calls it again brings
// the tables up to a newer baton's shape.
func MigrateUp(ctx context.Context, db *bun.DB) error {
	return CreateSchema(ctx, db, SchemaOptions{})
}

// MigrateDown drops baton's tables from the connection's current schema: the
// down half of MigrateUp.
func MigrateDown(ctx context.Context, db *bun.DB) error {
	return DropSchema(ctx, db, SchemaOptions{})
}

// inSchema runs fn in a transaction (a savepoint inside one) with the
// schema's advisory lock held and search_path pointing at the schema, and
// puts search_path back afterwards, so a caller's own transaction is left
// as it was.
func inSchema(ctx context.Context, db bun.IDB, schemaName string, create bool, fn func(ctx context.Context, tx bun.Tx, schemaName string) error) error {
	return db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
		if err := checkSession(ctx, tx, "schema"); err != nil {
			return err
		}
		if schemaName == "" {
			var current sql.NullString
			if err := tx.NewRaw("SELECT current_schema()").Scan(ctx, &current); err != nil {
				return mapError(areaSchema, "find the current schema", err)
			}
			if !current.Valid {
				return errors.New("baton/bunorm: SchemaOptions.Schema is empty, which means the current schema, but the connection has none: no schema in its search_path exists; create one or set SchemaOptions.Schema")
			}
			if err := validateSchemaName("the current schema", current.String); err != nil {
				return err
			}
			schemaName = current.String
		}
		if _, err := tx.NewRaw("SELECT pg_advisory_xact_lock(?)", schemaLockKey(schemaName)).Exec(ctx); err != nil {
			return mapError(areaSchema, fmt.Sprintf("take the lock of schema %q", schemaName), err)
		}
		var exists bool
		if err := tx.NewRaw("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = ?)", schemaName).Scan(ctx, &exists); err != nil {
			return mapError(areaSchema, fmt.Sprintf("look schema %q up", schemaName), err)
		}
		if !exists {
			if !create {
				return nil
			}
			// Checked first: CREATE SCHEMA IF NOT EXISTS demands the
			// CREATE privilege on the database even when the schema exists.
			if _, err := tx.NewRaw("CREATE SCHEMA IF NOT EXISTS ?", bun.Name(schemaName)).Exec(ctx); err != nil {
				return mapError(areaSchema, fmt.Sprintf("create schema %q", schemaName), err)
			}
		}
		var saved string
		if err := tx.NewRaw("SELECT current_setting('search_path')").Scan(ctx, &saved); err != nil {
			return mapError(areaSchema, "read search_path", err)
		}
		if _, err := tx.NewRaw("SELECT set_config('search_path', ?, true)", quoteName(schemaName)).Exec(ctx); err != nil {
			return mapError(areaSchema, "set search_path", err)
		}
		if err := fn(ctx, tx, schemaName); err != nil {
			return err
		}
		if _, err := tx.NewRaw("SELECT set_config('search_path', ?, true)", saved).Exec(ctx); err != nil {
			return mapError(areaSchema, "restore search_path", err)
		}
		return nil
	})
}

// quoteName quotes one identifier for search_path.
func quoteName(name string) string {
	b := []byte{'"'}
	for i := 0; i < len(name); i++ {
		if name[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, name[i])
	}
	return string(append(b, '"'))
}

// schemaLockKey serializes schema changes on one schema: the PostgreSQL
// adapter's Migrate key (pgsql.MigrationLockKey), so both adapters'
// schema changes exclude each other.
func schemaLockKey(schemaName string) int64 { return pgsql.MigrationLockKey(schemaName) }

// createTable creates one table of the shape, or completes it. search_path
// points at schemaName.
func createTable(ctx context.Context, tx bun.Tx, schemaName string, t tableSpec, log *slog.Logger) error {
	exists, err := relationExists(ctx, tx, schemaName, t.name)
	if err != nil {
		return err
	}
	if t.sequence != "" {
		if _, err := tx.NewRaw("CREATE SEQUENCE IF NOT EXISTS ? AS bigint", bun.Name(t.sequence)).Exec(ctx); err != nil {
			return err
		}
	}
	if !exists {
		q := tx.NewCreateTable().Model(t.model)
		for _, c := range t.checks {
			q = q.ColumnExpr("CONSTRAINT ? CHECK ("+c.expr+")", bun.Name(c.name))
		}
		if _, err := q.Exec(ctx); err != nil {
			return err
		}
		for _, col := range t.collateC {
			if _, err := tx.NewRaw(`ALTER TABLE ? ALTER COLUMN ? TYPE text COLLATE "C"`, bun.Name(t.name), bun.Name(col)).Exec(ctx); err != nil {
				return err
			}
		}
		if t.unlogged {
			// Before the sequence becomes the table's: SET UNLOGGED would
			// take an owned sequence along, and the generation numbers
			// must survive a crash.
			if _, err := tx.NewRaw("ALTER TABLE ? SET UNLOGGED", bun.Name(t.name)).Exec(ctx); err != nil {
				return err
			}
		}
		if t.sequence != "" {
			if _, err := tx.NewRaw("ALTER SEQUENCE ? OWNED BY ?.?", bun.Name(t.sequence), bun.Name(t.name), bun.Name(t.sequenceOwner)).Exec(ctx); err != nil {
				return err
			}
		}
		log.InfoContext(ctx, "baton: created table", "schema", schemaName, "table", t.name)
	} else {
		if err := completeTable(ctx, tx, schemaName, t, log); err != nil {
			return err
		}
	}
	for _, ix := range t.indexes {
		q := tx.NewCreateIndex().Model(t.model).Index(ix.name).IfNotExists()
		if ix.unique {
			q = q.Unique()
		}
		for _, c := range ix.columns {
			name, desc := c, ""
			if n := len(c) - len(" DESC"); n > 0 && c[n:] == " DESC" {
				name, desc = c[:n], " DESC"
			}
			q = q.ColumnExpr("?"+desc, bun.Ident(name))
		}
		if ix.where != "" {
			q = q.Where(ix.where)
		}
		if _, err := q.Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// completeTable adds the columns and checks an existing table lacks.
func completeTable(ctx context.Context, tx bun.Tx, schemaName string, t tableSpec, log *slog.Logger) error {
	var have []string
	if err := tx.NewRaw(`SELECT a.attname FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ? AND c.relname = ? AND a.attnum > 0 AND NOT a.attisdropped`, schemaName, t.name).Scan(ctx, &have); err != nil {
		return err
	}
	present := make(map[string]bool, len(have))
	for _, c := range have {
		present[c] = true
	}
	table := tx.Dialect().Tables().Get(reflect.TypeOf(t.model).Elem())
	for _, f := range table.Fields {
		if present[f.Name] {
			continue
		}
		def := "? " + f.CreateTableSQLType
		if f.NotNull {
			def += " NOT NULL"
		}
		if f.SQLDefault != "" {
			def += " DEFAULT " + f.SQLDefault
		}
		if _, err := tx.NewAddColumn().Model(t.model).ColumnExpr(def, bun.Ident(f.Name)).IfNotExists().Exec(ctx); err != nil {
			return err
		}
		for _, col := range t.collateC {
			if col == f.Name {
				if _, err := tx.NewRaw(`ALTER TABLE ? ALTER COLUMN ? TYPE text COLLATE "C"`, bun.Name(t.name), bun.Name(col)).Exec(ctx); err != nil {
					return err
				}
			}
		}
		log.InfoContext(ctx, "baton: added column", "schema", schemaName, "table", t.name, "column", f.Name)
	}
	for _, c := range t.checks {
		var exists bool
		if err := tx.NewRaw(`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k
JOIN pg_catalog.pg_class c ON c.oid = k.conrelid
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ? AND c.relname = ? AND k.conname = ?)`, schemaName, t.name, c.name).Scan(ctx, &exists); err != nil {
			return err
		}
		if exists {
			continue
		}
		if _, err := tx.NewRaw("ALTER TABLE ? ADD CONSTRAINT ? CHECK ("+c.expr+")", bun.Name(t.name), bun.Name(c.name)).Exec(ctx); err != nil {
			return err
		}
		log.InfoContext(ctx, "baton: added check", "schema", schemaName, "table", t.name, "check", c.name)
	}
	return nil
}

func relationExists(ctx context.Context, tx bun.Tx, schemaName, name string) (bool, error) {
	var exists bool
	err := tx.NewRaw(`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = ? AND c.relname = ?)`, schemaName, name).Scan(ctx, &exists)
	return exists, err
}
