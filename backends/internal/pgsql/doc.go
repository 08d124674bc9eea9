// Package pgsql is baton's PostgreSQL backend written once: every
// statement of the lease, outbox, projection and work-row stores, the
// rendering of core/workrow's condition trees, the one mapping of
// SQLSTATEs to baton's errors, and the schema (the migration files, the
// shape they make, its verification and repair).
//
// It runs against a small seam, DB, Tx and Rows, with PostgreSQL's own
// $N parameters, and Session, a connection of its own for LISTEN. The two adapters implement the seam and nothing else of
// substance: backends/pgxstore over pgxpool and pgx.Tx, backends/bunstore
// over the database/sql handle under a bun.IDB, on pgx's database/sql
// driver. Both therefore send the same statements with the same values as
// real parameters, and a node of either kind can share every table with a
// node of the other.
package pgsql
