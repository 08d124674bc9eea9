package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/benchkit"
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
	// benchCleanupTimeout bounds dropping the schema at the end, which runs
	// also after Ctrl-C.
	benchCleanupTimeout = 30 * time.Second
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

// benchPlan is what a valid command line asks for.
type benchPlan struct {
	outbox, workrows bool
	bound            benchkit.Bound
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
			return runBench(cmd.Context(), cmd.OutOrStdout(), &f, plan)
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
func (f *benchFlags) plan(cmd *cobra.Command, target string) (benchPlan, error) {
	changed := cmd.Flags().Changed
	p := benchPlan{outbox: target != "workrows", workrows: target != "outbox"}
	switch {
	case changed("duration") && changed("count"):
		return p, cli.Usagef("--duration and --count: give one of them, a time to run for or a number of entries or rows to work through")
	case changed("count"):
		if f.count < 1 || f.count > maxBenchCount {
			return p, cli.Usagef("--count is %d; it must be between 1 and %d", f.count, maxBenchCount)
		}
		p.bound.Count = f.count
	default:
		if f.duration <= 0 || f.duration > maxBenchDuration {
			return p, cli.Usagef("--duration is %v; it must be more than 0 and at most %v", f.duration, maxBenchDuration)
		}
		p.bound.Duration = f.duration
	}
	switch {
	case p.workrows && (f.batch < 1 || f.batch > workrow.MaxBatchSize):
		return p, cli.Usagef("--batch is %d; the work-row worker claims between 1 and %d rows at a time", f.batch, workrow.MaxBatchSize)
	case p.outbox && (f.batch < 1 || f.batch > outbox.MaxBatchSize):
		return p, cli.Usagef("--batch is %d; the relay reads between 1 and %d entries at a time", f.batch, outbox.MaxBatchSize)
	case changed("concurrency") && !p.workrows:
		return p, cli.Usagef("--concurrency sets the work-row worker's handlers; %s outbox runs no worker", cmd.CommandPath())
	case f.concurrency < 1 || f.concurrency > workrow.MaxConcurrency:
		return p, cli.Usagef("--concurrency is %d; it must be between 1 and %d", f.concurrency, workrow.MaxConcurrency)
	case changed("producers") && !p.outbox:
		return p, cli.Usagef("--producers sets the goroutines enqueueing outbox entries; %s workrows enqueues none", cmd.CommandPath())
	case changed("producers") && p.bound.Count > 0:
		return p, cli.Usagef("--producers applies to a --duration run; with --count the relay's backlog is loaded before it starts")
	case f.producers < 1 || f.producers > maxBenchProducers:
		return p, cli.Usagef("--producers is %d; it must be between 1 and %d", f.producers, maxBenchProducers)
	}
	return p, nil
}

func runBench(ctx context.Context, out io.Writer, f *benchFlags, p benchPlan) (err error) {
	admin, err := cli.OpenPool(ctx, f.url, "--postgres")
	if err != nil {
		return err
	}
	conn := admin.Config().ConnConfig
	where := fmt.Sprintf("%s:%d (database %q)", conn.Host, conn.Port, conn.Database)
	env, err := benchkit.OpenOn(ctx, admin)
	if err != nil {
		return benchError(ctx, err)
	}
	env.Keep = f.keep
	raw, term := cli.DetectTerminal(out)
	line := cli.NewStatusLine(raw, term)
	say := func(format string, args ...any) { line.Print(fmt.Sprintf(format, args...)) }
	ending := "it is dropped at the end"
	if f.keep {
		ending = "--keep: it stays afterwards"
	}
	say("schema %q created on %s for this run; %s\n", env.Schema, where, ending)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
		defer cancel()
		cerr := env.Close(cctx)
		quoted := pgx.Identifier{env.Schema}.Sanitize()
		switch {
		case cerr != nil && err == nil:
			err = fmt.Errorf("%w; drop it with: DROP SCHEMA %s CASCADE", cerr, quoted)
		case cerr != nil:
			// The run's own error is returned; this one is said here, once.
			say("could not drop schema %q (%v); drop it with: DROP SCHEMA %s CASCADE\n", env.Schema, cli.Message(cerr), quoted)
		case f.keep:
			say("schema %q kept (--keep); drop it with: DROP SCHEMA %s CASCADE\n", env.Schema, quoted)
		default:
			say("schema %q dropped\n", env.Schema)
		}
	}()

	if p.outbox {
		pool, err := env.Pool(ctx, f.producers+4)
		if err != nil {
			return benchError(ctx, err)
		}
		ob, err := benchkit.NewOutbox(ctx, pool)
		if err != nil {
			return benchError(ctx, err)
		}
		var prod *benchkit.Producers
		what := fmt.Sprintf("outbox relay: batch %d, a backlog of %d entries loaded first", f.batch, p.bound.Count)
		if p.bound.Duration > 0 {
			if prod, err = benchkit.NewProducers(ctx, pool); err != nil {
				return benchError(ctx, err)
			}
			what = fmt.Sprintf("outbox relay: batch %d, %d producers enqueueing for %v", f.batch, f.producers, p.bound.Duration)
		}
		live, err := ob.LiveRelay(prod, f.batch, f.producers, p.bound)
		if err != nil {
			return err
		}
		if err := runLive(ctx, line, live, what); err != nil {
			return err
		}
	}
	if p.workrows {
		pool, err := env.Pool(ctx, min(f.concurrency, 36)+4)
		if err != nil {
			return benchError(ctx, err)
		}
		wr, err := benchkit.NewWorkRows(ctx, pool)
		if err != nil {
			return benchError(ctx, err)
		}
		what := fmt.Sprintf("work-row burn-down: batch %d, %d handlers, %d rows filled first", f.batch, f.concurrency, p.bound.Count)
		if p.bound.Duration > 0 {
			what = fmt.Sprintf("work-row burn-down: batch %d, %d handlers for %v, the table topped up", f.batch, f.concurrency, p.bound.Duration)
		}
		live, err := wr.LiveBurnDown(f.concurrency, f.batch, p.bound)
		if err != nil {
			return err
		}
		if err := runLive(ctx, line, live, what); err != nil {
			return err
		}
	}
	return nil
}

// runLive prepares and runs l, with its progress on line every
// benchProgressEvery, then prints its summary.
func runLive(ctx context.Context, line *cli.StatusLine, l *benchkit.Live, what string) error {
	line.Print(what + "\n")
	if err := l.Prepare(ctx); err != nil {
		return benchError(ctx, err)
	}
	tctx, stop := context.WithCancel(ctx)
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(benchProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-tctx.Done():
				return
			case <-t.C:
				line.Set(progressText(l.Name, l.Unit, l.Progress()))
			}
		}
	}()
	res, err := l.Run(ctx)
	stop()
	<-ticked
	line.Clear()
	if err != nil {
		return benchError(ctx, err)
	}
	line.Print(summaryText(l, res))
	return nil
}

// progressText is the progress line: "outbox relay 4.0s: 24680 entries ·
// 6.17 k/s · backlog 120".
func progressText(name, unit string, p benchkit.Progress) string {
	rate := 0.0
	if p.Elapsed > 0 {
		rate = float64(p.Done) / p.Elapsed.Seconds()
	}
	return fmt.Sprintf("%s %.1fs: %d %s · %s/s · backlog %d", name, p.Elapsed.Seconds(), p.Done, unit, benchkit.Human(rate), p.Backlog)
}

// summaryText is a run's result, a few aligned lines.
func summaryText(l *benchkit.Live, r benchkit.LiveResult) string {
	total := fmt.Sprintf("%d %s", r.Ops, l.Unit)
	if r.Backlog > 0 {
		total += fmt.Sprintf(" (of %d; %d left when it stopped)", r.Added, r.Backlog)
	}
	s := fmt.Sprintf("%s done\n  total      %s\n  elapsed    %s\n  mean rate  %s %s/s\n",
		l.Name, total, cli.FormatDuration(r.Elapsed), benchkit.Human(r.Rate()), l.Unit)
	if len(r.Latencies) > 0 {
		s += fmt.Sprintf("  latency    p50 %s · p99 %s (%s, %d %s)\n", benchkit.HumanLatency(r.Quantile(0.50)),
			benchkit.HumanLatency(r.Quantile(0.99)), l.LatencyOf, len(r.Latencies), l.Unit)
	}
	return s
}

// benchError is cli.ErrInterrupted when ctx ended (the error is then the
// cancellation's), and err otherwise.
func benchError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return cli.ErrInterrupted
	}
	return err
}
