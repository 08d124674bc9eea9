// Package ops holds what baton's operator commands do once their flags are
// read: migrate, verify and show baton's schema, inspect and repair the
// outbox (its health, dead letters, rebase, the replication slot), list the
// role leases, and run the bench. Each works on one schema given by a
// Target and prints a table, or JSON.
//
// The command tree, the flags and their checks are cmd/baton's package
// main; nothing here knows a flag other than by the name it says in a
// message.
package ops
