package conformance

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// WorkRow is a row of the work-rows suite's table. The factory creates, for
// each subtest, an empty table with these columns plus the two lock
// columns, and its claim index (WorkRowsOrder then id, partial over
// WorkRowsLive). In SQL:
//
//	id           bigint PRIMARY KEY
//	seq          bigint NOT NULL          -- the queue order
//	attempts     integer NOT NULL         -- counted at claim
//	completed_at timestamptz NULL         -- the live-row filter: IS NULL
//	last_error   text NULL
//	lock_id      uuid NULL
//	locked_until timestamptz NULL
type WorkRow struct {
	ID          int64      `db:"id"`
	Seq         int64      `db:"seq"`
	Attempts    int        `db:"attempts"`
	CompletedAt *time.Time `db:"completed_at"`
	LastError   *string    `db:"last_error"`
}

// WorkRowState is a row as the harness reads it back: with its lock
// columns, the zero LockID and time standing for NULL.
type WorkRowState struct {
	WorkRow
	LockID      workrow.LockID
	LockedUntil time.Time
}

// The claim index of the suite's table, and the live-row filter a store
// over it needs.
var (
	WorkRowsLive  = workrow.IsNull("completed_at")
	WorkRowsOrder = []workrow.Order{workrow.Asc("seq")}
)

// WorkRowsHarness is what a work-row store's factory returns for one
// subtest: a store over a fresh, empty table (see WorkRow) and the few
// operations the suite needs around it.
type WorkRowsHarness struct {
	// Store is the store under test.
	Store workrow.Store[int64, WorkRow]
	// Second, if set, is another store over the same table, as a second
	// node would have it (its own pool). Concurrent subtests spread over
	// both. nil means Store alone.
	Second workrow.Store[int64, WorkRow]
	// Insert adds rows as given, with NULL lock columns. Required.
	Insert func(ctx context.Context, rows []WorkRow) error
	// Read returns every row with its lock columns. Required.
	Read func(ctx context.Context) ([]WorkRowState, error)
	// ClaimIndexed returns the ids of the rows the claim index holds,
	// read through the index. Required unless WorkRowsFeatures.NoClaimIndex.
	ClaimIndexed func(ctx context.Context) ([]int64, error)
}

// WorkRowsFeatures declares what a work-row store cannot do. The zero value
// expects everything.
type WorkRowsFeatures struct {
	// NoClaimIndex means the store has no index to inspect; the claim
	// index subtest then only checks that finished rows are never claimed
	// again.
	NoClaimIndex bool
}

// Parameters of the work-rows subtests.
const (
	wrMaxAttempts   = 5
	wrLease         = time.Minute
	wrClaimers      = 8
	wrConcurrentRow = 400
	wrWorkerRows    = 300
	wrWorkers       = 4
	// wrConcurrency is the handlers per worker of the concurrent-handlers
	// subtest, above its batch size so that claims refill the hand while
	// handlers still run.
	wrConcurrency = 24
)

// RunWorkRows runs the workrow.Store contract against the stores the
// factory returns. Subtest names are stable, so a failure names the broken
// rule: ClaimTakesEligibleRowsInOrderUpToTheBatchSize,
// ConcurrentClaimersNeverShareARow, StaleFinalizeReturnsFalseAndChangesNothing,
// ExpiryMakesARowClaimableAgain, FailureDelaysTheRowWithoutBlockingTheHead,
// OnClaimCountsAttemptsEvenWhenTheWorkerDies, CompletedRowsLeaveTheClaimIndex,
// InvalidRequestsAreRefusedAndWriteNothing, FinalizeManyIsGuardedPerRow,
// RenewExtendsOnlyOwnedRows, ReleaseMakesARowClaimableAtOnce,
// WorkersCompleteEveryRowOnce, ConcurrentHandlersCompleteEveryRowOnce.
//
// Leases are judged by ClaimSpec.Now, so most subtests move time by
// passing later Nows rather than by sleeping; the workers subtest runs
// workrow.Worker in real time.
func RunWorkRows(t *testing.T, factory func(t *testing.T) WorkRowsHarness, features WorkRowsFeatures) {
	s := &workRowsSuite{factory: factory, f: features}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"ClaimTakesEligibleRowsInOrderUpToTheBatchSize", s.claimOrder},
		{"ConcurrentClaimersNeverShareARow", s.concurrentClaimers},
		{"StaleFinalizeReturnsFalseAndChangesNothing", s.staleFinalize},
		{"ExpiryMakesARowClaimableAgain", s.expiry},
		{"FailureDelaysTheRowWithoutBlockingTheHead", s.failureVisibility},
		{"OnClaimCountsAttemptsEvenWhenTheWorkerDies", s.onClaimAttempts},
		{"CompletedRowsLeaveTheClaimIndex", s.claimIndex},
		{"InvalidRequestsAreRefusedAndWriteNothing", s.invalidRequests},
		{"FinalizeManyIsGuardedPerRow", s.finalizeMany},
		{"RenewExtendsOnlyOwnedRows", s.renew},
		{"ReleaseMakesARowClaimableAtOnce", s.release},
		{"WorkersCompleteEveryRowOnce", func(t *testing.T) { s.workers(t, 1) }},
		{"ConcurrentHandlersCompleteEveryRowOnce", func(t *testing.T) { s.workers(t, wrConcurrency) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

type workRowsSuite struct {
	factory func(t *testing.T) WorkRowsHarness
	f       WorkRowsFeatures
}

func (s *workRowsSuite) harness(t *testing.T) WorkRowsHarness {
	t.Helper()
	h := s.factory(t)
	switch {
	case h.Store == nil:
		t.Fatal("conformance: the factory returned no Store")
	case h.Insert == nil || h.Read == nil:
		t.Fatal("conformance: the factory returned no Insert or Read")
	case h.ClaimIndexed == nil && !s.f.NoClaimIndex:
		t.Fatal("conformance: the factory returned no ClaimIndexed (declare NoClaimIndex if the store has no index)")
	}
	if h.Second == nil {
		h.Second = h.Store
	}
	return h
}

// base is a subtest's time origin, at the stores' microsecond resolution.
func wrBase() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// wrEligible is the suite's claim predicate: not completed, attempts left.
var wrEligible = workrow.And(workrow.IsNull("completed_at"), workrow.Lt("attempts", wrMaxAttempts))

func wrSpec(now time.Time, batch int) workrow.ClaimSpec {
	return workrow.ClaimSpec{
		LockID:     workrow.NewLockID(),
		Now:        now,
		LeaseUntil: now.Add(wrLease),
		BatchSize:  batch,
		Eligible:   wrEligible,
		Order:      WorkRowsOrder,
		OnClaim:    []workrow.Set{workrow.Add("attempts", 1)},
	}
}

func wrComplete(at time.Time) []workrow.Set { return []workrow.Set{workrow.Assign("completed_at", at)} }

func wrInsert(t *testing.T, ctx context.Context, h WorkRowsHarness, rows ...WorkRow) {
	t.Helper()
	if err := h.Insert(ctx, rows); err != nil {
		t.Fatalf("Insert: %v", err)
	}
}

// fresh returns n new rows, ids 1..n, queued in id order.
func wrFresh(n int) []WorkRow {
	rows := make([]WorkRow, n)
	for i := range rows {
		rows[i] = WorkRow{ID: int64(i + 1), Seq: int64(10 * (i + 1))}
	}
	return rows
}

func wrRead(t *testing.T, ctx context.Context, h WorkRowsHarness) map[int64]WorkRowState {
	t.Helper()
	rows, err := h.Read(ctx)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	out := make(map[int64]WorkRowState, len(rows))
	for _, r := range rows {
		out[r.ID] = r
	}
	return out
}

func wrClaim(t *testing.T, ctx context.Context, st workrow.Store[int64, WorkRow], sp workrow.ClaimSpec) []workrow.Claimed[int64, WorkRow] {
	t.Helper()
	got, err := st.Claim(ctx, sp)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	for _, c := range got {
		if c.ID != c.Row.ID {
			t.Fatalf("Claim returned id %d with a row whose id is %d", c.ID, c.Row.ID)
		}
	}
	return got
}

func wrIDs(claimed []workrow.Claimed[int64, WorkRow]) []int64 {
	out := make([]int64, len(claimed))
	for i, c := range claimed {
		out[i] = c.ID
	}
	return out
}

func wrFinalize(t *testing.T, ctx context.Context, st workrow.Store[int64, WorkRow], lock workrow.LockID, finals ...workrow.Final[int64]) []bool {
	t.Helper()
	owned, err := st.FinalizeMany(ctx, lock, finals)
	if err != nil {
		t.Fatalf("FinalizeMany: %v", err)
	}
	if len(owned) != len(finals) {
		t.Fatalf("FinalizeMany answered %d results for %d rows", len(owned), len(finals))
	}
	return owned
}

func wrSame(a, b WorkRowState) bool {
	eqTime := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	eqStr := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.ID == b.ID && a.Seq == b.Seq && a.Attempts == b.Attempts && eqTime(a.CompletedAt, b.CompletedAt) &&
		eqStr(a.LastError, b.LastError) && a.LockID == b.LockID && a.LockedUntil.Equal(b.LockedUntil)
}

func wrDescribe(r WorkRowState) string {
	s := fmt.Sprintf("{id %d seq %d attempts %d", r.ID, r.Seq, r.Attempts)
	if r.CompletedAt != nil {
		s += " completed " + r.CompletedAt.UTC().Format(time.RFC3339Nano)
	}
	if r.LastError != nil {
		s += fmt.Sprintf(" error %q", *r.LastError)
	}
	if !r.LockID.IsZero() {
		s += " lock " + r.LockID.String()[:8]
	}
	if !r.LockedUntil.IsZero() {
		s += " until " + r.LockedUntil.UTC().Format(time.RFC3339Nano)
	}
	return s + "}"
}

func (s *workRowsSuite) claimOrder(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *workRowsSuite) concurrentClaimers(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *workRowsSuite) staleFinalize(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(1)...)

	stalled := wrSpec(t0, 1)
	wrClaim(t, ctx, h.Store, stalled)
	// The stalled worker's lease runs out; another takes the row.
	thief := wrSpec(t0.Add(2*wrLease), 1)
	if got := wrClaim(t, ctx, h.Second, thief); !slices.Equal(wrIDs(got), []int64{1}) {
		t.Fatalf("after the lease ran out the row was not claimable again: got %v", wrIDs(got))
	}
	before := wrRead(t, ctx, h)[1]

	done := t0.Add(3 * wrLease)
	if owned := wrFinalize(t, ctx, h.Store, stalled.LockID, workrow.Final[int64]{ID: 1, Set: wrComplete(done)}); owned[0] {
		t.Fatal("a finalize by the stale lock id reported the row as owned")
	}
	if owned, err := h.Store.RenewMany(ctx, stalled.LockID, done.Add(time.Hour), []int64{1}); err != nil || len(owned) != 1 || owned[0] {
		t.Fatalf("RenewMany by the stale lock id = %v, %v; want [false]", owned, err)
	}
	if owned, err := h.Store.ReleaseMany(ctx, stalled.LockID, []int64{1}); err != nil || len(owned) != 1 || owned[0] {
		t.Fatalf("ReleaseMany by the stale lock id = %v, %v; want [false]", owned, err)
	}
	if after := wrRead(t, ctx, h)[1]; !wrSame(before, after) {
		t.Fatalf("stale calls changed the row:\nbefore %s\nafter  %s", wrDescribe(before), wrDescribe(after))
	}
	if owned := wrFinalize(t, ctx, h.Second, thief.LockID, workrow.Final[int64]{ID: 1, Set: wrComplete(done)}); !owned[0] {
		t.Fatal("the new owner's finalize failed")
	}
}

func (s *workRowsSuite) expiry(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *workRowsSuite) failureVisibility(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *workRowsSuite) onClaimAttempts(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *workRowsSuite) claimIndex(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *workRowsSuite) invalidRequests(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(3)...)
	held := wrSpec(t0, 1)
	wrClaim(t, ctx, h.Store, held)
	before := wrRead(t, ctx, h)

	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, workrow.ErrInvalidSpec) {
			t.Errorf("%s: err = %v; want one wrapping workrow.ErrInvalidSpec", what, err)
		}
	}
	for name, change := range map[string]func(*workrow.ClaimSpec){
		"zero LockID":       func(s *workrow.ClaimSpec) { s.LockID = workrow.LockID{} },
		"zero Now":          func(s *workrow.ClaimSpec) { s.Now = time.Time{} },
		"lease not ahead":   func(s *workrow.ClaimSpec) { s.LeaseUntil = s.Now },
		"lease in the past": func(s *workrow.ClaimSpec) { s.LeaseUntil = s.Now.Add(-time.Minute) },
		"batch 0":           func(s *workrow.ClaimSpec) { s.BatchSize = 0 },
		"batch over max":    func(s *workrow.ClaimSpec) { s.BatchSize = workrow.MaxBatchSize + 1 },
		"no predicate":      func(s *workrow.ClaimSpec) { s.Eligible = workrow.Cond{} },
		"empty And":         func(s *workrow.ClaimSpec) { s.Eligible = workrow.And() },
		"nil comparison":    func(s *workrow.ClaimSpec) { s.Eligible = workrow.Eq("completed_at", nil) },
		"empty column":      func(s *workrow.ClaimSpec) { s.Eligible = workrow.IsNull("") },
		"order twice":       func(s *workrow.ClaimSpec) { s.Order = []workrow.Order{workrow.Asc("seq"), workrow.Asc("seq")} },
		"zero OnClaim set":  func(s *workrow.ClaimSpec) { s.OnClaim = []workrow.Set{{}} },
		"Add of a string":   func(s *workrow.ClaimSpec) { s.OnClaim = []workrow.Set{workrow.Add("attempts", "1")} },
	} {
		sp := wrSpec(t0.Add(2*wrLease), 10)
		change(&sp)
		got, err := h.Store.Claim(ctx, sp)
		check("Claim with "+name, err)
		if len(got) != 0 {
			t.Errorf("Claim with %s returned rows", name)
		}
	}
	check("FinalizeMany with a zero lock", wrErr(h.Store.FinalizeMany(ctx, workrow.LockID{}, []workrow.Final[int64]{{ID: 1, Set: wrComplete(t0)}})))
	check("FinalizeMany with a row twice", wrErr(h.Store.FinalizeMany(ctx, held.LockID, []workrow.Final[int64]{{ID: 1, Set: wrComplete(t0)}, {ID: 1}})))
	check("FinalizeMany with Now in a set", wrErr(h.Store.FinalizeMany(ctx, held.LockID, []workrow.Final[int64]{{ID: 1, Set: []workrow.Set{workrow.Assign("completed_at", workrow.Now)}}})))
	check("RenewMany with a zero lock", wrErr(h.Store.RenewMany(ctx, workrow.LockID{}, t0.Add(time.Hour), []int64{1})))
	check("RenewMany with a zero lease end", wrErr(h.Store.RenewMany(ctx, held.LockID, time.Time{}, []int64{1})))
	check("ReleaseMany with a zero lock", wrErr(h.Store.ReleaseMany(ctx, workrow.LockID{}, []int64{1})))
	check("ReleaseMany with a row twice", wrErr(h.Store.ReleaseMany(ctx, held.LockID, []int64{1, 1})))

	after := wrRead(t, ctx, h)
	for id, b := range before {
		if !wrSame(b, after[id]) {
			t.Errorf("an invalid request changed row %d:\nbefore %s\nafter  %s", id, wrDescribe(b), wrDescribe(after[id]))
		}
	}
}

func wrErr[T any](_ T, err error) error { return err }

func (s *workRowsSuite) finalizeMany(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(3)...)

	mine := wrSpec(t0, 3)
	wrClaim(t, ctx, h.Store, mine)
	// Row 2 changes hands: released, then claimed by another worker.
	if owned, err := h.Store.ReleaseMany(ctx, mine.LockID, []int64{2}); err != nil || !slices.Equal(owned, []bool{true}) {
		t.Fatalf("ReleaseMany = %v, %v", owned, err)
	}
	other := wrSpec(t0.Add(time.Second), 1)
	if got := wrClaim(t, ctx, h.Second, other); !slices.Equal(wrIDs(got), []int64{2}) {
		t.Fatalf("other worker claimed %v; want [2]", wrIDs(got))
	}
	before := wrRead(t, ctx, h)

	done := t0.Add(2 * time.Second)
	retry := t0.Add(time.Hour)
	owned := wrFinalize(t, ctx, h.Store, mine.LockID,
		workrow.Final[int64]{ID: 1, Set: append(wrComplete(done), workrow.Assign("last_error", nil))},
		workrow.Final[int64]{ID: 2, Set: wrComplete(done)},
		workrow.Final[int64]{ID: 3, Set: []workrow.Set{workrow.Assign("last_error", "quota"), workrow.Add("attempts", 10)}, VisibleAfter: retry},
	)
	if !slices.Equal(owned, []bool{true, false, true}) {
		t.Fatalf("FinalizeMany = %v; want [true false true]: row 2 belongs to another worker", owned)
	}
	after := wrRead(t, ctx, h)
	if r := after[1]; r.CompletedAt == nil || !r.CompletedAt.Equal(done) || r.LastError != nil || !r.LockID.IsZero() || !r.LockedUntil.IsZero() {
		t.Fatalf("row 1 is %s; want completed at %v, unlocked, no lease end", wrDescribe(r), done)
	}
	if !wrSame(before[2], after[2]) {
		t.Fatalf("row 2, another worker's, changed:\nbefore %s\nafter  %s", wrDescribe(before[2]), wrDescribe(after[2]))
	}
	if r := after[3]; r.CompletedAt != nil || r.LastError == nil || *r.LastError != "quota" || r.Attempts != 11 ||
		!r.LockID.IsZero() || !r.LockedUntil.Equal(retry) {
		t.Fatalf("row 3 is %s; want its own sets only (error, attempts 1+10), unlocked, visible after %v", wrDescribe(r), retry)
	}
}

func (s *workRowsSuite) renew(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(2)...)

	sp := wrSpec(t0, 2)
	wrClaim(t, ctx, h.Store, sp)
	until := t0.Add(5 * wrLease)
	owned, err := h.Second.RenewMany(ctx, sp.LockID, until, []int64{2, 1})
	if err != nil || !slices.Equal(owned, []bool{true, true}) {
		t.Fatalf("RenewMany by the owner = %v, %v", owned, err)
	}
	for id, r := range wrRead(t, ctx, h) {
		if !r.LockedUntil.Equal(until) || r.LockID != sp.LockID {
			t.Fatalf("renewed row %d is %s; want the same lock until %v", id, wrDescribe(r), until)
		}
	}
	if got := wrClaim(t, ctx, h.Second, wrSpec(t0.Add(2*wrLease), 2)); len(got) != 0 {
		t.Fatalf("renewed rows were claimed before their new lease end: %v", wrIDs(got))
	}
	owned, err = h.Store.RenewMany(ctx, workrow.NewLockID(), t0.Add(100*wrLease), []int64{1})
	if err != nil || !slices.Equal(owned, []bool{false}) {
		t.Fatalf("RenewMany by another lock = %v, %v; want [false]", owned, err)
	}
	if r := wrRead(t, ctx, h)[1]; !r.LockedUntil.Equal(until) {
		t.Fatalf("a renewal by another lock moved the lease end to %v", r.LockedUntil)
	}
}

func (s *workRowsSuite) release(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(1)...)

	sp := wrSpec(t0, 1)
	wrClaim(t, ctx, h.Store, sp)
	if owned, err := h.Store.ReleaseMany(ctx, sp.LockID, []int64{1}); err != nil || !slices.Equal(owned, []bool{true}) {
		t.Fatalf("ReleaseMany by the owner = %v, %v", owned, err)
	}
	if r := wrRead(t, ctx, h)[1]; !r.LockID.IsZero() || !r.LockedUntil.IsZero() || r.Attempts != 1 {
		t.Fatalf("released row is %s; want no lock, no lease end, the claim's attempt kept", wrDescribe(r))
	}
	if got := wrClaim(t, ctx, h.Second, wrSpec(t0, 1)); !slices.Equal(wrIDs(got), []int64{1}) {
		t.Fatalf("a released row was not claimable at once: got %v", wrIDs(got))
	}
}

// workers burns the table down with wrWorkers Workers over both stores,
// each running concurrency handlers at once.
func (s *workRowsSuite) workers(t *testing.T, concurrency int) {
	h := s.harness(t)
	ctx := testCtx(t)
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
				if concurrency > 1 {
					time.Sleep(time.Millisecond) // handlers overlap, and finish out of order
				}
				mu.Lock()
				defer mu.Unlock()
				if c.ID%7 == 0 && c.Row.Attempts == 1 {
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
