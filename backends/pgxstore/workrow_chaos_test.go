package pgxstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/internal/workrowtest"
)

// The chaos table is workrowtest's audited table: a trigger records any
// finalize made by a lock id other than the one on the row at that moment.
var chaosDDL = workrowtest.AuditedTableDDL("chaos")

type chaosRow struct {
	ID       int64 `db:"id"`
	Attempts int   `db:"attempts"`
}

var chaosLive = workrowtest.Live

// chaosWorkLog collects what the workers' stores reported.
type chaosWorkLog struct {
	mu             sync.Mutex
	ownedFinalizes map[int64]int
	completedBy    map[int64][]string // locks of owned completions
	stale          int                // finalizes answered "not owned"
	claims         int
}

// chaosWorkRows is one worker's view of the table: it stamps every finalize
// with its lock (for the audit trigger), records the answers, and can
// freeze its renewals, as a paused process would.
type chaosWorkRows struct {
	*WorkRows[int64, chaosRow]
	log    *chaosWorkLog
	frozen atomic.Pointer[chan struct{}]
}

func (s *chaosWorkRows) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, chaosRow], error) {
	got, err := s.WorkRows.Claim(ctx, spec)
	s.log.mu.Lock()
	s.log.claims++
	s.log.mu.Unlock()
	return got, err
}

func (s *chaosWorkRows) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	finals, completes := workrowtest.Stamp(lock, finals)
	owned, err := s.WorkRows.FinalizeMany(ctx, lock, finals)
	if err != nil {
		return owned, err
	}
	s.record(lock, finals, completes, owned)
	return owned, nil
}

func (s *chaosWorkRows) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[int64]) ([][]bool, error) {
	stamped := make([]workrow.ClaimFinals[int64], len(claims))
	completes := make([][]bool, len(claims))
	for i, c := range claims {
		var finals []workrow.Final[int64]
		finals, completes[i] = workrowtest.Stamp(c.Lock, c.Finals)
		stamped[i] = workrow.ClaimFinals[int64]{Lock: c.Lock, Finals: finals}
	}
	owned, err := s.WorkRows.FinalizeClaims(ctx, stamped)
	if err != nil {
		return owned, err
	}
	for i, c := range stamped {
		s.record(c.Lock, c.Finals, completes[i], owned[i])
	}
	return owned, nil
}

// record logs what one claim's finalize answered.
func (s *chaosWorkRows) record(lock workrow.LockID, finals []workrow.Final[int64], completes, owned []bool) {
	s.log.mu.Lock()
	defer s.log.mu.Unlock()
	for i, ok := range owned {
		id := finals[i].ID
		switch {
		case !ok:
			s.log.stale++
		case completes[i]:
			s.log.completedBy[id] = append(s.log.completedBy[id], lock.String())
			fallthrough
		default:
			s.log.ownedFinalizes[id]++
		}
	}
}

func (s *chaosWorkRows) RenewMany(ctx context.Context, lock workrow.LockID, until time.Time, ids []int64) ([]bool, error) {
	if ch := s.frozen.Load(); ch != nil {
		select {
		case <-*ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.WorkRows.RenewMany(ctx, lock, until, ids)
}

// TestWorkRows_ChaosCompletesEveryRowExactlyOnceOrParksIt: 10 000 rows, 8
// workers; 5% of handler calls fail (retried on a short ladder); 1% of
// handler calls freeze their whole worker, renewals included, past the
// lease, then report success anyway; one worker is cancelled in the middle
// of a batch; every 1000th row always fails. In the end every row is
// completed exactly once (per the table, the stores' answers and the
// handlers' own record) or parked after MaxAttempts, and the audit trigger
// saw no finalize by a stale lock id change a row.
func TestWorkRows_ChaosCompletesEveryRowExactlyOnceOrParksIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for several seconds; skipped with -short")
	}
	const (
		rows        = 10_000
		workers     = 8
		maxAttempts = 4
		lease       = 400 * time.Millisecond
		stall       = lease + 300*time.Millisecond
	)
	env := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ix := ClaimIndex{Table: "chaos", Order: []workrow.Order{workrow.Asc("seq")}, Live: chaosLive}
	index, err := ix.DDL()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{chaosDDL, index,
		`INSERT INTO chaos (id, seq) SELECT g, g FROM generate_series(1, 10000) AS g`, `ANALYZE chaos`} {
		if _, err := env.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	pool := newPool(t, env, func(c *pgxpool.Config) { c.MaxConns = 2 * workers })

	clog := &chaosWorkLog{ownedFinalizes: map[int64]int{}, completedBy: map[int64][]string{}}
	var (
		hmu                             sync.Mutex
		handled                         = map[int64]int{} // successes the handlers reported
		calls, failed, stalls, poisoned atomic.Int64
		wg                              sync.WaitGroup
	)
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	for g := range workers {
		inner, err := NewWorkRows[int64](pool, WorkRowsOptions[chaosRow]{Table: "chaos", Live: chaosLive, Order: ix.Order})
		if err != nil {
			t.Fatal(err)
		}
		st := &chaosWorkRows{WorkRows: inner, log: clog}
		rng := rand.New(rand.NewPCG(uint64(g), 42))
		wctx, cancelWorker := context.WithCancel(runCtx)
		defer cancelWorker()
		var mine int
		w, err := workrow.NewWorker(workrow.Config[int64, chaosRow]{
			Store:       st,
			Eligible:    chaosLive,
			Order:       ix.Order,
			OnClaim:     []workrow.Set{workrow.Add("attempts", 1)},
			Attempt:     func(r chaosRow) int { return r.Attempts },
			MaxAttempts: maxAttempts,
			Backoff:     workrow.Steps{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond},
			OnComplete: func(now time.Time) []workrow.Set {
				return []workrow.Set{workrow.Assign("completed_at", now), workrow.Add("completions", 1)}
			},
			OnFail: func(_ time.Time, err error) []workrow.Set {
				return []workrow.Set{workrow.Assign("last_error", err.Error())}
			},
			OnPark: func(now time.Time, err error) []workrow.Set {
				return []workrow.Set{workrow.Assign("parked_at", now), workrow.Assign("last_error", err.Error())}
			},
			BatchSize:     25,
			Lease:         lease,
			FlushInterval: 50 * time.Millisecond,
			IdleDelay:     20 * time.Millisecond,
			ErrorDelay:    50 * time.Millisecond,
			StoreTimeout:  5 * time.Second,
			Handler: func(hctx context.Context, c workrow.Claimed[int64, chaosRow]) workrow.Outcome {
				calls.Add(1)
				mine++
				if g == workers-1 && mine == 150 {
					cancelWorker() // this worker shuts down mid-batch
					<-hctx.Done()
					return workrow.Fail(hctx.Err())
				}
				switch r := rng.Float64(); {
				case c.ID%1000 == 0:
					poisoned.Add(1)
					return workrow.Fail(errors.New("poison"))
				case r < 0.01:
					stalls.Add(1)
					thaw := make(chan struct{})
					st.frozen.Store(&thaw)
					time.Sleep(stall) // the whole worker freezes, context ignored
					st.frozen.Store(nil)
					close(thaw)
				case r < 0.06:
					failed.Add(1)
					return workrow.Fail(errors.New("remote said 503")).RetryAfter(time.Duration(rng.IntN(3)) * time.Millisecond)
				}
				hmu.Lock()
				handled[c.ID]++
				hmu.Unlock()
				return workrow.Complete()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = w.Run(wctx) })
	}

	start := time.Now()
	for {
		var open int
		if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM chaos WHERE completed_at IS NULL AND parked_at IS NULL`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 0 {
			break
		}
		if time.Since(start) > 90*time.Second {
			stopAll()
			wg.Wait()
			t.Fatalf("%d rows neither completed nor parked after 90s", open)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	stopAll()
	wg.Wait()

	type final struct {
		id                         int64
		attempts, completions, fin int
		completed, parked          bool
		completedBy                *string
	}
	res, err := env.Pool.Query(ctx, `SELECT id, attempts, completions, finalizes, completed_at IS NOT NULL, parked_at IS NOT NULL, completed_by FROM chaos`)
	if err != nil {
		t.Fatal(err)
	}
	table, err := pgx.CollectRows(res, func(r pgx.CollectableRow) (final, error) {
		var f final
		err := r.Scan(&f.id, &f.attempts, &f.completions, &f.fin, &f.completed, &f.parked, &f.completedBy)
		return f, err
	})
	if err != nil {
		t.Fatal(err)
	}
	clog.mu.Lock()
	defer clog.mu.Unlock()
	hmu.Lock()
	defer hmu.Unlock()
	var completed, parked int
	for _, f := range table {
		switch {
		case f.completed && !f.parked:
			completed++
			if f.completions != 1 || len(clog.completedBy[f.id]) != 1 || f.completedBy == nil || *f.completedBy != clog.completedBy[f.id][0] {
				t.Errorf("row %d: %d completions in the table, owned completions %v, completed_by %v; want exactly one, by the same lock",
					f.id, f.completions, clog.completedBy[f.id], f.completedBy)
			}
			if handled[f.id] < 1 {
				t.Errorf("row %d is completed but no handler reported success for it", f.id)
			}
		case f.parked && !f.completed:
			parked++
			if f.completions != 0 || f.attempts < maxAttempts {
				t.Errorf("row %d parked with %d completions after %d attempts", f.id, f.completions, f.attempts)
			}
		default:
			t.Errorf("row %d: completed=%v parked=%v", f.id, f.completed, f.parked)
		}
		if f.fin != clog.ownedFinalizes[f.id] {
			t.Errorf("row %d: the table counted %d finalizes, the stores reported %d as owned", f.id, f.fin, clog.ownedFinalizes[f.id])
		}
	}
	var violations int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM chaos_violations`).Scan(&violations); err != nil {
		t.Fatal(err)
	}
	if violations != 0 {
		t.Errorf("%d finalizes by a stale lock id changed a row", violations)
	}
	var twice int
	for _, n := range handled {
		if n > 1 {
			twice++
		}
	}
	t.Logf("%d rows in %v: %d completed, %d parked; %d handler calls, %d failures, %d poisoned, %d stalls; %d claims; "+
		"%d finalizes refused as stale; %d rows whose handler succeeded more than once (at least once delivery)",
		len(table), took.Round(time.Millisecond), completed, parked, calls.Load(), failed.Load(), poisoned.Load(), stalls.Load(),
		clog.claims, clog.stale, twice)
	if len(table) != rows || parked < rows/1000 {
		t.Errorf("%d rows, %d parked; want %d rows and at least the %d poisoned ones parked", len(table), parked, rows, rows/1000)
	}
	if stalls.Load() == 0 || clog.stale == 0 {
		t.Errorf("no stall (%d) or no stale finalize (%d): the chaos did not exercise lost leases", stalls.Load(), clog.stale)
	}
}
