package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/internal/workrowtest"
)

const (
	workTable  = "fault_rows"
	workSchema = "faults_rows"
	workRows   = 6000
	// workRowsConcurrent is the table of the concurrent variant: its
	// workers go faster, and the table must outlast the faults.
	workRowsConcurrent = 48000
	workLease          = time.Second
)

var workOrder = []workrow.Order{workrow.Asc("seq")}

type workRow struct {
	ID       int64 `db:"id"`
	Attempts int   `db:"attempts"`
}

// auditedRows stamps every finalize for the table's audit trigger.
type auditedRows struct {
	*pgxstore.WorkRows[int64, workRow]
}

func (s auditedRows) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	stamped, _ := workrowtest.Stamp(lock, finals)
	return s.WorkRows.FinalizeMany(ctx, lock, stamped)
}

func (s auditedRows) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[int64]) ([][]bool, error) {
	stamped := make([]workrow.ClaimFinals[int64], len(claims))
	for i, c := range claims {
		finals, _ := workrowtest.Stamp(c.Lock, c.Finals)
		stamped[i] = workrow.ClaimFinals[int64]{Lock: c.Lock, Finals: finals}
	}
	return s.WorkRows.FinalizeClaims(ctx, stamped)
}

func (s auditedRows) Finalize(ctx context.Context, lock workrow.LockID, f workrow.Final[int64]) (bool, error) {
	stamped, _ := workrowtest.Stamp(lock, []workrow.Final[int64]{f})
	return s.WorkRows.Finalize(ctx, lock, stamped[0])
}

// workerMain runs a work-row worker whose handler fails one call in twenty
// and stalls one in fifty, until SIGTERM; -concurrency runs that many
// handlers at once.
func workerMain(args []string) int {
	fs := newChildFlags("worker")
	url := fs.String("url", "", "PostgreSQL URL, search_path set to the work table's schema")
	seedFlag := fs.Uint64("seed", 1, "seed")
	direct := fs.Bool("direct", false, "negative control: the handler counts its completion itself, outside the finalize")
	concurrency := fs.Int("concurrency", 1, "handlers at once")
	batchSize := fs.Int("batch", 20, "rows per claim")
	rep, ctx, done, err := fs.start(args)
	if err != nil {
		return 2
	}
	defer done()
	pool, err := pgxpool.New(context.Background(), *url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	inner, err := pgxstore.NewWorkRows[int64](pool, pgxstore.WorkRowsOptions[workRow]{Table: workTable, Live: workrowtest.Live, Order: workOrder})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rng := rand.New(rand.NewPCG(*seedFlag, 9))
	var rngMu sync.Mutex // handlers run concurrently
	draw := func() float64 {
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.Float64()
	}
	w, err := workrow.NewWorker(workrow.Config[int64, workRow]{
		Store:    auditedRows{inner},
		Eligible: workrowtest.Live,
		Order:    workOrder,
		OnClaim:  []workrow.Set{workrow.Add("attempts", 1)},
		Attempt:  func(r workRow) int { return r.Attempts },
		Backoff:  workrow.Steps{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond},
		OnComplete: func(now time.Time) []workrow.Set {
			if *direct {
				return []workrow.Set{workrow.Assign("completed_at", now)}
			}
			return []workrow.Set{workrow.Assign("completed_at", now), workrow.Add("completions", 1)}
		},
		OnFail: func(_ time.Time, err error) []workrow.Set {
			return []workrow.Set{workrow.Assign("last_error", err.Error())}
		},
		BatchSize:     *batchSize,
		Concurrency:   *concurrency,
		Lease:         workLease,
		FlushInterval: 50 * time.Millisecond,
		IdleDelay:     20 * time.Millisecond,
		ErrorDelay:    100 * time.Millisecond,
		StoreTimeout:  2 * time.Second,
		Handler: func(hctx context.Context, c workrow.Claimed[int64, workRow]) workrow.Outcome {
			switch r := draw(); {
			case r < 0.05:
				return workrow.Fail(errors.New("remote said 503"))
			case r < 0.07:
				time.Sleep(300 * time.Millisecond) // slow, but the worker keeps renewing
			}
			if *direct {
				_, _ = pool.Exec(context.Background(), `UPDATE `+workTable+` SET completions = completions + 1 WHERE id = $1`, c.ID)
			}
			return workrow.Complete()
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rep.send(event{Kind: kindReady})
	_ = w.Run(ctx)
	return 0
}

// TestWorkRows_WorkersKilledPausedAndTerminated: four worker children burn
// down an audited table while workers are killed, paused past their lease
// and terminated in turn. Every row is completed exactly once, and no
// finalize under a lock id that no longer owned its row changed it.
func TestWorkRows_WorkersKilledPausedAndTerminated(t *testing.T) {
	workRowsFaults(t, 1, 20, workRows)
}

// TestWorkRows_ConcurrentWorkersKilledPausedAndTerminated is the same with
// 16 handlers per worker fed by claims of 4 rows, four of them in flight at
// once while the queue is busy (workrow.MaxClaimsInFlight): a killed or
// paused worker holds many rows of several batches at once, some still
// being claimed, and the same invariants hold.
func TestWorkRows_ConcurrentWorkersKilledPausedAndTerminated(t *testing.T) {
	workRowsFaults(t, 16, 4, workRowsConcurrent)
}

func workRowsFaults(t *testing.T, concurrency, batch, total int) {
	scenario(t)
	pgsrv := testenv.StartPostgresServer(t)
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, pgsrv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ix := pgxstore.ClaimIndex{Schema: workSchema, Table: workTable, Order: workOrder, Live: workrowtest.Live}
	index, err := ix.DDL()
	if err != nil {
		t.Fatal(err)
	}
	url := pgsrv.URL() + "&search_path=" + workSchema
	for _, q := range []string{`CREATE SCHEMA ` + workSchema, `SET search_path = ` + workSchema} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	setup, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	for _, q := range []string{workrowtest.AuditedTableDDL(workTable), index,
		fmt.Sprintf(`INSERT INTO %s (id, seq) SELECT g, g FROM generate_series(1, %d) AS g`, workTable, total), `ANALYZE ` + workTable} {
		if _, err := setup.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	col := newCollector(t)
	const slots = 4
	workers := make([]*testenv.Child, slots)
	generation := make([]int, slots)
	startWorker := func(i int) {
		generation[i]++
		name := fmt.Sprintf("w%d.%d", i, generation[i])
		args := []string{"-url", url, "-name", name, "-report", col.addr(), "-seed", fmt.Sprint(*seed*10 + uint64(i*31+generation[i])),
			"-concurrency", fmt.Sprint(concurrency), "-batch", fmt.Sprint(batch)}
		if *negative {
			args = append(args, "-direct")
		}
		workers[i] = testenv.StartChild(t, name, "worker", nil, args...)
	}
	for i := range slots {
		startWorker(i)
	}
	live := func() int {
		var n int
		if err := setup.QueryRow(ctx, `SELECT count(*) FROM `+workTable+` WHERE completed_at IS NULL AND parked_at IS NULL`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	started := time.Now()
	kinds := []string{"kill", "pause", "term", "kill", "pause"}
	rng := rand.New(rand.NewPCG(*seed, 13))
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for n, kind := range kinds {
		time.Sleep(400 * time.Millisecond)
		if live() == 0 {
			t.Fatalf("the table was done before fault %d of %d: the faults hit nothing", n+1, len(kinds))
		}
		i := rng.IntN(slots)
		c := workers[i]
		switch kind {
		case "kill":
			c.Kill()
			<-c.Exited()
			startWorker(i)
		case "pause":
			c.Pause()
			time.Sleep(2 * workLease)
			c.Resume()
		case "term":
			c.Terminate()
			if code, err := c.Wait(10 * time.Second); err != nil || code != 0 {
				t.Fatalf("%s after SIGTERM: exit %d, %v", c.Name, code, err)
			}
			startWorker(i)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for live() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d rows still live after 60s", live())
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(started)
	time.Sleep(500 * time.Millisecond) // late finalizes of paused workers, if any
	for _, c := range workers {
		c.Kill()
		<-c.Exited()
	}

	var v violations
	rows, err := setup.Query(ctx, `SELECT id, completions FROM `+workTable+` WHERE completions <> 1 ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		v.add("row %d completed %d times", id, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var stale, retried int
	if err := setup.QueryRow(ctx, `SELECT count(*) FROM `+workTable+`_violations`).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if stale > 0 {
		v.add("%d finalizes by a lock id that no longer owned the row changed it", stale)
	}
	if err := setup.QueryRow(ctx, `SELECT count(*) FROM `+workTable+` WHERE attempts > 1`).Scan(&retried); err != nil {
		t.Fatal(err)
	}
	t.Logf("figure workrows %d rows drained by handlers of concurrency %d (batch %d) in %v with %d faults; %d rows took more than one attempt",
		total, concurrency, batch, took.Round(time.Millisecond), len(kinds), retried)
	reportViolations(t, v)
}
