package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// What every method refuses: bad requests, an ended context, a missing
// table.

func (s *workRowsSuite) inputChecks() []check {
	return area(s.setup,
		subtest[workRowsBundle]{"InvalidRequestsAreRefusedAndWriteNothing", s.invalidRequests},
		subtest[workRowsBundle]{"CancelledContextIsRecognisable", s.cancelled},
		subtest[workRowsBundle]{"MissingTableIsASchemaMismatch", s.unmigrated},
	)
}

func (s *workRowsSuite) invalidRequests(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
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

// cancelled: every method called with an ended context fails with an
// error that still wraps the context's, and changes nothing.
func (s *workRowsSuite) cancelled(t *testing.T, env workRowsBundle) {
	h, ctx := env.h, env.ctx
	t0 := wrBase()
	wrInsert(t, ctx, h, wrFresh(2)...)
	held := wrSpec(t0, 1)
	wrClaim(t, ctx, h.Store, held)
	before := wrRead(t, ctx, h)
	checkCancelled(t, workRowCalls(h.Store, held.LockID, t0)...)
	after := wrRead(t, ctx, h)
	for id, b := range before {
		if !wrSame(b, after[id]) {
			t.Errorf("a call with a cancelled context changed row %d:\nbefore %s\nafter  %s", id, wrDescribe(b), wrDescribe(after[id]))
		}
	}
}

// unmigrated: over a table that does not exist, every method fails with
// the adapter's schema-mismatch error.
func (s *workRowsSuite) unmigrated(t *testing.T, env workRowsBundle) {
	if env.h.Unmigrated == nil {
		t.Skip("the harness has no Unmigrated store (WorkRowsHarness.Unmigrated)")
	}
	st := env.h.Unmigrated(t).Store
	if st == nil {
		t.Fatal("conformance: Unmigrated returned no Store")
	}
	checkSchemaMismatch(t, env.h.SchemaMismatch, workRowCalls(st, workrow.NewLockID(), wrBase())...)
}

// workRowCalls makes one call of every Store method: a claim of the next
// free row, and a finalize, renew and release of row 1 under lock.
func workRowCalls(st workrow.Store[int64, WorkRow], lock workrow.LockID, t0 time.Time) []call {
	return []call{
		{"Claim", func(ctx context.Context) error { return ignore(st.Claim(ctx, wrSpec(t0, 1))) }},
		{"FinalizeMany", func(ctx context.Context) error {
			return ignore(st.FinalizeMany(ctx, lock, []workrow.Final[int64]{{ID: 1, Set: wrComplete(t0)}}))
		}},
		{"RenewMany", func(ctx context.Context) error { return ignore(st.RenewMany(ctx, lock, t0.Add(time.Hour), []int64{1})) }},
		{"ReleaseMany", func(ctx context.Context) error { return ignore(st.ReleaseMany(ctx, lock, []int64{1})) }},
	}
}
