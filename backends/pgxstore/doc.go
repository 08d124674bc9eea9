// Package pgxstore holds baton's PostgreSQL backend: the pgx v5 stores that
// implement baton's core interfaces, and the schema of the tables they use.
//
// The stores: LeaseStore (role leases, with NOTIFY on release),
// OutboxStore and Enqueue (the transactional outbox, on the caller's
// transaction), ProjectionStore (UNLOGGED, generation-swapped projections)
// and WorkRows (leased work rows on the application's own tables). Each
// maps driver errors to core's sentinel errors in one place.
//
// # Schema
//
// The package owns the shape of baton's tables. The shape is written down
// twice, on purpose: as versioned migrations (plain .sql files embedded in
// the binary, see Migrations) and as a description in Go that VerifySchema
// compares with the database catalog. A test migrates a fresh schema and
// requires the two to agree, so neither can drift from the other.
//
// There are three ways to create the tables:
//
//   - Migrate, at process start: every node may call it; the calls serialize
//     on an advisory lock and all pending migrations run in one transaction.
//   - An external migration tool: the files returned by Migrations are valid
//     for both goose and golang-migrate.
//   - SchemaSQL: the whole DDL as one script, for psql or review.
//
// VerifySchema is read-only and suits a readiness check: it reports every
// difference between the database and what this version of baton expects.
// See docs/schema.md in the repository for the details.
package pgxstore
