// Command baton shows baton at work in one command, and lets an operator
// inspect and repair a running outbox without writing SQL.
//
//	baton demo                          three instances of a small service, in memory, no server needed
//	baton demo --postgres URL           the same scenario on PostgreSQL, in a schema of its own
//	baton demo --postgres URL --redis ADDR   ... with Redis locks instead of advisory locks
//	baton schema print                  baton's schema as one SQL script
//	baton migrate                       create or update baton's tables
//	baton verify                        check that the tables have the shape this binary expects, and say what fixes them
//	baton outbox status                 the outbox's health stamps
//	baton outbox dead list|show|requeue dead letters: list (by lane and state), show one, requeue one or many
//	baton leases                        every role lease: holder, address, token, expiry
//	baton bench [outbox|workrows|all]   the outbox relay and a work-row burn-down on a database, measured
//
// The operator commands take --postgres URL (or BATON_DATABASE_URL) and
// --schema (default: the connection's current schema), print a table, or
// JSON with --json. bench takes --postgres only: it works in a schema of
// its own, which it drops at the end.
//
// Progress lines (the demo's, bench's) fit the terminal: redrawn in place
// on one, cut to its width, without colour when NO_COLOR is set; plain
// lines cut to COLUMNS (default 80) when the output is not a terminal.
//
// Exit status: 0 on success; 1 on a failure (a failed demo check, an
// unreachable server, a schema that does not match); 2 on bad input (a flag,
// a URL, an id, a schema without baton's tables), with one line saying what
// is wrong; 130 when interrupted.
//
// # Why cobra
//
// The command tree is built with github.com/spf13/cobra. It is the library
// kubectl, gh, hugo and the Docker CLI are built with, so `baton help`,
// `--help` on every command, POSIX-style flags (through spf13/pflag) and
// nested commands such as `outbox dead requeue` behave the way Go users
// already expect, and the dependency is small and actively maintained. The
// standard library's flag package has no subcommands; writing them by hand
// would mean writing help and error handling that cobra already gets right.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
