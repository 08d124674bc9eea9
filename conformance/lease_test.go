package conformance_test

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
)

// Each case below wraps the memory lease store with one defect; see
// brokenChild for how the suite is run against it.

const brokenLeaseEnv = "BATON_CONFORMANCE_BROKEN_LEASE"

var brokenLeaseStores = map[string]struct {
	wrap       func(*memory.LeaseStore) lease.Store
	features   conformance.LeaseFeatures
	mustCatch  []string
	mustPassAt []string
}{
	"release-deletes-the-row": {
		wrap:       func(*memory.LeaseStore) lease.Store { return &releaseForgets{roles: map[string]*memory.LeaseStore{}} },
		features:   conformance.LeaseFeatures{NoReleaseWatch: true},
		mustCatch:  []string{"ReleaseKeepsTheToken", "ReleaseFreesTheRoleAtOnce", "TokensIncreaseAcrossTakeovers"},
		mustPassAt: []string{"TakesAFreeRole", "RefusesWhileAnotherHolds", "ConcurrentTakersOneWins", "InvalidRequestsWriteNothing"},
	},
	"renews-with-any-token": {
		wrap:       func(s *memory.LeaseStore) lease.Store { return anyTokenRenews{s} },
		mustCatch:  []string{"RenewRequiresTheCurrentToken", "OneHeartbeatRenewsTakesAndRefuses"},
		mustPassAt: []string{"RenewsItsOwnTerm", "DeposedHolderCannotRenewOrRelease", "ExpiredTermIsRetakenWithANewToken", "ReleaseIsAnnounced"},
	},
	"release-not-announced": {
		wrap:       func(s *memory.LeaseStore) lease.Store { return silentReleases{s} },
		mustCatch:  []string{"ReleaseIsAnnounced"},
		mustPassAt: []string{"WatchReleasesReturnsWhenItsContextEnds", "ReleaseFreesTheRoleAtOnce"},
	},
	"refusal-reported-as-held": {
		wrap:       func(s *memory.LeaseStore) lease.Store { return alwaysHeld{s} },
		mustCatch:  []string{"RefusesWhileAnotherHolds", "ConcurrentTakersOneWins", "DeposedHolderCannotRenewOrRelease"},
		mustPassAt: []string{"TakesAFreeRole", "ReleaseKeepsTheToken", "RoleLimitIs128Bytes"},
	},
}

// TestBrokenLeaseStoreChild is the child half: it runs only when the parent
// sets brokenLeaseEnv, and is expected to fail.
func TestBrokenLeaseStoreChild(t *testing.T) {
	kind := os.Getenv(brokenLeaseEnv)
	if kind == "" {
		t.Skip("runs only as the child of TestRunLeaseStore_CatchesBrokenStores")
	}
	bs, ok := brokenLeaseStores[kind]
	if !ok {
		t.Fatalf("unknown broken store %q", kind)
	}
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		return conformance.LeaseHarness{Store: bs.wrap(memory.NewLeaseStore(memory.LeaseStoreOptions{}))}
	}, bs.features)
}

func TestRunLeaseStore_CatchesBrokenStores(t *testing.T) {
	if os.Getenv(brokenLeaseEnv) != "" {
		t.Skip("child process")
	}
	for kind, bs := range brokenLeaseStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			brokenChild{
				Test: "TestBrokenLeaseStoreChild", Env: brokenLeaseEnv, Kind: kind, What: "store",
				MustCatch: bs.mustCatch, MustPassAt: bs.mustPassAt,
			}.run(t)
		})
	}
}

// TestRunLeaseStore_PassesTheMemoryStore runs the suite against the
// reference store here too, so a change to the suite that the reference
// cannot pass fails in this package.
func TestRunLeaseStore_PassesTheMemoryStore(t *testing.T) {
	if os.Getenv(brokenLeaseEnv) != "" {
		t.Skip("child process")
	}
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		return conformance.LeaseHarness{Store: memory.NewLeaseStore(memory.LeaseStoreOptions{})}
	}, conformance.LeaseFeatures{})
}

// releaseForgets deletes a role's row on release, so its next term starts
// over at token 1. It keeps one memory store per role and drops the role's
// store to forget it.
type releaseForgets struct {
	mu    sync.Mutex
	roles map[string]*memory.LeaseStore
}

// scratch checks requests: a throwaway store rejects what the real one
// would, so bad input still writes nothing.
func scratch() *memory.LeaseStore { return memory.NewLeaseStore(memory.LeaseStoreOptions{}) }

func (b *releaseForgets) store(role string, create bool) *memory.LeaseStore {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.roles[role]
	if st == nil && create {
		st = scratch()
		b.roles[role] = st
	}
	return st
}

func (b *releaseForgets) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if _, err := scratch().Heartbeat(ctx, req); err != nil {
		return nil, err
	}
	var out []lease.Record
	for _, c := range req.Claims {
		one := req
		one.Claims = []lease.Claim{c}
		recs, err := b.store(c.Role, true).Heartbeat(ctx, one)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

func (b *releaseForgets) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	st := b.store(role, false)
	if st == nil {
		return scratch().Release(ctx, role, holder, token)
	}
	ok, err := st.Release(ctx, role, holder, token)
	if ok {
		b.mu.Lock()
		delete(b.roles, role)
		b.mu.Unlock()
	}
	return ok, err
}

func (b *releaseForgets) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	if _, err := scratch().Read(ctx, roles); err != nil {
		return nil, err
	}
	var out []lease.Record
	for _, r := range roles {
		if st := b.store(r, false); st != nil {
			recs, err := st.Read(ctx, []string{r})
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
		}
	}
	return out, nil
}

// anyTokenRenews renews a live term of the requester whatever token it
// claims: it swaps in the current token before asking the real store.
type anyTokenRenews struct{ *memory.LeaseStore }

func (b anyTokenRenews) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	roles := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		roles[i] = c.Role
	}
	if current, err := b.Read(ctx, roles); err == nil {
		req.Claims = slices.Clone(req.Claims)
		for i, c := range req.Claims {
			for _, r := range current {
				if r.Role == c.Role && c.Token != 0 && r.Holder == req.Holder && r.ExpiresAt.After(time.Now()) {
					req.Claims[i].Token = r.Token
				}
			}
		}
	}
	return b.LeaseStore.Heartbeat(ctx, req)
}

// silentReleases claims to watch releases but never announces one.
type silentReleases struct{ *memory.LeaseStore }

func (silentReleases) WatchReleases(ctx context.Context, _ func(string)) error {
	<-ctx.Done()
	return ctx.Err()
}

// alwaysHeld reports every claim as held, granted or not.
type alwaysHeld struct{ *memory.LeaseStore }

func (b alwaysHeld) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	recs, err := b.LeaseStore.Heartbeat(ctx, req)
	for i := range recs {
		recs[i].Held = true
	}
	return recs, err
}
