package demo

import (
	"context"
	"log/slog"
	"net"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/baton-go/baton/internal/cli"
)

// CommandOptions describe a command that runs the demo: the baton
// command's "demo", or one that keeps the instances' leases and locks on a
// service of its own (backends/etcd's).
type CommandOptions struct {
	// Use, Short, Long and Example are the command's name and help.
	Use, Short, Long, Example string
	// Redis offers --redis: Redis locks instead of PostgreSQL advisory
	// locks.
	Redis bool
	// Flags, if set, adds the command's own flags.
	Flags func(*pflag.FlagSet)
	// Coordination, if set, is called once the shared flags are checked. It
	// returns where the instances keep their leases and locks, and what to
	// call once the demo is over; a UsageError from it is bad input.
	Coordination func(ctx context.Context) (c Coordination, stop func(), err error)
}

// Command is a command that runs the demo with the flags every demo command
// has: --postgres, --keep, --seed, --json and --verbose, and --redis when
// offered. It returns cli.ErrChecksFailed when the verification fails.
func Command(opts CommandOptions) *cobra.Command {
	var (
		pgURL, redisAddr string
		keep, asJSON     bool
		verbose          bool
		seed             uint64
	)
	cmd := &cobra.Command{
		Use:     opts.Use,
		Short:   opts.Short,
		Long:    opts.Long,
		Example: opts.Example,
		Args:    cli.NoArgs,
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
			cfg := Config{Postgres: pgURL, Redis: redisAddr, Keep: keep, Seed: seed}
			if opts.Coordination != nil {
				c, stop, err := opts.Coordination(cmd.Context())
				if err != nil {
					return err
				}
				defer stop()
				cfg.Coordination = c
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if asJSON {
				cfg.Out = stderr // the narrative; the result goes to stdout
			} else {
				// On a terminal the progress line is redrawn with escape
				// sequences of the demo's own: the ui writes to the terminal
				// itself and neutralises the text it is given.
				cfg.Out, cfg.Terminal = cli.DetectTerminal(stdout)
			}
			if verbose {
				cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
			}
			res, err := Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				if err := cli.WriteJSON(stdout, res); err != nil {
					return err
				}
			}
			if !res.Passed {
				return cli.ErrChecksFailed
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pgURL, "postgres", "", "run on PostgreSQL at this URL, in a schema of its own")
	if opts.Redis {
		f.StringVar(&redisAddr, "redis", "", "with --postgres: use Redis locks at this host:port instead of advisory locks")
	}
	f.BoolVar(&keep, "keep", false, "with --postgres: keep the demo's schema afterwards (for baton outbox/leases to look at)")
	f.Uint64Var(&seed, "seed", 1, "seed of the scenario's random choices")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON on stdout (the narrative goes to stderr)")
	f.BoolVar(&verbose, "verbose", false, "log what baton's components log (leases, driver, processors) to stderr")
	if opts.Flags != nil {
		opts.Flags(f)
	}
	return cmd
}
