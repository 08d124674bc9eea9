package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// Listing every role (lease.Lister), for the operator's views.

func (s *leaseSuite) listChecks() []check {
	return area(s.listSetup,
		subtest[listBundle]{"ListsEveryRoleWithARow", s.listsEveryRole},
	)
}

// listBundle is a lease subtest's start with the store's lister.
type listBundle struct {
	leaseBundle
	l lease.Lister
}

// listSetup is the setup of the listing area: a fresh harness whose store
// lists, or a skip when the features say it cannot.
func (s *leaseSuite) listSetup(t *testing.T) listBundle {
	t.Helper()
	if s.f.NoList {
		t.Skip("the store does not list its roles (LeaseFeatures.NoList)")
	}
	env := s.setup(t)
	l, ok := env.h.Store.(lease.Lister)
	if !ok {
		t.Fatalf("the store %T does not implement lease.Lister; set LeaseFeatures.NoList if it cannot", env.h.Store)
	}
	return listBundle{leaseBundle: env, l: l}
}

// listsEveryRole: roles held through either store and a released one are
// each listed once, as Read shows them, live or not as their terms are,
// and nothing else of this subtest's.
func (s *leaseSuite) listsEveryRole(t *testing.T, env listBundle) {
	h, ctx := env.h, env.ctx
	prefix := uniqueName(t, "list")
	mine, theirs, released := prefix+"-held", prefix+"-other", prefix+"-released"
	taking := time.Now()
	mustTake(t, ctx, h.Store, holderA, mine, 0, longLease)
	mustTake(t, ctx, h.Second, holderB, theirs, 0, longLease)
	r := mustTake(t, ctx, h.Store, holderC, released, 0, longLease)
	mustRelease(t, ctx, h.Store, released, holderC, r.Token, true)

	list, err := env.l.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	// No more of a live term can have gone than the time since the takes
	// began, by any clock that runs at the rate of this one; a store that
	// counts in whole seconds may round down by one.
	atLeast := longLease - time.Since(taking) - time.Second - s.f.ExpiryLag
	got := map[string]lease.Listed{}
	for _, l := range list {
		if !strings.HasPrefix(l.Role, prefix) {
			continue // another subtest's, on a shared store
		}
		if _, twice := got[l.Role]; twice {
			t.Errorf("List returned role %q twice", l.Role)
		}
		got[l.Role] = l
	}
	for _, role := range []string{mine, theirs, released} {
		l, ok := got[role]
		if !ok {
			t.Errorf("List did not return role %q, which has a row (listed: %+v)", role, got)
			continue
		}
		if l.Held {
			t.Errorf("List returned Held=true for %q; a listing never sets it", role)
		}
		if want := mustRead(t, ctx, h.Store, role); !sameRow(l.Record, want) {
			t.Errorf("List shows %q as %+v; Read shows %+v", role, l.Record, want)
		}
		live := role != released
		switch {
		case l.Live != live:
			t.Errorf("List shows %q with Live=%v, want %v", role, l.Live, live)
		case live && (l.Remaining < atLeast || l.Remaining > longLease):
			t.Errorf("List shows the live term of %q with %v remaining, want at least %v (what is left of its %v lease) and at most the lease",
				role, l.Remaining, atLeast, longLease)
		case !live && l.Remaining > 0:
			t.Errorf("List shows the released term of %q with %v remaining, want none", role, l.Remaining)
		}
	}
	if len(got) > 3 {
		t.Errorf("List returned %d roles of this subtest, want 3: %+v", len(got), got)
	}
}
