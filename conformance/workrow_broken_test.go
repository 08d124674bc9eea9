package conformance_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/workrow"
)

// Each case below wraps the in-memory work-row store with one defect; see
// brokenChild for how the suite is run against it.

const brokenWorkRowsEnv = "BATON_CONFORMANCE_BROKEN_WORKROWS"

var brokenWorkRows = map[string]struct {
	wrap       func(*memWorkRows) workrow.Store[int64, conformance.WorkRow]
	mustCatch  []string
	mustPassAt []string
}{
	"finalize-ignores-the-lock-id": {
		wrap: func(m *memWorkRows) workrow.Store[int64, conformance.WorkRow] { return anyLock{m} },
		mustCatch: []string{"StaleFinalizeReturnsFalseAndChangesNothing", "FinalizeManyIsGuardedPerRow",
			"RenewExtendsOnlyOwnedRows"},
		mustPassAt: []string{"ClaimTakesEligibleRowsInOrderUpToTheBatchSize", "ExpiryMakesARowClaimableAgain",
			"ConcurrentClaimersNeverShareARow", "InvalidRequestsAreRefusedAndWriteNothing"},
	},
	"claim-ignores-the-lease": {
		wrap: func(m *memWorkRows) workrow.Store[int64, conformance.WorkRow] { return leaseBlind{m} },
		mustCatch: []string{"ConcurrentClaimersNeverShareARow", "ExpiryMakesARowClaimableAgain",
			"FailureDelaysTheRowWithoutBlockingTheHead", "RenewExtendsOnlyOwnedRows"},
		mustPassAt: []string{"InvalidRequestsAreRefusedAndWriteNothing", "CompletedRowsLeaveTheClaimIndex",
			"ReleaseMakesARowClaimableAtOnce"},
	},
	"claim-skips-validation": {
		wrap:      func(m *memWorkRows) workrow.Store[int64, conformance.WorkRow] { return unchecked{m} },
		mustCatch: []string{"InvalidRequestsAreRefusedAndWriteNothing"},
		mustPassAt: []string{"ClaimTakesEligibleRowsInOrderUpToTheBatchSize", "StaleFinalizeReturnsFalseAndChangesNothing",
			"WorkersCompleteEveryRowOnce"},
	},
	"on-claim-sets-dropped": {
		wrap: func(m *memWorkRows) workrow.Store[int64, conformance.WorkRow] { return noOnClaim{m} },
		mustCatch: []string{"OnClaimCountsAttemptsEvenWhenTheWorkerDies", "ClaimTakesEligibleRowsInOrderUpToTheBatchSize",
			"ExpiryMakesARowClaimableAgain"},
		mustPassAt: []string{"ConcurrentClaimersNeverShareARow", "RenewExtendsOnlyOwnedRows", "CompletedRowsLeaveTheClaimIndex"},
	},
}

// TestBrokenWorkRowsChild is the child half: it runs only when the parent
// sets brokenWorkRowsEnv, and is expected to fail.
func TestBrokenWorkRowsChild(t *testing.T) {
	kind := os.Getenv(brokenWorkRowsEnv)
	if kind == "" {
		t.Skip("runs only as the child of TestRunWorkRows_CatchesBrokenStores")
	}
	bs, ok := brokenWorkRows[kind]
	if !ok {
		t.Fatalf("unknown broken store %q", kind)
	}
	conformance.RunWorkRows(t, func(t *testing.T) conformance.WorkRowsHarness {
		m := newMemWorkRows()
		return m.harness(bs.wrap(m))
	}, conformance.WorkRowsFeatures{})
}

func TestRunWorkRows_CatchesBrokenStores(t *testing.T) {
	if os.Getenv(brokenWorkRowsEnv) != "" {
		t.Skip("child process")
	}
	for kind, bs := range brokenWorkRows {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			brokenChild{
				Test: "TestBrokenWorkRowsChild", Env: brokenWorkRowsEnv, Kind: kind, What: "store",
				MustCatch: bs.mustCatch, MustPassAt: bs.mustPassAt,
			}.run(t)
		})
	}
}

// TestRunWorkRows_PassesTheReferenceStore runs the suite against the
// in-memory reference, so a change to the suite that the reference cannot
// pass fails here.
func TestRunWorkRows_PassesTheReferenceStore(t *testing.T) {
	if os.Getenv(brokenWorkRowsEnv) != "" {
		t.Skip("child process")
	}
	conformance.RunWorkRows(t, func(t *testing.T) conformance.WorkRowsHarness {
		m := newMemWorkRows()
		return m.harness(m)
	}, conformance.WorkRowsFeatures{})
}

// anyLock finalizes, renews and releases a row whatever lock it carries:
// it puts the caller's lock on the rows first.
type anyLock struct{ *memWorkRows }

func (b anyLock) adopt(lock workrow.LockID, ids ...int64) {
	if lock.IsZero() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if r := b.rows[id]; r != nil {
			r.LockID = lock
		}
	}
}

func (b anyLock) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	for _, f := range finals {
		b.adopt(lock, f.ID)
	}
	return b.memWorkRows.FinalizeMany(ctx, lock, finals)
}

func (b anyLock) RenewMany(ctx context.Context, lock workrow.LockID, until time.Time, ids []int64) ([]bool, error) {
	b.adopt(lock, ids...)
	return b.memWorkRows.RenewMany(ctx, lock, until, ids)
}

func (b anyLock) ReleaseMany(ctx context.Context, lock workrow.LockID, ids []int64) ([]bool, error) {
	b.adopt(lock, ids...)
	return b.memWorkRows.ReleaseMany(ctx, lock, ids)
}

// leaseBlind claims rows whatever their lock expiry says.
type leaseBlind struct{ *memWorkRows }

func (b leaseBlind) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	for _, r := range b.rows {
		r.LockedUntil = time.Time{}
	}
	b.mu.Unlock()
	return b.memWorkRows.Claim(ctx, spec)
}

// unchecked claims without validating the spec.
type unchecked struct{ *memWorkRows }

func (b unchecked) Claim(_ context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	return b.claimUnchecked(spec)
}

// noOnClaim drops the spec's OnClaim sets.
type noOnClaim struct{ *memWorkRows }

func (b noOnClaim) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	spec.OnClaim = nil
	return b.memWorkRows.Claim(ctx, spec)
}
