package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// Finalizing, renewing and releasing: each row is changed only while it
// still carries the caller's lock id.

func (s *workRowsSuite) finalizeChecks() []check {
	return area(s.setup,
		subtest[workRowsBundle]{"StaleFinalizeReturnsFalseAndChangesNothing", s.staleFinalize},
		subtest[workRowsBundle]{"FinalizeManyIsGuardedPerRow", s.finalizeMany},
		subtest[workRowsBundle]{"RenewExtendsOnlyOwnedRows", s.renew},
		subtest[workRowsBundle]{"ReleaseMakesARowClaimableAtOnce", s.release},
	)
}

func (s *workRowsSuite) staleFinalize(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
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

func (s *workRowsSuite) finalizeMany(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
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

func (s *workRowsSuite) renew(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
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

func (s *workRowsSuite) release(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
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

// severalClaimsChecks is workrow.ClaimsFinalizer's rule, last because it
// is the newest.
func (s *workRowsSuite) severalClaimsChecks() []check {
	return area(s.setup,
		subtest[workRowsBundle]{"FinalizeClaimsGuardsEachRowByItsOwnClaim", s.finalizeClaims},
	)
}

// finalizeClaims finalizes two claims in one call, each naming a row of
// the other: those are refused and left as they are, the others get their
// own sets. A store that is no workrow.ClaimsFinalizer skips it.
func (s *workRowsSuite) finalizeClaims(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
	fc, ok := h.Store.(workrow.ClaimsFinalizer[int64])
	if !ok {
		t.Skip("the store is no workrow.ClaimsFinalizer: rule W21 does not apply")
	}
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(4)...)
	a, b := wrSpec(t0, 2), wrSpec(t0, 2)
	if got := wrClaim(t, ctx, h.Store, a); !slices.Equal(wrIDs(got), []int64{1, 2}) {
		t.Fatalf("first claim took %v; want [1 2]", wrIDs(got))
	}
	if got := wrClaim(t, ctx, h.Second, b); !slices.Equal(wrIDs(got), []int64{3, 4}) {
		t.Fatalf("second claim took %v; want [3 4]", wrIDs(got))
	}
	before := wrRead(t, ctx, h)

	for _, bad := range [][]workrow.ClaimFinals[int64]{
		{{Lock: a.LockID, Finals: []workrow.Final[int64]{{ID: 1}}}, {Lock: a.LockID, Finals: []workrow.Final[int64]{{ID: 2}}}},
		{{Lock: a.LockID, Finals: []workrow.Final[int64]{{ID: 1}}}, {Finals: []workrow.Final[int64]{{ID: 3}}}},
	} {
		if _, err := fc.FinalizeClaims(ctx, bad); !errors.Is(err, workrow.ErrInvalidSpec) {
			t.Fatalf("FinalizeClaims with a lock twice or a zero lock = %v; want ErrInvalidSpec", err)
		}
	}
	if after := wrRead(t, ctx, h); !wrSame(before[1], after[1]) || !wrSame(before[3], after[3]) {
		t.Fatal("a refused FinalizeClaims changed rows")
	}

	done := t0.Add(time.Second)
	retry := t0.Add(time.Hour)
	owned, err := fc.FinalizeClaims(ctx, []workrow.ClaimFinals[int64]{
		{Lock: a.LockID, Finals: []workrow.Final[int64]{
			{ID: 3, Set: wrComplete(done)},
			{ID: 1, Set: []workrow.Set{workrow.Assign("last_error", "quota"), workrow.Add("attempts", 10)}, VisibleAfter: retry},
		}},
		{Lock: b.LockID, Finals: []workrow.Final[int64]{
			{ID: 4, Set: wrComplete(done)},
			{ID: 2, Set: wrComplete(done)},
		}},
	})
	if err != nil {
		t.Fatalf("FinalizeClaims: %v", err)
	}
	if len(owned) != 2 || !slices.Equal(owned[0], []bool{false, true}) || !slices.Equal(owned[1], []bool{true, false}) {
		t.Fatalf("FinalizeClaims = %v; want [[false true] [true false]]: rows 3 and 2 carry the other claim's lock", owned)
	}
	after := wrRead(t, ctx, h)
	if r := after[1]; r.CompletedAt != nil || r.LastError == nil || *r.LastError != "quota" || r.Attempts != 11 ||
		!r.LockID.IsZero() || !r.LockedUntil.Equal(retry) {
		t.Fatalf("row 1 is %s; want its own sets only (error, attempts 1+10), unlocked, visible after %v", wrDescribe(r), retry)
	}
	if r := after[4]; r.CompletedAt == nil || !r.CompletedAt.Equal(done) || !r.LockID.IsZero() || !r.LockedUntil.IsZero() {
		t.Fatalf("row 4 is %s; want completed at %v, unlocked", wrDescribe(r), done)
	}
	for _, id := range []int64{2, 3} {
		if !wrSame(before[id], after[id]) {
			t.Fatalf("row %d, named under the other claim's lock, changed:\nbefore %s\nafter  %s", id, wrDescribe(before[id]), wrDescribe(after[id]))
		}
	}

	// One row named by two claims of one call, as a batch whose lease ran
	// out and the batch that claimed the row again would name it: only the
	// claim whose lock the row carries owns it.
	owned, err = fc.FinalizeClaims(ctx, []workrow.ClaimFinals[int64]{
		{Lock: b.LockID, Finals: []workrow.Final[int64]{{ID: 2, Set: []workrow.Set{workrow.Assign("last_error", "stale")}}}},
		{Lock: a.LockID, Finals: []workrow.Final[int64]{{ID: 2, Set: wrComplete(done)}}},
	})
	if err != nil {
		t.Fatalf("FinalizeClaims naming row 2 in both claims: %v", err)
	}
	if len(owned) != 2 || !slices.Equal(owned[0], []bool{false}) || !slices.Equal(owned[1], []bool{true}) {
		t.Fatalf("FinalizeClaims naming row 2 in both claims = %v; want [[false] [true]]: row 2 carries the second claim's lock", owned)
	}
	if r := wrRead(t, ctx, h)[2]; r.CompletedAt == nil || r.LastError != nil || !r.LockID.IsZero() {
		t.Fatalf("row 2 is %s; want completed by its own claim's Final only, unlocked", wrDescribe(r))
	}
}
