// Command profiles is a small HTTP service that uses baton the way a real one
// would, on PostgreSQL with pgx:
//
//   - creating or relabelling a profile writes the profile's row and its
//     graph engine entry (graph.init, graph.metadata) in one transaction;
//   - the outbox driver runs on every instance, and the one holding the
//     leader lock delivers the entries to the graph engine, in order;
//   - a maintenance loop runs on the holder of the role lease
//     "profiles-maintenance" only, gated by IsHeld every cycle;
//   - /maintenance is served by that holder from every instance, through the
//     holder proxy;
//   - the outbox admin API is mounted under /admin/outbox/ behind a bearer
//     token;
//   - every profile request carries a user's bearer token, and users reach
//     only their own profiles; the operator routes want the admin token;
//     tokens come from the environment only.
//
// Without an engine URL it delivers to a fake graph engine started in the
// process (graph/graphtest). The service itself is package service; this
// command wires it to PostgreSQL alone. See README.md in this directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/baton-go/baton/examples/profiles/service"
)

func main() {
	cfg, err := service.ParseConfig(flag.NewFlagSet("profiles", flag.ContinueOnError), os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profiles:", err)
		os.Exit(2)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := service.Run(ctx, cfg); err != nil {
		cfg.Logger.Error("profiles stopped", "err", err)
		os.Exit(1)
	}
}
