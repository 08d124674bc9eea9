package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/baton-go/baton/internal/benchkit"
)

// riverSettings are River's settings in the work-row cells, printed with
// the table.
type riverSettings struct {
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration
}

func (s riverSettings) String() string {
	return fmt.Sprintf("River %s: FetchCooldown %v, FetchPollInterval %v (minimums; defaults 100ms and 1s), "+
		"completer: River's batch completer (its only one), no-op worker, MaxWorkers = the handler count",
		riverVersion, s.FetchCooldown, s.FetchPollInterval)
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverQueue is River's side of the work-row cells: its tables migrated
// into the run's schema.
type riverQueue struct {
	pool     *pgxpool.Pool
	schema   string
	settings riverSettings
}

func newRiverQueue(ctx context.Context, pool *pgxpool.Pool, schema string, settings riverSettings) (*riverQueue, error) {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: quiet})
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	return &riverQueue{pool: pool, schema: schema, settings: settings}, nil
}

func (q *riverQueue) client(workers int) (*river.Client[pgx.Tx], error) {
	ws := river.NewWorkers()
	if err := river.AddWorkerSafely(ws, noopWorker{}); err != nil {
		return nil, err
	}
	return river.NewClient(riverpgxv5.New(q.pool), &river.Config{
		Schema:            q.schema,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     q.settings.FetchCooldown,
		FetchPollInterval: q.settings.FetchPollInterval,
		Logger:            quiet,
	})
}

// burnDown inserts n no-op jobs (not measured), then starts a client with
// workers workers and counts completions until all n are done or d after
// the first, at the steady rate: from the first completion (about 65ms
// after Start here: leader election, the first fetch) to the latest.
func (q *riverQueue) burnDown(workers, n int, d time.Duration) benchkit.System {
	var c *river.Client[pgx.Tx]
	return benchkit.System{
		Name: "River",
		Prepare: func(ctx context.Context) error {
			if _, err := q.pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
				return err
			}
			var err error
			if c, err = q.client(workers); err != nil {
				return err
			}
			params := make([]river.InsertManyParams, 0, 5000)
			for left := n; left > 0; left -= len(params) {
				params = params[:0]
				for range min(left, cap(params)) {
					params = append(params, river.InsertManyParams{Args: noopArgs{}})
				}
				if _, err := c.InsertManyFast(ctx, params); err != nil {
					return err
				}
			}
			_, err = q.pool.Exec(ctx, "ANALYZE river_job")
			return err
		},
		Run: func(ctx context.Context) (benchkit.Sample, error) {
			events, cancel := c.SubscribeConfig(&river.SubscribeConfig{ChanSize: n + 1000, Kinds: []river.EventKind{river.EventKindJobCompleted}})
			defer cancel()
			count := benchkit.NewCounter(int64(n))
			counted := make(chan struct{})
			go func() {
				defer close(counted)
				for range events {
					count.Add(1)
				}
			}()
			start := time.Now()
			if err := c.Start(ctx); err != nil {
				return benchkit.Sample{}, err
			}
			s, err := count.AwaitSteady(ctx, start, d)
			stopCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer stop()
			if serr := c.Stop(stopCtx); serr != nil && err == nil {
				err = serr
			}
			cancel()
			<-counted // the subscription's channel closes with its cancel
			return s, err
		},
	}
}

var quiet = slog.New(slog.DiscardHandler)
