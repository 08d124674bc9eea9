package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/cli"
)

// The bench's defaults and bounds.
const (
	defaultBenchDuration    = 10 * time.Second
	defaultBenchBatch       = 100
	defaultBenchConcurrency = 16
	defaultBenchProducers   = 4
	maxBenchCount           = 10_000_000
	maxBenchDuration        = 24 * time.Hour
	maxBenchProducers       = 256
)

// benchProgressEvery is how often the progress line is redrawn (on a
// terminal) or printed (elsewhere); the tests shorten it.
var benchProgressEvery = 2 * time.Second

// benchTargets are what "baton bench" runs: one system, or both.
var benchTargets = []string{"outbox", "workrows", "all"}

type benchFlags struct {
	url         string
	duration    time.Duration
	count       int
	batch       int
	concurrency int
	producers   int
	keep        bool
}

func newBenchCommand() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [outbox|workrows|all]",
		Short: "Measure the outbox relay and a work-row burn-down on a database, in a schema of their own",
		Long: `Run baton's own systems against a PostgreSQL database and print how fast they
go: the outbox relay (the real outbox driver, with a processor that only
acknowledges) and a work-row burn-down (a workrow.Worker whose handler only
completes each row). "outbox" or "workrows" runs one of them; "all", the
default, runs both, one after the other.

With --duration D (default 10s) each runs for D: producers enqueue outbox
entries (a business row and the entry in one transaction) while the relay
delivers them, and the latency of each entry from its commit to its delivery
is recorded; the work table is topped up so the worker never runs dry. With
--count N each works through a backlog of N entries or rows loaded before it
starts, until all are done.

A progress line (the total so far, the rate, the backlog) is redrawn every 2s
on a terminal, or printed as a line of its own elsewhere; each run ends with
its total, elapsed time, mean rate and, when recorded, the p50 and p99
latency.

It works in a schema of its own, baton_bench_<hex>, created at the start and
dropped at the end, also when interrupted (Ctrl-C); --keep keeps it. It
changes no server setting: its sessions set synchronous_commit=on for
themselves. For baton side by side with River, watermill-sql and redislock,
see the bench module (docs/performance.md).`,
		Example: `  baton bench --postgres postgres://postgres@127.0.0.1:5432/postgres
  baton bench outbox --duration 30s --batch 500 --producers 8
  baton bench workrows --count 200000 --concurrency 32`,
		ValidArgs: benchTargets,
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return cli.Usagef("%s takes at most one of outbox, workrows or all (got %d arguments)", cmd.CommandPath(), len(args))
			case len(args) == 1 && args[0] != "outbox" && args[0] != "workrows" && args[0] != "all":
				return cli.Usagef("%s %q: want outbox, workrows or all", cmd.CommandPath(), args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			target := "all"
			if len(args) == 1 {
				target = args[0]
			}
			plan, err := f.plan(cmd, target)
			if err != nil {
				return err
			}
			return ops.Bench(cmd.Context(), cmd.OutOrStdout(), plan)
		},
	}
	registerURL(cmd, &f.url)
	fl := cmd.Flags()
	fl.DurationVar(&f.duration, "duration", defaultBenchDuration, "run each system for this long, with the load kept up (not with --count)")
	fl.IntVar(&f.count, "count", 0, "instead of --duration: work through a backlog of this many entries or rows, loaded first")
	fl.IntVar(&f.batch, "batch", defaultBenchBatch, "entries the relay reads, and rows the worker claims, at a time")
	fl.IntVar(&f.concurrency, "concurrency", defaultBenchConcurrency, "handlers of the work-row worker")
	fl.IntVar(&f.producers, "producers", defaultBenchProducers, "goroutines enqueueing outbox entries during a --duration run")
	fl.BoolVar(&f.keep, "keep", false, "keep the bench's schema afterwards, to look at its tables")
	return cmd
}

// plan checks the command line, before anything connects: bad input writes
// nothing, not even the schema.
func (f *benchFlags) plan(cmd *cobra.Command, target string) (ops.BenchPlan, error) {
	changed := cmd.Flags().Changed
	p := ops.BenchPlan{
		URL: f.url, Outbox: target != "workrows", WorkRows: target != "outbox",
		Batch: f.batch, Concurrency: f.concurrency, Producers: f.producers, Keep: f.keep,
		ProgressEvery: benchProgressEvery,
	}
	switch {
	case changed("duration") && changed("count"):
		return p, cli.Usagef("--duration and --count: give one of them, a time to run for or a number of entries or rows to work through")
	case changed("count"):
		if f.count < 1 || f.count > maxBenchCount {
			return p, cli.Usagef("--count is %d; it must be between 1 and %d", f.count, maxBenchCount)
		}
		p.Bound.Count = f.count
	default:
		if f.duration <= 0 || f.duration > maxBenchDuration {
			return p, cli.Usagef("--duration is %v; it must be more than 0 and at most %v", f.duration, maxBenchDuration)
		}
		p.Bound.Duration = f.duration
	}
	switch {
	case p.WorkRows && (f.batch < 1 || f.batch > workrow.MaxBatchSize):
		return p, cli.Usagef("--batch is %d; the work-row worker claims between 1 and %d rows at a time", f.batch, workrow.MaxBatchSize)
	case p.Outbox && (f.batch < 1 || f.batch > outbox.MaxBatchSize):
		return p, cli.Usagef("--batch is %d; the relay reads between 1 and %d entries at a time", f.batch, outbox.MaxBatchSize)
	case changed("concurrency") && !p.WorkRows:
		return p, cli.Usagef("--concurrency sets the work-row worker's handlers; %s outbox runs no worker", cmd.CommandPath())
	case f.concurrency < 1 || f.concurrency > workrow.MaxConcurrency:
		return p, cli.Usagef("--concurrency is %d; it must be between 1 and %d", f.concurrency, workrow.MaxConcurrency)
	case changed("producers") && !p.Outbox:
		return p, cli.Usagef("--producers sets the goroutines enqueueing outbox entries; %s workrows enqueues none", cmd.CommandPath())
	case changed("producers") && p.Bound.Count > 0:
		return p, cli.Usagef("--producers applies to a --duration run; with --count the relay's backlog is loaded before it starts")
	case f.producers < 1 || f.producers > maxBenchProducers:
		return p, cli.Usagef("--producers is %d; it must be between 1 and %d", f.producers, maxBenchProducers)
	}
	return p, nil
}
