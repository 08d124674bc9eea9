package conformance

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// Claiming: eligible, free rows, in order, each to one claim per lease,
// with the claim's own sets applied.

func (s *workRowsSuite) claimChecks() []check {
	return area(s.setup,
		subtest[workRowsBundle]{"ClaimTakesEligibleRowsInOrderUpToTheBatchSize", s.claimOrder},
		subtest[workRowsBundle]{"ConcurrentClaimersNeverShareARow", s.concurrentClaimers},
		subtest[workRowsBundle]{"ExpiryMakesARowClaimableAgain", s.expiry},
		subtest[workRowsBundle]{"OnClaimCountsAttemptsEvenWhenTheWorkerDies", s.onClaimAttempts},
		subtest[workRowsBundle]{"FailureDelaysTheRowWithoutBlockingTheHead", s.failureVisibility},
		subtest[workRowsBundle]{"CompletedRowsLeaveTheClaimIndex", s.claimIndex},
	)
}

func (s *workRowsSuite) claimOrder(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
	t0 := wrBase()
	rows := wrFresh(10)
	for i := range rows {
		rows[i].Seq = int64(100 - i) // queue order is the reverse of the ids
	}
	done := t0.Add(-time.Hour)
	rows = append(rows, WorkRow{ID: 11, Seq: 1, CompletedAt: &done}, WorkRow{ID: 12, Seq: 2, Attempts: wrMaxAttempts})
	wrInsert(t, ctx, h, rows...)

	sp := wrSpec(t0, 4)
	got := wrClaim(t, ctx, h.Store, sp)
	if want := []int64{10, 9, 8, 7}; !slices.Equal(wrIDs(got), want) {
		t.Fatalf("claimed %v; want %v: wrEligible rows only, by seq, at most BatchSize", wrIDs(got), want)
	}
	for _, c := range got {
		if c.Row.Attempts != 1 {
			t.Fatalf("row %d came back with attempts %d; the returned row must show OnClaim's effect (1)", c.ID, c.Row.Attempts)
		}
	}
	state := wrRead(t, ctx, h)
	for id, r := range state {
		claimed := id >= 7 && id <= 10
		if claimed && (r.LockID != sp.LockID || !r.LockedUntil.Equal(sp.LeaseUntil) || r.Attempts != 1) {
			t.Fatalf("claimed row %d is %s; want the claim's lock, lease end and attempt", id, wrDescribe(r))
		}
		if !claimed && (!r.LockID.IsZero() || !r.LockedUntil.IsZero()) {
			t.Fatalf("unclaimed row %d is %s; it must not be stamped", id, wrDescribe(r))
		}
	}
	rest := wrClaim(t, ctx, h.Store, wrSpec(t0, 100))
	if want := []int64{6, 5, 4, 3, 2, 1}; !slices.Equal(wrIDs(rest), want) {
		t.Fatalf("second claim took %v; want %v (never the completed row 11 nor the exhausted row 12)", wrIDs(rest), want)
	}
}

func (s *workRowsSuite) concurrentClaimers(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(wrConcurrentRow)...)

	var (
		mu      sync.Mutex
		byRow   = map[int64][]workrow.LockID{}
		total   atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, wrClaimers)
		timeout = time.Now().Add(time.Minute)
	)
	for g := range wrClaimers {
		st := h.Store
		if g%2 == 1 {
			st = h.Second
		}
		wg.Go(func() {
			for total.Load() < wrConcurrentRow {
				if time.Now().After(timeout) {
					errs <- fmt.Errorf("claimer %d: rows still unclaimed after a minute", g)
					return
				}
				sp := wrSpec(t0, 7) // every claim within the same lease period
				got, err := st.Claim(ctx, sp)
				if err != nil {
					errs <- fmt.Errorf("claimer %d: %w", g, err)
					return
				}
				mu.Lock()
				for _, c := range got {
					byRow[c.ID] = append(byRow[c.ID], sp.LockID)
				}
				mu.Unlock()
				total.Add(int64(len(got)))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for id, locks := range byRow {
		if len(locks) > 1 {
			t.Fatalf("row %d was handed to %d claims within one lease period", id, len(locks))
		}
	}
	state := wrRead(t, ctx, h)
	if len(byRow) != wrConcurrentRow {
		t.Fatalf("%d distinct rows claimed; want %d", len(byRow), wrConcurrentRow)
	}
	for id, locks := range byRow {
		if state[id].LockID != locks[0] {
			t.Fatalf("row %d carries lock %v, not that of the claim that returned it (%v)", id, state[id].LockID, locks[0])
		}
	}
}

func (s *workRowsSuite) expiry(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(1)...)

	first := wrSpec(t0, 1)
	wrClaim(t, ctx, h.Store, first)
	if got := wrClaim(t, ctx, h.Second, wrSpec(t0.Add(wrLease/2), 1)); len(got) != 0 {
		t.Fatalf("a row under a live lease was claimed again: %v", wrIDs(got))
	}
	// Nobody released anything: at the lease end the row is free again.
	again := wrSpec(first.LeaseUntil, 1)
	if got := wrClaim(t, ctx, h.Second, again); !slices.Equal(wrIDs(got), []int64{1}) {
		t.Fatalf("at its lease end the row was not claimable: got %v", wrIDs(got))
	}
	if r := wrRead(t, ctx, h)[1]; r.LockID != again.LockID || r.Attempts != 2 {
		t.Fatalf("reclaimed row is %s; want the new lock and 2 attempts", wrDescribe(r))
	}
}

func (s *workRowsSuite) onClaimAttempts(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(1)...)

	// A worker that dies mid-call never finalizes: each claim still counts,
	// so a row that crashes its workers stops being claimed.
	for attempt := 1; attempt <= wrMaxAttempts; attempt++ {
		now := t0.Add(time.Duration(attempt) * 2 * wrLease)
		got := wrClaim(t, ctx, h.Store, wrSpec(now, 1))
		if len(got) != 1 || got[0].Row.Attempts != attempt {
			t.Fatalf("claim %d returned %+v; want the row with attempts %d", attempt, got, attempt)
		}
		if r := wrRead(t, ctx, h)[1]; r.Attempts != attempt {
			t.Fatalf("after claim %d the table says %d attempts", attempt, r.Attempts)
		}
	}
	if got := wrClaim(t, ctx, h.Store, wrSpec(t0.Add(100*wrLease), 1)); len(got) != 0 {
		t.Fatalf("a row with %d attempts was claimed again; the predicate allows %d", wrMaxAttempts, wrMaxAttempts-1)
	}
}

func (s *workRowsSuite) failureVisibility(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(3)...)

	sp := wrSpec(t0, 1)
	if got := wrClaim(t, ctx, h.Store, sp); !slices.Equal(wrIDs(got), []int64{1}) {
		t.Fatalf("claimed %v; want the head, row 1", wrIDs(got))
	}
	retryAt := t0.Add(10 * time.Minute)
	boom := "503 from the remote side"
	wrFinalize(t, ctx, h.Store, sp.LockID, workrow.Final[int64]{ID: 1, Set: []workrow.Set{workrow.Assign("last_error", boom)}, VisibleAfter: retryAt})
	if r := wrRead(t, ctx, h)[1]; !r.LockID.IsZero() || !r.LockedUntil.Equal(retryAt) || r.LastError == nil || *r.LastError != boom {
		t.Fatalf("failed row is %s; want no lock, invisible until %v, the error recorded", wrDescribe(r), retryAt)
	}
	for i, want := range []int64{2, 3} {
		next := wrSpec(t0.Add(time.Duration(i+1)*time.Second), 1)
		if got := wrClaim(t, ctx, h.Store, next); !slices.Equal(wrIDs(got), []int64{want}) {
			t.Fatalf("next claim took %v; want row %d: a failed head must not block the queue", wrIDs(got), want)
		}
		wrFinalize(t, ctx, h.Store, next.LockID, workrow.Final[int64]{ID: want, Set: wrComplete(t0)})
	}
	if got := wrClaim(t, ctx, h.Store, wrSpec(retryAt.Add(-time.Millisecond), 10)); len(got) != 0 {
		t.Fatalf("the failed row was claimed before its visibility: %v", wrIDs(got))
	}
	got := wrClaim(t, ctx, h.Store, wrSpec(retryAt, 10))
	if !slices.Equal(wrIDs(got), []int64{1}) || got[0].Row.Attempts != 2 || got[0].Row.LastError == nil {
		t.Fatalf("at its visibility the failed row came back as %+v; want row 1, attempt 2, its error kept", got)
	}
}

func (s *workRowsSuite) claimIndex(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(3)...)

	sp := wrSpec(t0, 3)
	wrClaim(t, ctx, h.Store, sp)
	owned := wrFinalize(t, ctx, h.Store, sp.LockID,
		workrow.Final[int64]{ID: 1, Set: wrComplete(t0)},
		workrow.Final[int64]{ID: 2, Set: []workrow.Set{workrow.Assign("last_error", "timeout")}, VisibleAfter: t0.Add(time.Minute)},
		workrow.Final[int64]{ID: 3},
	)
	if !slices.Equal(owned, []bool{true, true, true}) {
		t.Fatalf("FinalizeMany by the owner = %v", owned)
	}
	if !s.f.NoClaimIndex {
		indexed, err := h.ClaimIndexed(ctx)
		if err != nil {
			t.Fatalf("ClaimIndexed: %v", err)
		}
		slices.Sort(indexed)
		if !slices.Equal(indexed, []int64{2, 3}) {
			t.Fatalf("the claim index holds %v; want [2 3]: a completed row must leave it, failed and released rows stay", indexed)
		}
	}
	if got := wrClaim(t, ctx, h.Store, wrSpec(t0.Add(time.Hour), 10)); !slices.Equal(wrIDs(got), []int64{2, 3}) {
		t.Fatalf("later claim took %v; want [2 3], never the completed row", wrIDs(got))
	}
}
