package pgsql

// This file describes the shape of baton's tables after the latest migration,
// as VerifySchema checks it. When a migration adds or changes a table, change
// the description here in the same commit; the schema tests migrate a fresh
// schema and fail until the two agree in both directions.

// The names of baton's tables and of the generation sequence, which the
// adapters export.
const (
	LockFencesTable       = "baton_lock_fences"
	LeaseTable            = "baton_role_leases"
	OutboxTable           = "baton_outbox"
	OutboxStateTable      = "baton_outbox_state"
	OutboxDeadTable       = "baton_outbox_dead"
	ProjectionHeaderTable = "baton_projection_header"
	ProjectionDetailTable = "baton_projection_detail"
	// ProjectionGenerationSequence numbers the generations: an ordinary,
	// logged sequence (numbers never repeat) with a cache of 1, so a number
	// drawn later on any session is larger.
	ProjectionGenerationSequence = "baton_projection_generation"
)

// tableShape is one expected table. Unlogged is set for a table created
// UNLOGGED (not WAL-logged, emptied by a crash restart): VerifySchema
// reports a table whose persistence differs either way.
type tableShape struct {
	Name     string
	Version  int // of the migration that creates it
	Columns  []columnShape
	Indexes  []indexShape
	Unlogged bool
}

// columnShape is one expected column. Type is spelled as PostgreSQL's
// format_type prints it ("bigint", "timestamp with time zone", ...).
// Version is set on a column a later migration added to its table (ALTER
// TABLE ... ADD COLUMN): the migration that adds it, which Migrate's
// adoption of an unrecorded schema looks for.
type columnShape struct {
	Name    string
	Type    string
	NotNull bool
	Version int
}

// indexShape is one expected index, by name. Columns are the key columns in
// order (expressions as pg_get_indexdef prints them), each followed by
// " DESC" when the index sorts it descending. A primary key or unique
// constraint is listed as the index that backs it. Predicate is a partial
// index's WHERE clause as pg_get_expr prints it, "" for a full index: a
// statement that relies on a partial index is only served by one with the
// same predicate.
type indexShape struct {
	Name      string
	Columns   []string
	Unique    bool
	Predicate string
	Primary   bool // the index of the primary key
}

// expectedShape is every table the migrations create, except the version
// table baton_schema_migrations, which is Migrate's bookkeeping and absent
// when an external tool runs the migrations.
var expectedShape = []tableShape{
	{ // 0001_lock_fences
		Name:    "baton_lock_fences",
		Version: 1,
		Columns: []columnShape{
			{Name: "name", Type: "text", NotNull: true},
			{Name: "token", Type: "bigint", NotNull: true},
			{Name: "updated_at", Type: "timestamp with time zone", NotNull: true},
		},
		Indexes: []indexShape{
			{Name: "baton_lock_fences_pkey", Columns: []string{"name"}, Unique: true, Primary: true},
		},
	},
	{ // 0002_role_leases
		Name:    "baton_role_leases",
		Version: 2,
		Columns: []columnShape{
			{Name: "role", Type: "text", NotNull: true},
			{Name: "holder", Type: "text", NotNull: true},
			{Name: "holder_address", Type: "text", NotNull: true},
			{Name: "token", Type: "bigint", NotNull: true},
			{Name: "acquired_at", Type: "timestamp with time zone", NotNull: true},
			{Name: "renewed_at", Type: "timestamp with time zone", NotNull: true},
			{Name: "expires_at", Type: "timestamp with time zone", NotNull: true},
		},
		Indexes: []indexShape{
			{Name: "baton_role_leases_pkey", Columns: []string{"role"}, Unique: true, Primary: true},
		},
	},
	{ // 0003_outbox
		Name:    "baton_outbox",
		Version: 3,
		Columns: []columnShape{
			{Name: "xid", Type: "xid8", NotNull: true},
			{Name: "id", Type: "uuid", NotNull: true},
			{Name: "lane", Type: "text", NotNull: true},
			{Name: "payload", Type: "jsonb", NotNull: true},
			{Name: "created_at", Type: "timestamp with time zone", NotNull: true},
			{Name: "trace_context", Type: "text", Version: 5}, // 0005_outbox_trace_context
		},
		Indexes: []indexShape{
			{Name: "baton_outbox_pkey", Columns: []string{"id"}, Unique: true, Primary: true},
			{Name: "baton_outbox_walk", Columns: []string{"xid", "id"}},
		},
	},
	{ // 0003_outbox
		Name:    "baton_outbox_state",
		Version: 3,
		Columns: []columnShape{
			{Name: "key", Type: "text", NotNull: true},
			{Name: "value", Type: "text"},
		},
		Indexes: []indexShape{
			{Name: "baton_outbox_state_pkey", Columns: []string{"key"}, Unique: true, Primary: true},
		},
	},
	{ // 0003_outbox
		Name:    "baton_outbox_dead",
		Version: 3,
		Columns: []columnShape{
			{Name: "id", Type: "uuid", NotNull: true},
			{Name: "xid", Type: "xid8", NotNull: true},
			{Name: "lane", Type: "text", NotNull: true},
			{Name: "payload", Type: "jsonb", NotNull: true},
			{Name: "error", Type: "text", NotNull: true},
			{Name: "parked_at", Type: "timestamp with time zone", NotNull: true},
			{Name: "requeued_as", Type: "uuid"},
			{Name: "requeued_at", Type: "timestamp with time zone"},
			{Name: "trace_context", Type: "text", Version: 5}, // 0005_outbox_trace_context
		},
		Indexes: []indexShape{
			{Name: "baton_outbox_dead_pkey", Columns: []string{"id"}, Unique: true, Primary: true},
			{Name: "baton_outbox_dead_parked", Columns: []string{"parked_at DESC", "id"}},
			{Name: "baton_outbox_dead_requeued", Columns: []string{"requeued_at"}, Predicate: "requeued_as IS NOT NULL"},
		},
	},
	{ // 0004_projections
		Name:     "baton_projection_header",
		Version:  4,
		Unlogged: true,
		Columns: []columnShape{
			{Name: "generation", Type: "bigint", NotNull: true},
			{Name: "subject_type", Type: "text", NotNull: true},
			{Name: "subject_id", Type: "text", NotNull: true},
			{Name: "active", Type: "boolean", NotNull: true},
			{Name: "created_at", Type: "timestamp with time zone", NotNull: true},
		},
		Indexes: []indexShape{
			{Name: "baton_projection_header_pkey", Columns: []string{"generation"}, Unique: true, Primary: true},
			{Name: "baton_projection_header_active", Columns: []string{"subject_type", "subject_id"}, Unique: true, Predicate: "active"},
			{Name: "baton_projection_header_superseded", Columns: []string{"generation"}, Predicate: "NOT active"},
		},
	},
	{ // 0004_projections
		Name:     "baton_projection_detail",
		Version:  4,
		Unlogged: true,
		Columns: []columnShape{
			{Name: "generation", Type: "bigint", NotNull: true},
			{Name: "resource_type", Type: "text", NotNull: true},
			{Name: "resource_id", Type: "text", NotNull: true},
			{Name: "mask", Type: "bigint", NotNull: true},
		},
		Indexes: []indexShape{
			{Name: "baton_projection_detail_pkey", Columns: []string{"generation", "resource_type", "resource_id"}, Unique: true, Primary: true},
		},
	},
}
