package benchkit

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/baton-go/baton/backends/bunstore"
	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	lockmem "github.com/baton-go/baton/locks/memory"
)

// The wake-up cells: commit-to-delivery latency of the outbox and
// insert-to-handler-start latency of work rows, with the default
// IdleDelay, producers committing at a fixed rate; and what signalling
// costs the producers.

// Bun opens a bun.DB on pool (pgx's database/sql driver over it), closed
// with the pool's Env.
func Bun(pool *pgxpool.Pool) *bun.DB {
	return bun.NewDB(stdlib.OpenDBFromPool(pool), pgdialect.New())
}

// pairs matches the two ends of each op, whichever comes first: a
// delivery may be seen before the producer's Commit has returned.
type pairs[K comparable] struct {
	mu    sync.Mutex
	start map[K]time.Time
	end   map[K]time.Time
	lats  []time.Duration
	done  chan struct{} // receives a token per completed pair
}

func newPairs[K comparable]() *pairs[K] {
	return &pairs[K]{start: map[K]time.Time{}, end: map[K]time.Time{}, done: make(chan struct{}, 1<<16)}
}

// mark records one end of k's op at now, and the latency once both ends
// are in.
func (p *pairs[K]) mark(k K, isStart bool) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	var d time.Duration
	switch s, e := p.start[k], p.end[k]; {
	case isStart && !e.IsZero():
		delete(p.end, k)
		d = e.Sub(now)
	case !isStart && !s.IsZero():
		delete(p.start, k)
		d = now.Sub(s)
	case isStart:
		p.start[k] = now
		return
	default:
		p.end[k] = now
		return
	}
	p.lats = append(p.lats, max(d, 0))
	select {
	case p.done <- struct{}{}:
	default:
	}
}

func (p *pairs[K]) committed(k K) { p.mark(k, true) }
func (p *pairs[K]) reached(k K)   { p.mark(k, false) }

// awaitOne waits for the next completed pair, up to StartLimit.
func (p *pairs[K]) awaitOne(ctx context.Context) error {
	t := time.NewTimer(StartLimit)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("benchkit: nothing arrived within %v", StartLimit)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sample waits until n pairs completed (or StartLimit more passed) and
// returns them.
func (p *pairs[K]) sample(ctx context.Context, n int, elapsed time.Duration) (Sample, error) {
	deadline := time.Now().Add(StartLimit)
	for {
		p.mu.Lock()
		got := len(p.lats)
		p.mu.Unlock()
		if got >= n || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return Sample{}, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lats) < n {
		return Sample{}, fmt.Errorf("benchkit: %d of %d ops arrived", len(p.lats), n)
	}
	return Sample{Ops: int64(len(p.lats)), Elapsed: elapsed, Latencies: append([]time.Duration(nil), p.lats...)}, nil
}

// Paced starts op rate times a second for d, from goroutines enough to keep
// the pace, and returns how many it started.
func Paced(ctx context.Context, rate float64, d time.Duration, op func(ctx context.Context) error) (int, error) {
	const workers = 32
	ticks := make(chan struct{}, workers)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range ticks {
				if err := op(ctx); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	every := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	n := 0
	for next := start; time.Since(start) < d && ctx.Err() == nil; next = next.Add(every) {
		time.Sleep(time.Until(next))
		select {
		case ticks <- struct{}{}:
			n++
		case err := <-errs:
			close(ticks)
			wg.Wait()
			return n, err
		}
	}
	close(ticks)
	wg.Wait()
	select {
	case err := <-errs:
		return n, err
	default:
	}
	return n, ctx.Err()
}

// leader runs an outbox.Driver over st with a no-op processor on Lanes[0]
// that calls seen for every entry, until the returned stop.
func leader(st outbox.Store, idle time.Duration, pollOnly bool, seen func(outbox.ID)) (stop func(), err error) {
	locks, err := lockmem.NewProvider(lockmem.Options{})
	if err != nil {
		return nil, err
	}
	proc := outbox.ProcessorFunc{LaneName: Lanes[0], Func: func(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
		out := make([]outbox.Outcome, len(run))
		for i, e := range run {
			seen(e.ID)
			out[i] = outbox.Delivered()
		}
		return out, nil
	}}
	drv, err := outbox.NewDriver(outbox.Config{
		Store: st, Locks: locks, Processors: []outbox.Processor{proc}, RetentionDisabled: true,
		IdleDelay: idle, PollOnly: pollOnly, Notify: func(context.Context, outbox.Notice) error { return nil },
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = drv.Run(ctx) }()
	return func() { cancel(); <-done }, nil
}

// emptyOutbox removes every entry and the cursor: each run starts on an
// empty outbox, with no backlog for its leader.
func emptyOutbox(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "TRUNCATE baton_outbox, baton_outbox_state")
	return err
}

// warmUp commits entries one at a time until one is delivered: the leader
// leads and listens.
func warmUp[K comparable](ctx context.Context, p *pairs[K], commit func(ctx context.Context) (K, error)) error {
	k, err := commit(ctx)
	if err != nil {
		return err
	}
	p.committed(k)
	if err := p.awaitOne(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	p.lats = nil
	p.mu.Unlock()
	return nil
}

// paced warms up with commit, then commits rate times a second for d and
// returns the latencies from each commit's return to its other end.
func (p *pairs[K]) paced(ctx context.Context, rate float64, d time.Duration, commit func(ctx context.Context) (K, error)) (Sample, error) {
	if err := warmUp(ctx, p, commit); err != nil {
		return Sample{}, err
	}
	start := time.Now()
	n, err := Paced(ctx, rate, d, func(ctx context.Context) error {
		k, err := commit(ctx)
		if err == nil {
			p.committed(k)
		}
		return err
	})
	if err != nil {
		return Sample{}, err
	}
	return p.sample(ctx, n, time.Since(start))
}

// OutboxLatency is commit-to-delivery at rate entries a second for d: a
// leader with the default IdleDelay, listening, and producers committing
// one entry per transaction with enqueue.
func OutboxLatency(name string, pool *pgxpool.Pool, st outbox.Store, enqueue func(ctx context.Context, id outbox.ID) error, rate float64, d time.Duration) System {
	return System{
		Name:    name,
		Prepare: func(ctx context.Context) error { return emptyOutbox(ctx, pool) },
		Run: func(ctx context.Context) (Sample, error) {
			p := newPairs[outbox.ID]()
			stop, err := leader(st, outbox.DefaultIdleDelay, false, p.reached)
			if err != nil {
				return Sample{}, err
			}
			defer stop()
			return p.paced(ctx, rate, d, func(ctx context.Context) (outbox.ID, error) {
				id := outbox.NewID()
				return id, enqueue(ctx, id)
			})
		},
	}
}

// PgxEnqueue is one producer transaction with pgxstore.Enqueue.
func PgxEnqueue(pool *pgxpool.Pool) func(ctx context.Context, id outbox.ID) error {
	return func(ctx context.Context, id outbox.ID) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return pgxstore.Enqueue(ctx, tx, id, Lanes[0], Payload)
		})
	}
}

// BunEnqueue is one producer transaction with bunstore.Enqueue.
func BunEnqueue(db *bun.DB) func(ctx context.Context, id outbox.ID) error {
	return func(ctx context.Context, id outbox.ID) error {
		return db.RunInTx(ctx, &sql.TxOptions{}, func(ctx context.Context, tx bun.Tx) error {
			return bunstore.Enqueue(ctx, tx, id, Lanes[0], Payload)
		})
	}
}

// WakeTable is the work table of the wake-up cells.
const WakeTable = "bench_wake_rows"

type wakeRow struct {
	ID          int64      `db:"id"`
	CompletedAt *time.Time `db:"completed_at"`
}

type bunWakeRow struct {
	bun.BaseModel `bun:"table:bench_wake_rows"`
	ID            int64      `bun:"id,pk"`
	CompletedAt   *time.Time `bun:"completed_at"`
	bunstore.LockColumns
}

// WakeRows is the wake-up cells' work table with a store of each adapter.
type WakeRows struct {
	Pool *pgxpool.Pool
	Pgx  *pgxstore.WorkRows[int64, wakeRow]
	Bun  *bunstore.WorkRows[int64, bunWakeRow]
	db   *bun.DB
	mu   sync.Mutex
	next int64
}

var wakeLive = workrow.IsNull("completed_at")

// NewWakeRows creates WakeTable with its claim index in pool's schema.
func NewWakeRows(ctx context.Context, pool *pgxpool.Pool) (*WakeRows, error) {
	ix, err := pgxstore.ClaimIndex{Table: WakeTable, Live: wakeLive}.DDL()
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+WakeTable+` (
    id           bigint PRIMARY KEY,
    completed_at timestamptz,
    lock_id      uuid,
    locked_until timestamptz
) WITH (fillfactor = 90);
`+ix); err != nil {
		return nil, err
	}
	w := &WakeRows{Pool: pool, db: Bun(pool)}
	if w.Pgx, err = pgxstore.NewWorkRows[int64](pool, pgxstore.WorkRowsOptions[wakeRow]{Table: WakeTable, Live: wakeLive}); err != nil {
		return nil, err
	}
	if w.Bun, err = bunstore.NewWorkRows[int64, bunWakeRow](ctx, w.db, bunstore.WorkRowsOptions{Live: wakeLive}); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *WakeRows) id() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	return w.next
}

// PgxInsert inserts one row and signals with WorkRows.Signal, in one
// transaction.
func (w *WakeRows) PgxInsert(ctx context.Context) (int64, error) {
	id := w.id()
	return id, pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+WakeTable+` (id) VALUES ($1)`, id); err != nil {
			return err
		}
		return w.Pgx.Signal(ctx, tx)
	})
}

// BunInsert is PgxInsert through bun.
func (w *WakeRows) BunInsert(ctx context.Context) (int64, error) {
	id := w.id()
	return id, w.db.RunInTx(ctx, &sql.TxOptions{}, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(&bunWakeRow{ID: id}).Exec(ctx); err != nil {
			return err
		}
		return w.Bun.Signal(ctx, tx)
	})
}

// WorkLatency is insert-to-handler-start at rate rows a second for d: one
// Worker with the default IdleDelay, listening, over st, and producers
// committing one signalled row per transaction with insert.
func WorkLatency[R any](name string, w *WakeRows, st workrow.Store[int64, R], insert func(ctx context.Context) (int64, error), rate float64, d time.Duration) System {
	return System{
		Name: name,
		Prepare: func(ctx context.Context) error {
			_, err := w.Pool.Exec(ctx, "TRUNCATE "+WakeTable)
			return err
		},
		Run: func(ctx context.Context) (Sample, error) {
			p := newPairs[int64]()
			wk, err := workrow.NewWorker(workrow.Config[int64, R]{
				Store: st, Eligible: wakeLive, Attempt: func(R) int { return 1 },
				OnComplete: func(now time.Time) []workrow.Set { return []workrow.Set{workrow.Assign("completed_at", now)} },
				Handler: func(_ context.Context, c workrow.Claimed[int64, R]) workrow.Outcome {
					p.reached(c.ID)
					return workrow.Complete()
				},
				Concurrency: 8, BatchSize: 20,
			})
			if err != nil {
				return Sample{}, err
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = wk.Run(rctx) }()
			defer func() { cancel(); <-done }()
			return p.paced(ctx, rate, d, insert)
		},
	}
}

// Loop is the enqueue loop of Producers.Enqueue with write as the
// producer's write, and no leader.
func (p *Producers) Loop(name string, producers int, d time.Duration, write func(ctx context.Context, tx pgx.Tx) error) System {
	return System{Name: name, Run: func(ctx context.Context) (Sample, error) {
		return Loop(ctx, producers, d, func(ctx context.Context) error { return p.Tx(ctx, write) })
	}}
}

// EnqueueBeside is the enqueue loop of Producers.Enqueue with a leader
// delivering beside it, started (and warmed up) before the measurement:
// listening (the default IdleDelay) or polling every 5ms. write is the
// producer's write in its transaction. The caller's Prepare empties the
// outbox and its cursor (Producers.Empty), as for every system of the
// enqueue cell.
func (p *Producers) EnqueueBeside(name string, st outbox.Store, listen bool, producers int, d time.Duration, write func(ctx context.Context, tx pgx.Tx) error) System {
	return System{
		Name: name,
		Run: func(ctx context.Context) (Sample, error) {
			idle, pollOnly := outbox.DefaultIdleDelay, !listen
			if pollOnly {
				idle = 5 * time.Millisecond
			}
			pr := newPairs[outbox.ID]()
			stop, err := leader(st, idle, pollOnly, pr.reached)
			if err != nil {
				return Sample{}, err
			}
			defer stop()
			enqueue := PgxEnqueue(p.Pool)
			if err := warmUp(ctx, pr, func(ctx context.Context) (outbox.ID, error) {
				id := outbox.NewID()
				return id, enqueue(ctx, id)
			}); err != nil {
				return Sample{}, err
			}
			return Loop(ctx, producers, d, func(ctx context.Context) error { return p.Tx(ctx, write) })
		},
	}
}

// SignalledEnqueue is pgxstore.Enqueue: it signals only while the leader
// is idle.
func SignalledEnqueue(ctx context.Context, tx pgx.Tx) error {
	return pgxstore.Enqueue(ctx, tx, outbox.NewID(), Lanes[0], Payload)
}

// QuietEnqueue is the Enqueue of a store with SignalDisabled: a plain
// insert with the dead-letter check.
func QuietEnqueue(st *pgxstore.OutboxStore) func(ctx context.Context, tx pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		return st.Enqueue(ctx, tx, outbox.NewID(), Lanes[0], Payload)
	}
}

// NotifyEveryCommit is what a design without the idle gate sends: the
// insert, and a NOTIFY on the leader's channel (baton_outbox_ and the
// table's oid, as Enqueue names it) in every transaction.
func NotifyEveryCommit(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `WITH e AS (INSERT INTO baton_outbox (id, lane, payload) VALUES ($1, $2, $3) RETURNING tableoid, xid)
SELECT pg_notify('baton_outbox_' || tableoid::text, xid::text) FROM e`, [16]byte(outbox.NewID()), Lanes[0], Payload)
	return err
}
