package conformance_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/workrow"
)

// workRowsVariant is the memory work-row store with one rule of
// workrow.Store broken.
type workRowsVariant struct {
	variant
	harness func(t *testing.T) conformance.WorkRowsHarness
}

type workRows = workrow.Store[int64, conformance.WorkRow]

// wrStore is the reference harness with the store replaced.
func wrStore(wrap func(st *workRowStore) workRows) func(t *testing.T) conformance.WorkRowsHarness {
	return func(t *testing.T) conformance.WorkRowsHarness {
		st := newWorkRowStore(t)
		return workRowsHarness(st, wrap(st))
	}
}

var workRowsVariants = []workRowsVariant{
	{variant{"claim-ignores-the-order", "W1", "ClaimTakesEligibleRowsInOrderUpToTheBatchSize"},
		wrStore(func(st *workRowStore) workRows { return unordered{st} })},
	{variant{"claim-checks-then-stamps", "W2", "ConcurrentClaimersNeverShareARow"},
		wrStore(func(st *workRowStore) workRows {
			return &checkThenStamp{workRowStore: st, meet: rendezvous{patience: 100 * time.Millisecond}}
		})},
	{variant{"lease-end-is-exclusive", "W3", "ExpiryMakesARowClaimableAgain"},
		wrStore(func(st *workRowStore) workRows {
			return nowShifted{st, func(now time.Time) time.Time { return now.Add(-time.Microsecond) }}
		})},
	{variant{"lease-judged-by-the-store-clock", "W3", "ExpiryMakesARowClaimableAgain"},
		wrStore(func(st *workRowStore) workRows {
			return nowShifted{st, func(time.Time) time.Time { return time.Now().UTC() }}
		})},
	{variant{"on-claim-sets-dropped", "W4", "OnClaimCountsAttemptsEvenWhenTheWorkerDies"},
		wrStore(func(st *workRowStore) workRows { return noOnClaim{st} })},
	{variant{"visible-after-ignored", "W5", "FailureDelaysTheRowWithoutBlockingTheHead"},
		wrStore(func(st *workRowStore) workRows { return visibleAtOnce{st} })},
	{variant{"index-keeps-completed-rows", "W6", "CompletedRowsLeaveTheClaimIndex"},
		func(t *testing.T) conformance.WorkRowsHarness {
			st, err := memory.NewWorkRowStore[int64, conformance.WorkRow](memory.WorkRowStoreOptions{Order: conformance.WorkRowsOrder})
			if err != nil {
				t.Fatal(err)
			}
			return workRowsHarness(st, st)
		}},
	{variant{"finalize-ignores-the-lock-id", "W7", "StaleFinalizeReturnsFalseAndChangesNothing"},
		wrStore(func(st *workRowStore) workRows { return anyLock{st, true} })},
	{variant{"finalize-applies-the-first-rows-sets-to-all", "W8", "FinalizeManyIsGuardedPerRow"},
		wrStore(func(st *workRowStore) workRows { return firstSetsForAll{st} })},
	{variant{"claims-finalized-under-the-first-lock", "W21", "FinalizeClaimsGuardsEachRowByItsOwnClaim"},
		wrStore(func(st *workRowStore) workRows { return firstLockForAll{st} })},
	{variant{"renew-ignores-the-lock-id", "W9", "RenewExtendsOnlyOwnedRows"},
		wrStore(func(st *workRowStore) workRows { return anyLock{st, false} })},
	{variant{"release-keeps-the-lease", "W10", "ReleaseMakesARowClaimableAtOnce"},
		wrStore(func(st *workRowStore) workRows { return releaseUntilLeaseEnd{st} })},
	{variant{"claim-skips-validation", "W13", "InvalidRequestsAreRefusedAndWriteNothing"},
		wrStore(func(st *workRowStore) workRows { return invalidClaimsEmpty{st} })},
	{variant{"claim-returns-rows-before-on-claim", "W11", "WorkersCompleteEveryRowOnce"},
		wrStore(func(st *workRowStore) workRows { return rowsBeforeClaim{st} })},
	{variant{"finalize-pairs-finals-in-id-order", "W12", "ConcurrentHandlersCompleteEveryRowOnce"},
		wrStore(func(st *workRowStore) workRows { return finalsInIDOrder{st} })},
	{variant{"cancel-loses-the-cause", "W14", "CancelledContextIsRecognisable"},
		wrStore(func(st *workRowStore) workRows { return workRowsCauseLost{st} })},
	{variant{"schema-mismatch-unrecognisable", "W15", "MissingTableIsASchemaMismatch"},
		func(t *testing.T) conformance.WorkRowsHarness {
			st := newWorkRowStore(t)
			h := workRowsHarness(st, st)
			h.Unmigrated = func(*testing.T) conformance.WorkRowsHarness {
				return conformance.WorkRowsHarness{Store: noTables{err: errors.New(`relation "jobs" does not exist`)}}
			}
			return h
		}},
	{variant{"signal-never-sent", "W16", "ASignalledInsertWakesAnIdleListener"}, wrWake(neverSignals)},
	{variant{"rolled-back-signal-sent", "W17", "ARolledBackSignalWakesNobody"}, wrWake(rollbacksSignal)},
	{variant{"signal-decided-before-idle", "W18", "ASignalGivenBeforeIdleIsNeverMissed"}, wrWake(decidedAtEnqueue)},
	{variant{"one-channel-for-every-table", "W19", "AnotherTablesSignalDoesNotWakeIt"}, wrWake(oneChannelForAll)},
	{variant{"listener-dead-after-busy", "W20", "IdleAfterBusyWakesAgain"}, wrWake(busyKills)},
}

// wrWake is the reference harness whose listening has flaw.
func wrWake(flaw wakeFlaw) func(t *testing.T) conformance.WorkRowsHarness {
	return func(t *testing.T) conformance.WorkRowsHarness { return flawedRowWake(flaw)(newWorkRowStore(t)) }
}

func workRowsBroken() brokenSuite {
	return newBrokenSuite("RunWorkRows", "TestBrokenWorkRowsChild", "BATON_CONFORMANCE_BROKEN_WORKROWS", workRowsVariants)
}

func TestRunWorkRows_FailsEveryBrokenStore(t *testing.T) { workRowsBroken().run(t) }

// TestBrokenWorkRowsChild runs the suite against the variant its parent
// names, and is expected to fail.
func TestBrokenWorkRowsChild(t *testing.T) {
	v := chosen(t, workRowsBroken().env, workRowsVariants)
	conformance.RunWorkRows(t, v.harness, conformance.WorkRowsFeatures{})
}

// unordered claims in an order that ties every fresh row, so the ids
// decide.
type unordered struct{ *workRowStore }

func (b unordered) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	spec.Order = []workrow.Order{workrow.Asc("attempts")}
	return b.workRowStore.Claim(ctx, spec)
}

// checkThenStamp hands out the rows a concurrent claim took as well: two
// claims that both selected the same candidates before either stamped
// them. The rendezvous pairs concurrent claims.
type checkThenStamp struct {
	*workRowStore
	meet rendezvous
}

func (b *checkThenStamp) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	got, err := b.workRowStore.Claim(ctx, spec)
	if err != nil {
		return nil, err
	}
	if other, met, _ := b.meet.meet(slices.Clone(got)); met {
		got = append(got, other.([]workrow.Claimed[int64, conformance.WorkRow])...)
	}
	return got, nil
}

// nowShifted judges locks by another time than the claimer's Now.
type nowShifted struct {
	*workRowStore
	now func(time.Time) time.Time
}

func (b nowShifted) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	if spec.Validate() == nil {
		spec.Now = b.now(spec.Now)
	}
	return b.workRowStore.Claim(ctx, spec)
}

// noOnClaim drops the spec's OnClaim sets.
type noOnClaim struct{ *workRowStore }

func (b noOnClaim) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	spec.OnClaim = nil
	return b.workRowStore.Claim(ctx, spec)
}

// visibleAtOnce finalizes failed rows as claimable at once.
type visibleAtOnce struct{ *workRowStore }

func (b visibleAtOnce) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	finals = slices.Clone(finals)
	for i := range finals {
		finals[i].VisibleAfter = time.Time{}
	}
	return b.workRowStore.FinalizeMany(ctx, lock, finals)
}

// anyLock acts on a row whatever lock it carries: it first claims the row
// for the caller's lock, as if it were free. With all, it does so for
// finalize, renew and release; else for renew only.
type anyLock struct {
	*workRowStore
	all bool
}

func (b anyLock) adopt(ctx context.Context, lock workrow.LockID, ids ...int64) {
	for _, id := range ids {
		r, found, err := b.Row(ctx, id)
		if err != nil || !found || r.LockID == lock || lock.IsZero() || r.LockedUntil.IsZero() {
			continue
		}
		_, _ = b.workRowStore.Claim(ctx, workrow.ClaimSpec{LockID: lock, Now: r.LockedUntil, LeaseUntil: r.LockedUntil.Add(time.Nanosecond),
			BatchSize: 1, Eligible: workrow.Eq("id", id)})
	}
}

func (b anyLock) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	if b.all && workrow.CheckFinalize(lock, finals) == nil {
		for _, f := range finals {
			b.adopt(ctx, lock, f.ID)
		}
	}
	return b.workRowStore.FinalizeMany(ctx, lock, finals)
}

func (b anyLock) RenewMany(ctx context.Context, lock workrow.LockID, until time.Time, ids []int64) ([]bool, error) {
	if workrow.CheckRenew(lock, until, ids) == nil {
		b.adopt(ctx, lock, ids...)
	}
	return b.workRowStore.RenewMany(ctx, lock, until, ids)
}

func (b anyLock) ReleaseMany(ctx context.Context, lock workrow.LockID, ids []int64) ([]bool, error) {
	if b.all && workrow.CheckRelease(lock, ids) == nil {
		b.adopt(ctx, lock, ids...)
	}
	return b.workRowStore.ReleaseMany(ctx, lock, ids)
}

// firstSetsForAll applies the first final's sets to every row it
// finalizes.
type firstSetsForAll struct{ *workRowStore }

func (b firstSetsForAll) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	finals = slices.Clone(finals)
	for i := range finals {
		if i > 0 {
			finals[i].Set = finals[0].Set
		}
	}
	return b.workRowStore.FinalizeMany(ctx, lock, finals)
}

// releaseUntilLeaseEnd unlocks released rows but keeps them invisible
// until their lease would have ended.
type releaseUntilLeaseEnd struct{ *workRowStore }

func (b releaseUntilLeaseEnd) ReleaseMany(ctx context.Context, lock workrow.LockID, ids []int64) ([]bool, error) {
	if err := workrow.CheckRelease(lock, ids); err != nil {
		return nil, err
	}
	finals := make([]workrow.Final[int64], len(ids))
	for i, id := range ids {
		finals[i].ID = id
		if r, found, err := b.Row(ctx, id); err == nil && found {
			finals[i].VisibleAfter = r.LockedUntil
		}
	}
	return b.FinalizeMany(ctx, lock, finals)
}

// invalidClaimsEmpty answers a claim it must refuse with no rows and no
// error.
type invalidClaimsEmpty struct{ *workRowStore }

func (b invalidClaimsEmpty) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	if spec.Validate() != nil {
		return nil, nil
	}
	return b.workRowStore.Claim(ctx, spec)
}

// rowsBeforeClaim returns the claimed rows as they were before the claim,
// without its OnClaim sets.
type rowsBeforeClaim struct{ *workRowStore }

func (b rowsBeforeClaim) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	before, err := b.Rows(ctx)
	if err != nil {
		return nil, err
	}
	got, err := b.workRowStore.Claim(ctx, spec)
	for i, c := range got {
		if j := slices.IndexFunc(before, func(r memory.WorkRowState[int64, conformance.WorkRow]) bool { return r.ID == c.ID }); j >= 0 {
			got[i].Row = before[j].Row
		}
	}
	return got, err
}

// finalsInIDOrder pairs the finals with the rows they name taken in id
// order, as a statement that sorts the ids but not the outcomes would: a
// finalize whose rows come out of order gives rows each other's outcomes.
type finalsInIDOrder struct{ *workRowStore }

func (b finalsInIDOrder) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	ids := make([]int64, len(finals))
	for i, f := range finals {
		ids[i] = f.ID
	}
	slices.Sort(ids)
	paired := slices.Clone(finals)
	for i := range paired {
		paired[i].ID = ids[i]
	}
	return b.workRowStore.FinalizeMany(ctx, lock, paired)
}

// workRowsCauseLost fails on an ended context with an error of its own.
type workRowsCauseLost struct{ *workRowStore }

func (b workRowsCauseLost) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	if ctx.Err() != nil {
		return nil, errAborted
	}
	return b.workRowStore.Claim(ctx, spec)
}

// firstLockForAll finalizes every claim of a FinalizeClaims call under the
// first claim's lock.
type firstLockForAll struct{ *workRowStore }

func (b firstLockForAll) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[int64]) ([][]bool, error) {
	if err := workrow.CheckClaims(claims); err != nil || len(claims) == 0 {
		return b.workRowStore.FinalizeClaims(ctx, claims)
	}
	owned := make([][]bool, len(claims))
	for c, cl := range claims {
		o, err := b.workRowStore.FinalizeMany(ctx, claims[0].Lock, cl.Finals)
		if err != nil {
			return nil, err
		}
		owned[c] = o
	}
	return owned, nil
}
