package workrow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// tracker records which handlers run at once, and in what order rows start
// and finish.
type tracker struct {
	mu       sync.Mutex
	running  int
	most     int
	started  []int64
	finished []int64
}

func (tr *tracker) enter(id int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.running++
	tr.most = max(tr.most, tr.running)
	tr.started = append(tr.started, id)
}

func (tr *tracker) leave(id int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.running--
	tr.finished = append(tr.finished, id)
}

func (tr *tracker) snapshot() (most int, started, finished []int64) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.most, slices.Clone(tr.started), slices.Clone(tr.finished)
}

func TestWorker_ConcurrencyRunsThatManyHandlersAtOnceFedByOneClaimLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(40)
		start := time.Now()
		tr := &tracker{}
		var mu sync.Mutex
		startedAt := map[time.Duration][]int64{}
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			tr.enter(c.ID)
			defer tr.leave(c.ID)
			mu.Lock()
			startedAt[time.Since(start)] = append(startedAt[time.Since(start)], c.ID)
			mu.Unlock()
			time.Sleep(time.Second)
			return workrow.Complete()
		})
		cfg.Concurrency = 4
		cfg.BatchSize = 2
		cfg.IdleDelay = time.Minute
		runWorker(t, newWorker(t, cfg))

		time.Sleep(30 * time.Second)
		if most, _, _ := tr.snapshot(); most != 4 {
			t.Fatalf("at most %d handlers ran at once; want Concurrency = 4", most)
		}
		// Rows start in queue order, four at a time; within one instant
		// the handlers race, so each second's four are compared as a set.
		mu.Lock()
		defer mu.Unlock()
		for k := range int64(10) {
			got := slices.Sorted(slices.Values(startedAt[time.Duration(k)*time.Second]))
			if want := seq(4*k+1, 4*k+4); !slices.Equal(got, want) {
				t.Fatalf("rows started at %ds: %v; want %v", k, got, want)
			}
		}
		var last time.Time
		for id := int64(1); id <= 40; id++ {
			j, lock, _ := store.get(id)
			if j.CompletedAt == nil || !lock.IsZero() {
				t.Fatalf("row %d: completed=%v lock=%v; want completed and unlocked", id, j.CompletedAt, lock)
			}
			last = maxTime(last, *j.CompletedAt)
		}
		// 40 one-second rows on 4 handlers: 10s when the claims keep up.
		if took := last.Sub(start); took != 10*time.Second {
			t.Fatalf("the last row finished after %v; want 10s (4 at a time, no handler idle)", took)
		}
	})
}

func TestWorker_ConcurrencyClaimsAsHandlersFreeUpAndRowsFinishOutOfOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(6)
		tr := &tracker{}
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			tr.enter(c.ID)
			defer tr.leave(c.ID)
			if c.ID == 1 {
				time.Sleep(10 * time.Second) // one slow row does not hold back the rest
			} else {
				time.Sleep(time.Second)
			}
			return workrow.Complete()
		})
		cfg.Concurrency = 2
		cfg.BatchSize = 1
		cfg.IdleDelay = time.Minute
		runWorker(t, newWorker(t, cfg))

		time.Sleep(5*time.Second + time.Millisecond)
		_, _, finished := tr.snapshot()
		if want := []int64{2, 3, 4, 5, 6}; !slices.Equal(finished, want) {
			t.Fatalf("after 5s finished %v; want %v while row 1 still runs", finished, want)
		}
		time.Sleep(5 * time.Second)
		_, started, finished := tr.snapshot()
		// Rows 1 and 2 start at the same instant on two handlers, in
		// either order; the rest one second apart.
		slices.Sort(started[:2])
		if !slices.Equal(started, seq(1, 6)) || !slices.Equal(finished, []int64{2, 3, 4, 5, 6, 1}) {
			t.Fatalf("started %v, finished %v; want started in queue order, row 1 last to finish", started, finished)
		}
		if j, _, _ := store.get(1); j.CompletedAt == nil {
			t.Fatal("the slow row was not completed")
		}
	})
}

func TestWorker_ConcurrencyKeepsAtMostMaxOfConcurrencyAndBatchSizeRowsInHand(t *testing.T) {
	for _, tc := range []struct {
		concurrency, batch int
		// claims after each gate opens: the hand is refilled only when a
		// whole batch fits in max(concurrency, batch) rows.
		wantClaims []int
	}{
		{concurrency: 3, batch: 5, wantClaims: []int{1, 1, 1, 1, 1, 2}},
		{concurrency: 10, batch: 3, wantClaims: []int{3, 3, 4, 4, 4, 5}},
	} {
		t.Run(fmt.Sprintf("concurrency=%d/batch=%d", tc.concurrency, tc.batch), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := newJobs(100)
				gates := map[int64]chan struct{}{}
				for id := int64(1); id <= 100; id++ {
					gates[id] = make(chan struct{})
				}
				tr := &tracker{}
				cfg := jobConfig(store, func(ctx context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
					tr.enter(c.ID)
					defer tr.leave(c.ID)
					select {
					case <-gates[c.ID]:
					case <-ctx.Done():
					}
					return workrow.Complete()
				})
				cfg.Concurrency = tc.concurrency
				cfg.BatchSize = tc.batch
				stop := runWorker(t, newWorker(t, cfg))

				synctest.Wait()
				var claims []int
				claimed, _ := store.counts()
				claims = append(claims, claimed)
				for id := int64(1); id <= 5; id++ {
					close(gates[id])
					synctest.Wait()
					claimed, _ := store.counts()
					claims = append(claims, claimed)
				}
				if !slices.Equal(claims, tc.wantClaims) {
					t.Fatalf("claims after opening gates 0..5: %v; want %v", claims, tc.wantClaims)
				}
				if most, _, _ := tr.snapshot(); most != tc.concurrency {
					t.Fatalf("at most %d handlers at once; want %d", most, tc.concurrency)
				}
				stop()
			})
		})
	}
}

func TestWorker_ConcurrencyRenewsTheRowsWaitingInHand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(4)
		start := time.Now()
		rec := &logRecorder{}
		cfg := jobConfig(store, func(context.Context, workrow.Claimed[int64, job]) workrow.Outcome {
			time.Sleep(3 * time.Minute) // three leases
			return workrow.Complete()
		})
		cfg.Concurrency = 2
		cfg.BatchSize = 4 // rows 3 and 4 wait for a handler
		cfg.Lease = time.Minute
		cfg.Logger = slog.New(rec)
		w := newWorker(t, cfg)
		done := make(chan error)
		go func() {
			_, err := w.RunBatch(context.Background())
			done <- err
		}()
		time.Sleep(2*time.Minute + 50*time.Second)
		for _, id := range []int64{3, 4} {
			_, lock, until := store.get(id)
			if lock.IsZero() || !until.After(time.Now()) {
				t.Fatalf("row %d, waiting for a handler at %v: lock=%v until %v; want still leased", id, time.Since(start), lock, until.Sub(start))
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for id := int64(1); id <= 4; id++ {
			if j, _, _ := store.get(id); j.CompletedAt == nil {
				t.Fatalf("row %d was not completed: its lease lapsed while it waited in hand", id)
			}
		}
		if rec.has("taken by another worker") || rec.has("lease ran out") {
			t.Fatalf("a row in hand was lost: %v", rec.messages())
		}
	})
}

func TestWorker_ConcurrencyLeaseRunningOutCancelsEveryRunningHandlerAndReleasesTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(5)
		store.renewErr = errors.New("connection refused")
		start := time.Now()
		var mu sync.Mutex
		causes := map[int64]error{}
		cfg := jobConfig(store, func(ctx context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			<-ctx.Done()
			mu.Lock()
			defer mu.Unlock()
			if time.Since(start) == time.Minute {
				causes[c.ID] = context.Cause(ctx)
			}
			return workrow.Fail(ctx.Err())
		})
		cfg.Concurrency = 3
		cfg.BatchSize = 5
		if _, err := newWorker(t, cfg).RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(causes) != 3 {
			t.Fatalf("%d handlers ended at the lease end (%v); want the 3 running ones", len(causes), causes)
		}
		for id, cause := range causes {
			if id > 3 || !errors.Is(cause, workrow.ErrLeaseExpired) {
				t.Fatalf("row %d ended with %v; want rows 1-3 cancelled with ErrLeaseExpired", id, cause)
			}
		}
		for id := int64(1); id <= 5; id++ {
			j, lock, until := store.get(id)
			if !lock.IsZero() || !until.IsZero() || j.LastError != nil {
				t.Fatalf("row %d: lock=%v until=%v error=%v; want released without a failure counted", id, lock, until, j.LastError)
			}
		}
	})
}

func TestWorker_ConcurrencyShutdownFinalizesDecidedRowsAndReleasesTheRestBeforeRunReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(8)
		ctx, cancel := context.WithCancel(context.Background())
		cfg := jobConfig(store, func(hctx context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			if c.ID <= 2 {
				return workrow.Complete()
			}
			<-hctx.Done() // rows 3.. are at work when shutdown comes
			return workrow.Fail(hctx.Err())
		})
		cfg.Concurrency = 4
		cfg.BatchSize = 8
		w := newWorker(t, cfg)
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		time.Sleep(time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v; want nil", err)
		}
		for id := int64(1); id <= 8; id++ {
			j, lock, until := store.get(id)
			wantDone := id <= 2
			if (j.CompletedAt != nil) != wantDone || !lock.IsZero() || !until.IsZero() || j.LastError != nil {
				t.Fatalf("row %d when Run returned: completed=%v lock=%v until=%v error=%v; want completed=%v, unlocked, no failure",
					id, j.CompletedAt != nil, lock, until, j.LastError, wantDone)
			}
		}
	})
}

func TestWorker_ConcurrencyRowTakenByAnotherWorkerCancelsOnlyItsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(3)
		start := time.Now()
		var mu sync.Mutex
		causes := map[int64]error{}
		cfg := jobConfig(store, func(ctx context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
			mu.Lock()
			causes[c.ID] = context.Cause(ctx)
			mu.Unlock()
			return workrow.Complete()
		})
		cfg.Concurrency = 3
		cfg.BatchSize = 3
		w := newWorker(t, cfg)
		go func() {
			time.Sleep(30 * time.Second)
			store.steal(2, start.Add(time.Hour))
		}()
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !errors.Is(causes[2], workrow.ErrNotOwned) || causes[1] != nil || causes[3] != nil {
			t.Fatalf("handler causes %v; want only row 2's cancelled with ErrNotOwned", causes)
		}
		for id := int64(1); id <= 3; id++ {
			j, _, _ := store.get(id)
			if (j.CompletedAt != nil) != (id != 2) {
				t.Fatalf("row %d completed=%v; want rows 1 and 3 completed, the stolen row 2 untouched", id, j.CompletedAt != nil)
			}
		}
	})
}

func TestWorker_ConcurrencyStillFinalizesEachBatchInOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(100)
		cfg := jobConfig(store, complete)
		cfg.Concurrency = 10
		cfg.BatchSize = 10
		cfg.IdleDelay = time.Minute
		cfg.PollOnly = true // one empty claim, then the pause; wake_test.go has the listening
		runWorker(t, newWorker(t, cfg))
		time.Sleep(time.Second)
		for id := int64(1); id <= 100; id++ {
			if j, _, _ := store.get(id); j.CompletedAt == nil {
				t.Fatalf("row %d was not completed", id)
			}
		}
		if claims, finalizes := store.counts(); claims != 11 || finalizes != 10 {
			t.Fatalf("%d claims and %d finalize calls for 100 rows in batches of 10; want 11 and 10", claims, finalizes)
		}
	})
}

func seq(from, to int64) []int64 {
	var out []int64
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// slowStore makes every Claim take 10ms and every FinalizeMany a second,
// and records the most finalizes running when a claim started.
type slowStore struct {
	*memStore[job]
	mu            sync.Mutex
	running, most int
}

func (s *slowStore) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, job], error) {
	s.mu.Lock()
	s.most = max(s.most, s.running)
	s.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	return s.memStore.Claim(ctx, spec)
}

func (s *slowStore) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	defer s.finalizing(1)()
	return s.memStore.FinalizeMany(ctx, lock, finals)
}

// FinalizeClaims counts each claim of the call as a finalize running.
func (s *slowStore) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[int64]) ([][]bool, error) {
	defer s.finalizing(len(claims))()
	return s.memStore.FinalizeClaims(ctx, claims)
}

// finalizing counts n finalizes running for a second; the func it returns
// ends them.
func (s *slowStore) finalizing(n int) func() {
	s.mu.Lock()
	s.running += n
	s.mu.Unlock()
	time.Sleep(time.Second)
	return func() {
		s.mu.Lock()
		s.running -= n
		s.mu.Unlock()
	}
}

func TestWorker_ConcurrencyFastHandlersDoNotRunAheadOfTheFinalizes(t *testing.T) {
	// Rows not yet finalized stay in the claim index, where every claim
	// steps over them: claiming on while finalizes queue up would slow
	// each claim down. A claim is let through while fewer than twice as
	// many batches as the Run may claim at once are being claimed or
	// finalized; a batch claimed just before may finish, and its finalize
	// start, between that check and the claim's call. With one claim in
	// flight that is two finalizes at most; with MaxClaimsInFlight, twice
	// that. Without the bound, finalizes of 1s pile up behind claims of
	// 10ms, as deep as there are batches (39 here).
	for _, tc := range []struct {
		concurrency int
		most        int
		perClaim    bool
	}{
		{concurrency: 19, most: 2},                              // one claim at a time
		{concurrency: 100, most: 2 * workrow.MaxClaimsInFlight}, // claims alongside
		{concurrency: 19, most: 2, perClaim: true},
		{concurrency: 100, most: 2 * workrow.MaxClaimsInFlight, perClaim: true},
	} {
		t.Run(fmt.Sprintf("concurrency=%d/perClaim=%v", tc.concurrency, tc.perClaim), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &slowStore{memStore: newJobs(400)}
				var st workrow.Store[int64, job] = store
				if tc.perClaim {
					st = perClaim[job]{store}
				}
				cfg := jobConfig(st, complete)
				cfg.Concurrency = tc.concurrency
				cfg.BatchSize = 10
				cfg.IdleDelay = time.Minute
				cfg.PollOnly = true // one empty claim, then the pause; wake_test.go has the listening
				runWorker(t, newWorker(t, cfg))
				time.Sleep(time.Minute)
				store.mu.Lock()
				most := store.most
				store.mu.Unlock()
				if most < 1 || most > tc.most {
					t.Fatalf("a claim started while %d finalizes ran; want 1 to %d (claims overlap finalizes, and finalizes do not pile up)", most, tc.most)
				}
				for id := int64(1); id <= 400; id++ {
					if j, _, _ := store.get(id); j.CompletedAt == nil {
						t.Fatalf("row %d was not completed", id)
					}
				}
			})
		})
	}
}

// claimCounter makes every Claim take a second, and records the most
// claims in flight at once.
type claimCounter struct {
	*memStore[job]
	mu            sync.Mutex
	running, most int
}

func (s *claimCounter) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, job], error) {
	s.mu.Lock()
	s.running++
	s.most = max(s.most, s.running)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}()
	time.Sleep(time.Second)
	return s.memStore.Claim(ctx, spec)
}

func TestWorker_ConcurrencyClaimsAsManyBatchesAtOnceAsTheHandHoldsWhileTheQueueIsBusy(t *testing.T) {
	for _, tc := range []struct {
		concurrency, batch, rows int
		claims                   int
	}{
		{concurrency: 19, batch: 10, rows: 500, claims: 1},                          // the hand holds one batch
		{concurrency: 30, batch: 10, rows: 500, claims: 3},                          // three
		{concurrency: 100, batch: 10, rows: 500, claims: workrow.MaxClaimsInFlight}, // ten, capped
		{concurrency: 100, batch: 10, rows: 5, claims: 1},                           // not busy: the first claim was short
	} {
		t.Run(fmt.Sprintf("concurrency=%d/batch=%d/rows=%d", tc.concurrency, tc.batch, tc.rows), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &claimCounter{memStore: newJobs(tc.rows)}
				cfg := jobConfig(store, complete)
				cfg.Concurrency = tc.concurrency
				cfg.BatchSize = tc.batch
				cfg.IdleDelay = time.Minute
				cfg.PollOnly = true
				runWorker(t, newWorker(t, cfg))
				time.Sleep(time.Duration(tc.rows/tc.batch+5) * time.Second)
				store.mu.Lock()
				most := store.most
				store.mu.Unlock()
				if most != tc.claims {
					t.Fatalf("at most %d claims were in flight at once; want %d", most, tc.claims)
				}
				for id := int64(1); id <= int64(tc.rows); id++ {
					if j, _, _ := store.get(id); j.CompletedAt == nil {
						t.Fatalf("row %d was not completed", id)
					}
				}
			})
		})
	}
}

func TestWorker_ConcurrencyShutdownWaitsForTheClaimsInFlightAndHandsTheirRowsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &claimCounter{memStore: newJobs(100)}
		ctx, cancel := context.WithCancel(context.Background())
		cfg := jobConfig(store, complete)
		cfg.Concurrency = 40
		cfg.BatchSize = 10
		cfg.PollOnly = true
		w := newWorker(t, cfg)
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		// The first claim comes back full at 1s; the claims beside it are
		// in flight when the shutdown comes.
		time.Sleep(1500 * time.Millisecond)
		store.mu.Lock()
		inFlight := store.running
		store.mu.Unlock()
		if inFlight < 2 {
			t.Fatalf("%d claims in flight at the shutdown; the test needs several", inFlight)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v; want nil", err)
		}
		store.mu.Lock()
		running := store.running
		store.mu.Unlock()
		if running != 0 {
			t.Fatalf("Run returned with %d claims still in flight", running)
		}
		for id := int64(1); id <= 100; id++ {
			if _, lock, until := store.get(id); !lock.IsZero() || !until.IsZero() {
				t.Fatalf("row %d is still leased (lock %v until %v) after Run returned", id, lock, until)
			}
		}
	})
}

func TestWorker_BatchesThatFinishDuringAFinalizeShareTheNextCall(t *testing.T) {
	// Over a ClaimsFinalizer, a batch that finishes while another's
	// finalize is in flight waits for it and goes into the next call,
	// with every other batch that finished meanwhile: with finalizes of a
	// second and claims of 10ms, 40 batches need far fewer than 40 calls,
	// and each row is still finalized once, by its own claim's lock.
	synctest.Test(t, func(t *testing.T) {
		store := &slowStore{memStore: newJobs(400)}
		cfg := jobConfig(store, complete)
		cfg.Concurrency, cfg.BatchSize = 100, 10
		cfg.IdleDelay, cfg.PollOnly = time.Minute, true
		runWorker(t, newWorker(t, cfg))
		time.Sleep(time.Minute)

		store.memStore.mu.Lock()
		calls := slices.Clone(store.memStore.claimsCalls)
		finalized := len(store.memStore.finalizes)
		store.memStore.mu.Unlock()
		if finalized != 40 {
			t.Fatalf("%d claims finalized; want the 40 batches once each", finalized)
		}
		if len(calls) == 0 || len(calls) >= 40 || slices.Max(calls) < 2 {
			t.Fatalf("FinalizeClaims calls carried %v claims; want batches that finished together in one call", calls)
		}
		for id := int64(1); id <= 400; id++ {
			if j, _, _ := store.get(id); j.CompletedAt == nil || j.Attempts != 1 {
				t.Fatalf("row %d: %+v; want completed after one attempt", id, j)
			}
		}
	})
}

func TestWorker_AFailedSharedFinalizeIsEveryBatchsError(t *testing.T) {
	// Each batch of a FinalizeClaims call that fails reports the failure
	// as its own, and its rows are left as they are, to come back when
	// their leases end.
	synctest.Test(t, func(t *testing.T) {
		store := &slowStore{memStore: newJobs(40)}
		store.memStore.finalizeErr = errors.New("connection reset")
		rec := &logRecorder{}
		cfg := jobConfig(store, complete)
		cfg.Concurrency, cfg.BatchSize = 40, 10
		cfg.IdleDelay, cfg.PollOnly = time.Minute, true
		cfg.Logger = slog.New(rec)
		stop := runWorker(t, newWorker(t, cfg))
		time.Sleep(5 * time.Second) // shorter than the lease: nothing is claimed twice
		stop()

		store.memStore.mu.Lock()
		calls := slices.Clone(store.memStore.claimsCalls)
		store.memStore.mu.Unlock()
		if len(calls) == 0 || slices.Max(calls) < 2 {
			t.Fatalf("FinalizeClaims calls carried %v claims; want one shared by several batches", calls)
		}
		failed := 0
		for _, m := range rec.messages() {
			if strings.Contains(m, "finalizing work rows failed") {
				failed++
			}
		}
		if want := 4; failed != want {
			t.Fatalf("%d batches logged the failed finalize; want each of the %d", failed, want)
		}
		for id := int64(1); id <= 40; id++ {
			if j, lock, _ := store.get(id); j.CompletedAt != nil || lock.IsZero() {
				t.Fatalf("row %d after a failed finalize: %+v lock=%v; want it untouched, locked until its lease ends", id, j, lock)
			}
		}
	})
}
