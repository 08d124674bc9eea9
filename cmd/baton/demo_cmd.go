package main

import (
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/baton-go/baton/internal/demo"

	"github.com/baton-go/baton/internal/cli"
)

func newDemoCommand() *cobra.Command {
	var (
		pgURL, redisAddr string
		keep, asJSON     bool
		verbose          bool
		seed             uint64
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run three instances of a small service and watch baton work",
		Long: `Run three instances of a small "profiles" service in this process and walk
through a fixed, seeded scenario:

  1. one holder of the role lease, and the 16 partitions spread over the instances;
  2. producers writing profile changes and outbox entries in one transaction
     (some rolled back), delivered in order on both standard lanes
     (graph.init, graph.metadata);
  3. the leader killed mid-run, without releasing anything, and another
     instance taking over within the lease and lock bounds (measured);
  4. the engine answering 503 for a while: one stuck notice, then recovery;
  5. a 409 parking an entry, requeued through the outbox admin API, delivered;
  6. a projection refresh from the engine's grants and local permission checks.

It ends with a verification computed from what the (fake) graph engine
received: delivered in (xid, id) order, nothing lost, nothing rolled back
delivered, failover within its bound. It exits 1 if any check fails.

With no flags it runs on memory stores and memory locks: no server needed,
about 5 seconds. Durations are shortened for the demo (leases of 2s instead
of 15s, ...); the output says which.

With --postgres URL it runs the same scenario on PostgreSQL, in a schema of its
own (baton_demo_<hex>, created, migrated and dropped afterwards unless --keep),
with advisory locks, or Redis locks with --redis ADDR. The kill then ends the
instance's database sessions for real.

On a terminal a progress line (deliveries per second, parked entries, the
current leader) is redrawn in place; otherwise progress is logged. Ctrl-C stops
the demo cleanly.`,
		Example: `  baton demo
  baton demo --postgres postgres://postgres@127.0.0.1:5432/postgres
  baton demo --postgres postgres://postgres@127.0.0.1:5432/postgres --redis 127.0.0.1:6379 --keep`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if redisAddr != "" && pgURL == "" {
				return cli.Usagef("--redis needs --postgres: the memory demo uses memory locks")
			}
			if keep && pgURL == "" {
				return cli.Usagef("--keep needs --postgres: it keeps the demo's PostgreSQL schema")
			}
			if redisAddr != "" {
				if _, _, err := net.SplitHostPort(redisAddr); err != nil {
					return cli.Usagef("--redis %q: want host:port, e.g. 127.0.0.1:6379", redisAddr)
				}
			}
			if pgURL != "" && !strings.Contains(pgURL, "://") && !strings.Contains(pgURL, "=") {
				// The value is not shown: it may be a password pasted in the wrong place.
				return cli.Usagef("--postgres: want a URL such as postgres://user@host:5432/db, or keywords such as \"host=db dbname=app\"")
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			opts := demo.Config{Postgres: pgURL, Redis: redisAddr, Keep: keep, Seed: seed}
			if asJSON {
				opts.Out = stderr // the narrative; the result goes to stdout
			} else {
				// On a terminal the progress line is redrawn with escape
				// sequences of the demo's own: the ui writes to the terminal
				// itself and neutralises the text it is given.
				if raw := unwrapWriter(stdout); isTerminal(raw) {
					opts.Out, opts.TTY = raw, true
				} else {
					opts.Out = stdout
				}
			}
			if verbose {
				opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			}
			res, err := demo.Run(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(stdout, res); err != nil {
					return err
				}
			}
			if !res.Passed {
				return errChecksFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pgURL, "postgres", "", "run on PostgreSQL at this URL, in a schema of its own")
	f.StringVar(&redisAddr, "redis", "", "with --postgres: use Redis locks at this host:port instead of advisory locks")
	f.BoolVar(&keep, "keep", false, "with --postgres: keep the demo's schema afterwards (for baton outbox/leases to look at)")
	f.Uint64Var(&seed, "seed", 1, "seed of the scenario's random choices")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON on stdout (the narrative goes to stderr)")
	f.BoolVar(&verbose, "verbose", false, "log what baton's components log (leases, driver, processors) to stderr")
	return cmd
}

// isTerminal reports whether w is a terminal, where the progress line is
// redrawn in place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// unwrapWriter returns the writer under a printable.Writer, or w.
func unwrapWriter(w io.Writer) io.Writer {
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		return u.Unwrap()
	}
	return w
}
