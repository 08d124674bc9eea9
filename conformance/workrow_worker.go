package conformance

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// The store under workrow.Worker: several workers, on both stores, finish
// every row exactly once, with one handler each and with many.

func (s *workRowsSuite) workerChecks() []check {
	return area(s.setup,
		subtest[workRowsBundle]{"WorkersCompleteEveryRowOnce", func(t *testing.T, env workRowsBundle) { s.workers(t, env, 1, false) }},
		subtest[workRowsBundle]{"ConcurrentHandlersCompleteEveryRowOnce", func(t *testing.T, env workRowsBundle) { s.workers(t, env, wrConcurrency, true) }},
	)
}

// perClaim is a Store without its other methods: a Worker over it
// finalizes each claim with FinalizeMany, even when the store is a
// workrow.ClaimsFinalizer.
type perClaim struct{ workrow.Store[int64, WorkRow] }

// workers burns the table down with wrWorkers Workers over both stores,
// each running concurrency handlers at once; with perClaimOnly they
// finalize through FinalizeMany alone (W12's pairing is FinalizeMany's),
// else through FinalizeClaims where the store has it.
func (s *workRowsSuite) workers(t *testing.T, env workRowsBundle, concurrency int, perClaimOnly bool) {
	h, ctx := env.h, env.ctx
	wrInsert(t, ctx, h, wrFresh(wrWorkerRows)...)

	var (
		mu        sync.Mutex
		successes = map[int64]int{}
		failures  = map[int64]int{}
	)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for g := range wrWorkers {
		st := h.Store
		if g%2 == 1 {
			st = h.Second
		}
		if perClaimOnly {
			st = perClaim{st}
		}
		w, err := workrow.NewWorker(workrow.Config[int64, WorkRow]{
			Store:    st,
			Eligible: wrEligible,
			Order:    WorkRowsOrder,
			OnClaim:  []workrow.Set{workrow.Add("attempts", 1)},
			Attempt:  func(r WorkRow) int { return r.Attempts },
			OnComplete: func(now time.Time) []workrow.Set {
				return []workrow.Set{workrow.Assign("completed_at", now)}
			},
			OnFail: func(_ time.Time, err error) []workrow.Set {
				return []workrow.Set{workrow.Assign("last_error", err.Error())}
			},
			Backoff:     workrow.Steps{20 * time.Millisecond},
			BatchSize:   16,
			Concurrency: concurrency,
			Lease:       30 * time.Second,
			IdleDelay:   20 * time.Millisecond,
			Handler: func(_ context.Context, c workrow.Claimed[int64, WorkRow]) workrow.Outcome {
				firstFails := c.ID%7 == 0 && c.Row.Attempts == 1
				if concurrency > 1 && !firstFails {
					// Handlers overlap, and a failing row finishes ahead of
					// rows claimed before it: the finalize gets its rows out
					// of claim order.
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				if firstFails {
					failures[c.ID]++
					return workrow.Fail(errors.New("first attempt fails"))
				}
				successes[c.ID]++
				return workrow.Complete()
			},
		})
		if err != nil {
			t.Fatalf("NewWorker: %v", err)
		}
		wg.Go(func() { _ = w.Run(runCtx) })
	}
	deadline := time.Now().Add(time.Minute)
	for {
		state := wrRead(t, ctx, h)
		left := 0
		for _, r := range state {
			if r.CompletedAt == nil {
				left++
			}
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			stop()
			wg.Wait()
			t.Fatalf("%d rows still not completed after a minute", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	wg.Wait()

	state := wrRead(t, ctx, h)
	mu.Lock()
	defer mu.Unlock()
	for id, r := range state {
		wantAttempts := 1
		if id%7 == 0 {
			wantAttempts = 2
		}
		if successes[id] != 1 || r.Attempts != wantAttempts || !r.LockID.IsZero() || !r.LockedUntil.IsZero() {
			t.Fatalf("row %d: %d successful handler calls, state %s; want 1 call, %d attempts, unlocked",
				id, successes[id], wrDescribe(r), wantAttempts)
		}
		if id%7 == 0 && (failures[id] != 1 || r.LastError == nil) {
			t.Fatalf("row %d: %d failures, state %s; want its first attempt's failure recorded", id, failures[id], wrDescribe(r))
		}
	}
	if n := len(slices.Collect(maps.Keys(successes))); n != wrWorkerRows {
		t.Fatalf("%d rows handled; want %d", n, wrWorkerRows)
	}
}
