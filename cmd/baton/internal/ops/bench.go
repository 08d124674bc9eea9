package ops

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/internal/benchkit"
	"github.com/baton-go/baton/internal/cli"
)

// benchCleanupTimeout bounds dropping the schema at the end, which runs
// also after Ctrl-C.
const benchCleanupTimeout = 30 * time.Second

// BenchPlan is what a valid bench command line asks for.
type BenchPlan struct {
	// URL is the PostgreSQL URL; empty, BATON_DATABASE_URL.
	URL string
	// Outbox and WorkRows say which systems run, in that order.
	Outbox, WorkRows bool
	// Bound is how long each runs, or the backlog each works through.
	Bound benchkit.Bound
	// Batch is the entries the relay reads, and the rows the worker claims,
	// at a time; Concurrency the worker's handlers; Producers the goroutines
	// enqueueing outbox entries during a timed run.
	Batch, Concurrency, Producers int
	// Keep keeps the bench's schema afterwards.
	Keep bool
	// ProgressEvery is how often the progress line is redrawn (on a
	// terminal) or printed (elsewhere).
	ProgressEvery time.Duration
}

// Bench runs the outbox relay, the work-row burn-down or both, as p says,
// in a schema of their own that it drops at the end, also when interrupted
// (baton bench).
func Bench(ctx context.Context, out io.Writer, p BenchPlan) (err error) {
	admin, err := cli.OpenPool(ctx, p.URL, "--postgres")
	if err != nil {
		return err
	}
	conn := admin.Config().ConnConfig
	where := fmt.Sprintf("%s:%d (database %q)", conn.Host, conn.Port, conn.Database)
	env, err := benchkit.OpenOn(ctx, admin)
	if err != nil {
		return benchError(ctx, err)
	}
	env.Keep = p.Keep
	raw, term := cli.DetectTerminal(out)
	line := cli.NewStatusLine(raw, term)
	say := func(format string, args ...any) { line.Print(fmt.Sprintf(format, args...)) }
	ending := "it is dropped at the end"
	if p.Keep {
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
		case p.Keep:
			say("schema %q kept (--keep); drop it with: DROP SCHEMA %s CASCADE\n", env.Schema, quoted)
		default:
			say("schema %q dropped\n", env.Schema)
		}
	}()

	if p.Outbox {
		pool, err := env.Pool(ctx, p.Producers+4)
		if err != nil {
			return benchError(ctx, err)
		}
		ob, err := benchkit.NewOutbox(ctx, pool)
		if err != nil {
			return benchError(ctx, err)
		}
		var prod *benchkit.Producers
		what := fmt.Sprintf("outbox relay: batch %d, a backlog of %d entries loaded first", p.Batch, p.Bound.Count)
		if p.Bound.Duration > 0 {
			if prod, err = benchkit.NewProducers(ctx, pool); err != nil {
				return benchError(ctx, err)
			}
			what = fmt.Sprintf("outbox relay: batch %d, %d producers enqueueing for %v", p.Batch, p.Producers, p.Bound.Duration)
		}
		live, err := ob.LiveRelay(prod, p.Batch, p.Producers, p.Bound)
		if err != nil {
			return err
		}
		if err := runLive(ctx, line, live, what, p.ProgressEvery); err != nil {
			return err
		}
	}
	if p.WorkRows {
		pool, err := env.Pool(ctx, min(p.Concurrency, 36)+4)
		if err != nil {
			return benchError(ctx, err)
		}
		wr, err := benchkit.NewWorkRows(ctx, pool)
		if err != nil {
			return benchError(ctx, err)
		}
		what := fmt.Sprintf("work-row burn-down: batch %d, %d handlers, %d rows filled first", p.Batch, p.Concurrency, p.Bound.Count)
		if p.Bound.Duration > 0 {
			what = fmt.Sprintf("work-row burn-down: batch %d, %d handlers for %v, the table topped up", p.Batch, p.Concurrency, p.Bound.Duration)
		}
		live, err := wr.LiveBurnDown(p.Concurrency, p.Batch, p.Bound)
		if err != nil {
			return err
		}
		if err := runLive(ctx, line, live, what, p.ProgressEvery); err != nil {
			return err
		}
	}
	return nil
}

// runLive prepares and runs l, with its progress on line every
// progressEvery, then prints its summary.
func runLive(ctx context.Context, line *cli.StatusLine, l *benchkit.Live, what string, progressEvery time.Duration) error {
	line.Print(what + "\n")
	if err := l.Prepare(ctx); err != nil {
		return benchError(ctx, err)
	}
	tctx, stop := context.WithCancel(ctx)
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		t := time.NewTicker(progressEvery)
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
