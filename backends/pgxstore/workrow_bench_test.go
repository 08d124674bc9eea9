package pgxstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/testenv"
)

// countingRows counts the rows finalized as owned, so a benchmark knows
// when every row is done without polling the table.
type countingRows struct {
	*WorkRows[int64, conformance.WorkRow]
	done atomic.Int64
	all  chan struct{}
	n    int64
	once sync.Once
}

func (c *countingRows) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	owned, err := c.WorkRows.FinalizeMany(ctx, lock, finals)
	c.count(owned)
	return owned, err
}

func (c *countingRows) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[int64]) ([][]bool, error) {
	owned, err := c.WorkRows.FinalizeClaims(ctx, claims)
	for _, o := range owned {
		c.count(o)
	}
	return owned, err
}

func (c *countingRows) count(owned []bool) {
	var k int64
	for _, ok := range owned {
		if ok {
			k++
		}
	}
	if c.done.Add(k) >= c.n {
		c.once.Do(func() { close(c.all) })
	}
}

// BenchmarkWorkRows_Throughput measures claim + finalize with a no-op
// handler: b.N rows, drained by 1, 4 or 16 Workers with batches of 20 or
// 100. It reports rows/s, and short-claims/claim: the share of claim
// statements whose UPDATE stamped fewer rows than their candidate read
// selected, because a concurrent claim took some first.
func BenchmarkWorkRows_Throughput(b *testing.B) {
	for _, workers := range []int{1, 4, 16} {
		for _, batch := range []int{20, 100} {
			b.Run(fmt.Sprintf("workers=%d/batch=%d", workers, batch), func(b *testing.B) {
				benchThroughput(b, workers, batch, false)
			})
		}
	}
}

// BenchmarkWorkRows_LockFreeCandidates is the same at 16 workers with
// WorkRowsOptions.LockFreeCandidates: the candidate read takes no lock and
// the UPDATE alone arbitrates. short-claims/claim shows how often a claim's
// UPDATE stamped fewer rows than it read; conflicts/claim how often a claim
// was rolled back by a deadlock. The lease is short, so rows whose finalize
// died in a deadlock come back within the run.
func BenchmarkWorkRows_LockFreeCandidates(b *testing.B) {
	for _, batch := range []int{20, 100} {
		b.Run(fmt.Sprintf("workers=16/batch=%d", batch), func(b *testing.B) {
			benchThroughput(b, 16, batch, true)
		})
	}
}

func benchThroughput(b *testing.B, workers, batch int, lockFree bool) {
	env := testenv.Postgres(b)
	ctx := context.Background()
	createSuiteTable(b, ctx, env.Pool)
	if _, err := env.Pool.Exec(ctx, `INSERT INTO work_rows (id, seq) SELECT g, g FROM generate_series(1, $1::bigint) AS g`, b.N); err != nil {
		b.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `ANALYZE work_rows`); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(env.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = int32(workers + 2)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	inner, err := NewWorkRows[int64](pool, WorkRowsOptions[conformance.WorkRow]{
		Table: "work_rows", Live: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder, LockFreeCandidates: lockFree,
	})
	if err != nil {
		b.Fatal(err)
	}
	lease := time.Minute
	if lockFree {
		lease = 2 * time.Second
	}
	st := &countingRows{WorkRows: inner, all: make(chan struct{}), n: int64(b.N)}
	w, err := workrow.NewWorker(workrow.Config[int64, conformance.WorkRow]{
		Store:    st,
		Eligible: conformance.WorkRowsLive,
		Order:    conformance.WorkRowsOrder,
		OnClaim:  []workrow.Set{workrow.Add("attempts", 1)},
		Attempt:  func(r conformance.WorkRow) int { return r.Attempts },
		OnComplete: func(now time.Time) []workrow.Set {
			return []workrow.Set{workrow.Assign("completed_at", now)}
		},
		Handler: func(context.Context, workrow.Claimed[int64, conformance.WorkRow]) workrow.Outcome {
			return workrow.Complete()
		},
		BatchSize:  batch,
		Lease:      lease,
		IdleDelay:  time.Millisecond,
		ErrorDelay: 10 * time.Millisecond,
	})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for range workers {
		wg.Go(func() { _ = w.Run(runCtx) })
	}
	select {
	case <-st.all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d rows done after 5 minutes", st.done.Load(), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	stop()
	wg.Wait()
	s := st.Stats()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "rows/s")
	b.ReportMetric(float64(s.ShortClaims)/float64(max(s.Claims, 1)), "short-claims/claim")
	if lockFree {
		b.ReportMetric(float64(s.Conflicts)/float64(max(s.Claims, 1)), "conflicts/claim")
	}
}
