package conformance

import (
	"testing"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// Releasing: the current term ends at once and the token stays; anything
// else releases nothing.

func (s *leaseSuite) releaseChecks() []check {
	return area(s.setup,
		subtest[leaseBundle]{"ReleaseFreesTheRoleAtOnce", s.releaseFrees},
		subtest[leaseBundle]{"ReleaseKeepsTheToken", s.releaseKeepsToken},
		subtest[leaseBundle]{"ReleaseOfALapsedTermIsRefused", s.lapsedRelease},
	)
}

func (s *leaseSuite) releaseFrees(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "release")
	a := mustTake(t, ctx, h.Store, holderA, role, 0, longLease)
	mustRelease(t, ctx, h.Store, role, holderA, a.Token, true)
	// Free at once, although the released term had minutes left.
	b := mustTake(t, ctx, h.Second, holderB, role, 0, longLease)
	if b.Token <= a.Token {
		t.Errorf("the next term's token %d is not above the released term's %d", b.Token, a.Token)
	}
	// The released term is over: releasing or renewing it again fails.
	mustRelease(t, ctx, h.Store, role, holderA, a.Token, false)
	mustRefuse(t, ctx, h.Store, holderA, role, a.Token, longLease)
	// A release with a token that is not current changes nothing.
	mustRelease(t, ctx, h.Second, role, holderB, b.Token+1, false)
	mustRefuse(t, ctx, h.Store, holderA, role, 0, longLease)
	// Nor does a release by an empty holder (an error or false).
	if ok, err := h.Store.Release(ctx, role, "", b.Token); ok && err == nil {
		t.Fatalf("a release with an empty holder released %q", role)
	}
	mustRelease(t, ctx, h.Second, role, holderB, b.Token, true)
}

// releaseKeepsToken: the row stays after a release, with the released
// term's token, so every later term gets a larger one: over releases from
// either store by several holders, and over a takeover after expiry.
func (s *leaseSuite) releaseKeepsToken(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "keep")
	a := mustTake(t, ctx, h.Store, holderA, role, 0, longLease)
	mustRelease(t, ctx, h.Store, role, holderA, a.Token, true)
	row, ok := readOne(t, ctx, h.Store, role)
	if !ok {
		t.Fatal("the released role's row is gone; it must stay, keeping the token for the next term")
	}
	if row.Token != a.Token {
		t.Errorf("after the release the row's token is %d, want the released term's %d", row.Token, a.Token)
	}
	holders := []string{holderA, holderB, holderC}
	prev := a.Token
	for i := range 30 {
		st := h.Store
		if i%2 == 0 {
			st = h.Second
		}
		holder := holders[i%len(holders)]
		r := mustTake(t, ctx, st, holder, role, 0, longLease)
		if r.Token <= prev {
			t.Fatalf("term %d after releases got token %d, not above the previous %d", i+2, r.Token, prev)
		}
		prev = r.Token
		mustRelease(t, ctx, st, role, holder, r.Token, true)
	}
	// A takeover after expiry continues the sequence too.
	r := mustTake(t, ctx, h.Store, holderA, role, 0, s.short)
	if r.Token <= prev {
		t.Fatalf("got token %d, not above the previous %d", r.Token, prev)
	}
	prev = r.Token
	time.Sleep(s.pastShort)
	if r := mustTake(t, ctx, h.Second, holderB, role, 0, longLease); r.Token <= prev {
		t.Fatalf("the takeover after expiry got token %d, not above the previous %d", r.Token, prev)
	}
}

// lapsedRelease: a term that ran out is over, even if nobody took the role
// since. Its holder's Release returns false, leaves the row as it is and is
// not announced; the role is simply free, as after any expiry.
func (s *leaseSuite) lapsedRelease(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	var heard <-chan string
	if w, ok := h.Store.(lease.ReleaseWatcher); ok && !s.f.NoReleaseWatch {
		heard = liveWatch(t, env, w)
	}
	role := uniqueName(t, "lapsed")
	a := mustTake(t, ctx, h.Store, holderA, role, 0, s.short)
	time.Sleep(s.pastShort)
	// The expiry itself may remove the row and be announced (etcd deletes
	// an expired lease's key, and watches deletions): that is the role
	// going free, not the release. So the row is compared with what the
	// expiry left, and the announcements before the release are drained.
	if heard != nil {
		announcedBefore(t, env, heard, role)
	}
	before, had := readOne(t, ctx, h.Second, role)
	mustRelease(t, ctx, h.Store, role, holderA, a.Token, false)
	if got, has := readOne(t, ctx, h.Second, role); has != had || !sameRow(got, before) {
		t.Errorf("the refused release of a lapsed term changed the row: %+v (present %v), was %+v (present %v)", got, has, before, had)
	}
	if heard != nil && announcedBefore(t, env, heard, role) {
		t.Errorf("the refused release of the lapsed term of %q was announced", role)
	}
	if r := mustTake(t, ctx, h.Second, holderB, role, 0, longLease); r.Token <= a.Token {
		t.Errorf("the take after the lapsed term got token %d, not above its %d", r.Token, a.Token)
	}
}
