package postgres

// This file describes the shape of baton's tables after the latest migration,
// as VerifySchema checks it. When a migration adds or changes a table, change
// the description here in the same commit; the schema tests migrate a fresh
// schema and fail until the two agree in both directions.

// tableShape is one expected table.
type tableShape struct {
	Name    string
	Columns []columnShape
	Indexes []indexShape
}

// columnShape is one expected column. Type is spelled as PostgreSQL's
// format_type prints it ("bigint", "timestamp with time zone", ...).
type columnShape struct {
	Name    string
	Type    string
	NotNull bool
}

// indexShape is one expected index, by name. Columns are the key columns in
// order (expressions as pg_get_indexdef prints them). A primary key or unique
// constraint is listed as the index that backs it.
type indexShape struct {
	Name    string
	Columns []string
	Unique  bool
}

// expectedShape is every table the migrations create, except the version
// table baton_schema_migrations, which is Migrate's bookkeeping and absent
// when an external tool runs the migrations.
var expectedShape = []tableShape{
	{ // 0001_lock_fences
		Name: "baton_lock_fences",
		Columns: []columnShape{
			{Name: "name", Type: "text", NotNull: true},
			{Name: "token", Type: "bigint", NotNull: true},
			{Name: "updated_at", Type: "timestamp with time zone", NotNull: true},
		},
		Indexes: []indexShape{
			{Name: "baton_lock_fences_pkey", Columns: []string{"name"}, Unique: true},
		},
	},
	{ // 0002_role_leases
		Name: "baton_role_leases",
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
			{Name: "baton_role_leases_pkey", Columns: []string{"role"}, Unique: true},
		},
	},
}
