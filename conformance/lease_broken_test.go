package conformance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
)

// leaseVariant is the memory lease store with one rule of lease.Store or
// lease.ReleaseWatcher broken. Its stores are in lease_variants_test.go.
type leaseVariant struct {
	variant
	store func(st *memory.LeaseStore, clk *leaseClock) lease.Store
	// harness, if set, changes the harness around the store.
	harness func(h *conformance.LeaseHarness)
}

var leaseVariants = []leaseVariant{
	{variant: variant{"take-drops-the-address", "L1", "TakesAFreeRole"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return noAddress{st} }},
	{variant: variant{"expired-role-stays-held", "L2", "TakesAnExpiredRole"},
		store: func(st *memory.LeaseStore, clk *leaseClock) lease.Store { return newNeverExpires(st, clk) }},
	{variant: variant{"refusal-reported-as-held", "L3", "RefusesWhileAnotherHolds"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return alwaysHeld{st} }},
	{variant: variant{"take-checks-then-writes", "L4", "ConcurrentTakersOneWins"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store {
			return &checkThenTake{LeaseStore: st, meet: rendezvous{patience: 100 * time.Millisecond}}
		}},
	{variant: variant{"expiry-judged-early", "L5", "ExpiryIsJudgedByTheStoreClock"},
		store: func(st *memory.LeaseStore, clk *leaseClock) lease.Store { return earlyExpiry{st, clk} }},
	{variant: variant{"renewal-starts-a-new-term", "L6", "RenewsItsOwnTerm"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return renewAsNewTerm{st} }},
	{variant: variant{"renews-with-any-token", "L7", "RenewRequiresTheCurrentToken"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return anyTokenRenews{st} }},
	{variant: variant{"lapsed-term-is-renewed", "L8", "ExpiredTermIsRetakenWithANewToken"},
		store: func(st *memory.LeaseStore, clk *leaseClock) lease.Store { return lapsedRenews{st, clk} }},
	{variant: variant{"deposed-release-frees-the-role", "L9", "DeposedHolderCannotRenewOrRelease"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return releaseWhoever{st} }},
	{variant: variant{"heartbeat-stops-at-the-first-refusal", "L10", "OneHeartbeatRenewsTakesAndRefuses"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return stopAtRefusal{st} }},
	{variant: variant{"release-waits-for-expiry", "L11", "ReleaseFreesTheRoleAtOnce"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return releaseLeavesItHeld{st} }},
	{variant: variant{"release-deletes-the-row", "L12", "ReleaseKeepsTheToken"},
		store: func(*memory.LeaseStore, *leaseClock) lease.Store { return newReleaseForgets() }},
	{variant: variant{"release-of-a-lapsed-term-succeeds", "L13", "ReleaseOfALapsedTermIsRefused"},
		store: func(st *memory.LeaseStore, clk *leaseClock) lease.Store { return lapsedReleases{st, clk} }},
	{variant: variant{"release-not-announced", "L14", "ReleaseIsAnnounced"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return silentReleases{st} }},
	{variant: variant{"refused-releases-announced", "L15", "RefusedReleasesAreNotAnnounced"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return &announceRefusals{LeaseStore: st} }},
	{variant: variant{"announces-before-releasing", "L16", "AnnouncementFollowsTheRelease"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return &announceFirst{LeaseStore: st} }},
	{variant: variant{"watch-hides-the-context-error", "L17", "WatchReleasesReturnsWhenItsContextEnds"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return quietWatchEnd{st} }},
	{variant: variant{"read-reports-unheld-roles", "L18", "ReadReturnsOnlyRolesWithARow"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return readEveryRole{st} }},
	{variant: variant{"role-limit-off-by-one", "L19", "RoleLimitIs128Bytes"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return shortRoles{st} }},
	{variant: variant{"validates-claim-by-claim", "L20", "InvalidRequestsWriteNothing"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return claimByClaim{st} }},
	{variant: variant{"cancel-loses-the-cause", "L21", "CancelledContextIsRecognisable"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return leaseCauseLost{st} }},
	{variant: variant{"schema-mismatch-unrecognisable", "L22", "MissingTableIsASchemaMismatch"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return st },
		harness: func(h *conformance.LeaseHarness) {
			h.Unmigrated = func(*testing.T) conformance.LeaseHarness {
				return conformance.LeaseHarness{Store: noTables{err: errors.New(`relation "baton_role_leases" does not exist`)}}
			}
		}},
	{variant: variant{"list-shows-released-as-live", "L23", "ListsEveryRoleWithARow"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return listAllLive{st} }},
	{variant: variant{"list-remaining-in-the-wrong-unit", "L23", "ListsEveryRoleWithARow"},
		store: func(st *memory.LeaseStore, _ *leaseClock) lease.Store { return listWrongUnit{st} }},
}

func leaseBroken() brokenSuite {
	return newBrokenSuite("RunLeaseStore", "TestBrokenLeaseStoreChild", "BATON_CONFORMANCE_BROKEN_LEASE", leaseVariants)
}

func TestRunLeaseStore_FailsEveryBrokenStore(t *testing.T) { leaseBroken().run(t) }

// TestBrokenLeaseStoreChild runs the suite against the variant its parent
// names, and is expected to fail.
func TestBrokenLeaseStoreChild(t *testing.T) {
	v := chosen(t, leaseBroken().env, leaseVariants)
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		st, clk := newLeaseStore()
		h := leaseHarness(v.store(st, clk))
		if v.harness != nil {
			v.harness(&h)
		}
		return h
	}, conformance.LeaseFeatures{})
}

// rowOf reads one role's row.
func rowOf(ctx context.Context, st lease.Store, role string) (lease.Record, bool) {
	recs, err := st.Read(ctx, []string{role})
	if err != nil || len(recs) != 1 {
		return lease.Record{}, false
	}
	return recs[0], true
}

// live reports whether a row's term has time left, by the real clock.
func live(r lease.Record) bool { return r.ExpiresAt.After(time.Now()) }

// oneByOne checks the whole request, then makes each claim a request of
// its own through do and joins the records: the way a variant acts on
// claims one at a time.
func oneByOne(ctx context.Context, req lease.HeartbeatRequest, do func(one lease.HeartbeatRequest, c lease.Claim) ([]lease.Record, error)) ([]lease.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var out []lease.Record
	for _, c := range req.Claims {
		one := req
		one.Claims = []lease.Claim{c}
		recs, err := do(one, c)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}
