package benchkit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/workrow"
)

// WorkTable is the queue table of the work-row cells.
const WorkTable = "bench_rows"

// workRow is a row of WorkTable as the handler sees it.
type workRow struct {
	ID       int64 `db:"id"`
	Attempts int   `db:"attempts"`
}

var (
	workLive  = workrow.IsNull("completed_at")
	workOrder = []workrow.Order{workrow.Asc("seq")}
)

// WorkRows is a work table in the run's schema, refilled before each run.
type WorkRows struct {
	Pool  *pgxpool.Pool
	store *countingRows
}

// countingRows counts the rows finalized as owned, so a run knows when
// every row is done without polling the table.
type countingRows struct {
	*pgxstore.WorkRows[int64, workRow]
	c *Counter
}

func (s *countingRows) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	owned, err := s.WorkRows.FinalizeMany(ctx, lock, finals)
	s.count(owned)
	return owned, err
}

// FinalizeClaims counts as FinalizeMany does: the Worker finalizes through
// it when claims finish together.
func (s *countingRows) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[int64]) ([][]bool, error) {
	owned, err := s.WorkRows.FinalizeClaims(ctx, claims)
	for _, o := range owned {
		s.count(o)
	}
	return owned, err
}

func (s *countingRows) count(owned []bool) {
	var k int64
	for _, ok := range owned {
		if ok {
			k++
		}
	}
	if c := s.c; c != nil {
		c.Add(k)
	}
}

// NewWorkRows creates WorkTable (fillfactor 90, as the work-row guide
// advises) with its claim index.
func NewWorkRows(ctx context.Context, pool *pgxpool.Pool) (*WorkRows, error) {
	ix, err := pgxstore.ClaimIndex{Table: WorkTable, Order: workOrder, Live: workLive}.DDL()
	if err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, `CREATE TABLE `+WorkTable+` (
    id           bigint PRIMARY KEY,
    seq          bigint NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    completed_at timestamptz,
    lock_id      uuid,
    locked_until timestamptz
) WITH (fillfactor = 90);
`+ix)
	if err != nil {
		return nil, err
	}
	st, err := pgxstore.NewWorkRows[int64](pool, pgxstore.WorkRowsOptions[workRow]{Table: WorkTable, Live: workLive, Order: workOrder})
	if err != nil {
		return nil, err
	}
	return &WorkRows{Pool: pool, store: &countingRows{WorkRows: st}}, nil
}

// Fill empties the table and inserts n fresh rows, then analyzes it.
func (w *WorkRows) Fill(ctx context.Context, n int) error {
	if _, err := w.Pool.Exec(ctx, `TRUNCATE `+WorkTable); err != nil {
		return err
	}
	if err := w.add(ctx, 1, int64(n)); err != nil {
		return err
	}
	_, err := w.Pool.Exec(ctx, `ANALYZE `+WorkTable)
	return err
}

// add inserts n fresh rows, numbered from first on.
func (w *WorkRows) add(ctx context.Context, first, n int64) error {
	_, err := w.Pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (id, seq) SELECT g, g FROM generate_series($1::bigint, $2::bigint) AS g`, WorkTable),
		first, first+n-1)
	return err
}

// BurnDown is baton's side of the work-row cells: one Worker whose Run
// runs concurrency no-op handlers, claiming batch rows at a time, over a
// table of n fresh rows, until every row is finalized or d after the
// first finalize. The rate is the steady one (Counter.AwaitSteady), as for
// the peer.
func (w *WorkRows) BurnDown(concurrency, batch, n int, d time.Duration) System {
	return w.ObservedBurnDown(fmt.Sprintf("baton, batch %d", batch), nil, concurrency, batch, n, d)
}

// ObservedBurnDown is BurnDown under another name, its worker observed by
// obs.WorkRow (nil obs: not observed).
func (w *WorkRows) ObservedBurnDown(name string, obs *Observed, concurrency, batch, n int, d time.Duration) System {
	if obs == nil {
		obs = &Observed{}
	}
	return System{
		Name:    name,
		Prepare: func(ctx context.Context) error { return w.Fill(ctx, n) },
		Run: func(ctx context.Context) (Sample, error) {
			c := NewCounter(int64(n))
			wk, err := w.worker(c, concurrency, batch, obs.WorkRow)
			if err != nil {
				return Sample{}, err
			}
			rctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			start := time.Now()
			go func() { defer close(done); _ = wk.Run(rctx) }()
			s, err := c.AwaitSteady(ctx, start, d)
			stop()
			<-done
			return s, err
		},
	}
}

// worker is the burn-down's Worker: concurrency no-op handlers claiming
// batch rows at a time, each row completed at once and counted into c.
func (w *WorkRows) worker(c *Counter, concurrency, batch int, hooks workrow.Hooks) (*workrow.Worker[int64, workRow], error) {
	return workrow.NewWorker(workrow.Config[int64, workRow]{
		Store:    &countingRows{WorkRows: w.store.WorkRows, c: c},
		Eligible: workLive,
		Order:    workOrder,
		OnClaim:  []workrow.Set{workrow.Add("attempts", 1)},
		Attempt:  func(r workRow) int { return r.Attempts },
		OnComplete: func(now time.Time) []workrow.Set {
			return []workrow.Set{workrow.Assign("completed_at", now)}
		},
		Handler: func(context.Context, workrow.Claimed[int64, workRow]) workrow.Outcome {
			return workrow.Complete()
		},
		BatchSize:   batch,
		Concurrency: concurrency,
		IdleDelay:   time.Millisecond,
		ErrorDelay:  10 * time.Millisecond,
		Hooks:       hooks,
	})
}
