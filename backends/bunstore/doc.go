// Package bunstore is baton's PostgreSQL backend for services whose data layer
// is uptrace/bun: the pgx backend's tables, statements, migrations and
// errors (both adapters run backends/internal/pgsql), on a bun.IDB, so every
// store works on a *bun.DB, a bun.Tx or a bun.Conn, and a bun node and a pgx
// node can share every table.
//
// bun must run on pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib):
// baton's statements go to the database/sql handle under the bun.IDB with
// their values as parameters, and the lease watcher LISTENs on pgx's
// connection. A handle on another driver is refused (ErrUnsupportedDriver).
//
// # Schema
//
// Migrate runs the migration files, recording them in
// baton_schema_migrations as the pgx adapter does; MigrateUp and
// MigrateDown are migrate.MigrationFuncs to register in the service's own
// bun migrations. A schema this package made from its models before is
// adopted. Every baton table is also a bun model (LockFence, RoleLease,
// OutboxEntry, OutboxState, OutboxDeadLetter, ProjectionHeader,
// ProjectionDetail; see Models), for services that read them with bun.
//
// # Stores
//
// LeaseStore (role leases; a release NOTIFYs, and WatchReleases listens),
// Enqueue and OutboxStore (the transactional outbox, in the caller's
// transaction), ProjectionStore (UNLOGGED, generation-swapped projections)
// and WorkRows (leased work rows on the application's own bun model, which
// embeds LockColumns). Work rows claim either with core's condition trees
// (workrow.Store, for workrow.Worker) or with bun query-builder functions
// (ClaimWith, FinalizeWith), whose values bun writes into the statement as
// quoted literals: safe only with standard_conforming_strings on, which
// every constructor checks (ErrNonStandardStrings).
package bunstore
