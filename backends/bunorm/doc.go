// Package bunorm is baton's PostgreSQL backend for services whose data layer
// is uptrace/bun: the same tables, the same statements and the same
// conformance suites as the pgx backend (backends/postgres), on bun.IDB, so
// every store works on a *bun.DB, a bun.Tx or a bun.Conn.
//
// # Schema
//
// Every baton table is a bun model (LockFence, RoleLease, OutboxEntry,
// OutboxState, OutboxDeadLetter, ProjectionHeader, ProjectionDetail; see
// Models). CreateSchema creates them through bun's CreateTable and adds
// what struct tags cannot say (checks, partial and descending indexes, the
// "C" collation, UNLOGGED, the generation sequence); it completes an
// existing schema rather than replaying a history. MigrateUp and
// MigrateDown are migrate.MigrationFuncs to register in the service's own
// bun migrations. The shape is the pgx backend's: a test compares the two
// catalogs object by object and runs postgres.VerifySchema on the bun one.
//
// # Stores
//
// LeaseStore (role leases; a release NOTIFYs, and WatchReleases listens
// on pgdriver or on pgx's stdlib driver), Enqueue and OutboxStore (the
// transactional outbox, in the caller's transaction), ProjectionStore
// (UNLOGGED, generation-swapped projections) and WorkRows (leased work rows
// on the application's own bun model, which embeds LockColumns). Work rows
// claim either with core's condition trees (workrow.Store, for
// workrow.Worker) or with bun query-builder functions (ClaimWith,
// FinalizeWith). Every driver error is mapped to core's sentinels in one
// function.
//
// bun writes arguments into the statement text (its placeholders, quoted
// by its dialect) instead of sending them as server-side parameters, so
// the server parses and plans each statement on every call; see
// docs/bun.md in the repository for what that costs next to pgx. Those
// quoted values are safe only with standard_conforming_strings on: every
// constructor and schema function checks the session and refuses it
// otherwise (ErrNonStandardStrings), and Enqueue, which runs on the
// caller's transaction, writes its values as escape strings that do not
// depend on the setting.
package bunorm
