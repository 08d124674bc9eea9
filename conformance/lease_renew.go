package conformance

import (
	"testing"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// Renewing: only the holder's own live term, matched on its token; a
// lapsed or deposed term is over for good.

func (s *leaseSuite) renewChecks() []check {
	return area(s.setup,
		subtest[leaseBundle]{"RenewsItsOwnTerm", s.renewsOwnTerm},
		subtest[leaseBundle]{"RenewRequiresTheCurrentToken", s.renewRequiresToken},
		subtest[leaseBundle]{"ExpiredTermIsRetakenWithANewToken", s.expiredTermRetaken},
		subtest[leaseBundle]{"DeposedHolderCannotRenewOrRelease", s.deposedHolder},
		subtest[leaseBundle]{"OneHeartbeatRenewsTakesAndRefuses", s.mixedHeartbeat},
	)
}

func (s *leaseSuite) renewsOwnTerm(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "renew")
	first := mustTake(t, ctx, h.Store, holderA, role, 0, time.Minute)
	time.Sleep(20 * time.Millisecond)
	recs, err := h.Store.Heartbeat(ctx, lease.HeartbeatRequest{
		Holder: holderA, Address: "http://moved:9090", LeaseDuration: 2 * time.Minute,
		Claims: []lease.Claim{{Role: role, Token: first.Token}},
	})
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if len(recs) != 1 {
		t.Fatalf("Heartbeat returned %d records for one claim", len(recs))
	}
	r := recs[0]
	if !r.Held {
		t.Fatalf("the holder's renewal of its current term was refused: %+v", r)
	}
	if r.Token != first.Token {
		t.Errorf("a renewal changed the token from %d to %d; it must extend the same term", first.Token, r.Token)
	}
	if !r.AcquiredAt.Equal(first.AcquiredAt) {
		t.Errorf("a renewal moved AcquiredAt from %v to %v", first.AcquiredAt, r.AcquiredAt)
	}
	if !r.RenewedAt.After(first.RenewedAt) {
		t.Errorf("RenewedAt %v is not after the previous %v", r.RenewedAt, first.RenewedAt)
	}
	if r.HolderAddress != "http://moved:9090" {
		t.Errorf("HolderAddress = %q, want the renewal's address", r.HolderAddress)
	}
	checkTerm(t, "renewal", r, 2*time.Minute)
	if got := mustRead(t, ctx, h.Second, role); !sameRow(got, lease.Record{
		Role: role, Holder: holderA, HolderAddress: "http://moved:9090", Token: first.Token,
		AcquiredAt: first.AcquiredAt, RenewedAt: r.RenewedAt, ExpiresAt: r.ExpiresAt,
	}) {
		t.Errorf("Read after renewal = %+v, want the renewed row %+v", got, r)
	}
}

func (s *leaseSuite) renewRequiresToken(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "token")
	a := mustTake(t, ctx, h.Store, holderA, role, 0, time.Minute)
	a.Held = false
	for _, tok := range []uint64{a.Token + 1, 0} {
		r := mustRefuse(t, ctx, h.Store, holderA, role, tok, longLease)
		if r.Token != a.Token {
			t.Errorf("a refused renewal with token %d shows token %d, want the current %d", tok, r.Token, a.Token)
		}
		if got := mustRead(t, ctx, h.Store, role); !sameRow(got, a) {
			t.Fatalf("a renewal with token %d (current %d) changed the row: %+v, was %+v", tok, a.Token, got, a)
		}
	}
	// The right token from another holder is no better.
	mustRefuse(t, ctx, h.Second, holderB, role, a.Token, longLease)
	if got := mustRead(t, ctx, h.Store, role); !sameRow(got, a) {
		t.Fatalf("another holder's claim with the current token changed the row: %+v, was %+v", got, a)
	}
	// The right token from the holder renews.
	if r := mustTake(t, ctx, h.Store, holderA, role, a.Token, time.Minute); r.Token != a.Token {
		t.Errorf("the renewal changed the token from %d to %d", a.Token, r.Token)
	}
}

func (s *leaseSuite) expiredTermRetaken(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "lapsed")
	first := mustTake(t, ctx, h.Store, holderA, role, 0, s.short)
	time.Sleep(s.pastShort)
	// The same holder, with the token of its lapsed term: the term cannot
	// be renewed, so this is a new term.
	r := mustTake(t, ctx, h.Store, holderA, role, first.Token, time.Minute)
	if r.Token <= first.Token {
		t.Errorf("the lapsed term %d was renewed (token now %d); after expiry the holder must get a new term with a larger token", first.Token, r.Token)
	}
	if !r.AcquiredAt.After(first.AcquiredAt) {
		t.Errorf("the new term's AcquiredAt %v is not after the lapsed term's %v", r.AcquiredAt, first.AcquiredAt)
	}
	if !r.AcquiredAt.Equal(r.RenewedAt) {
		t.Errorf("a new term has AcquiredAt %v and RenewedAt %v", r.AcquiredAt, r.RenewedAt)
	}
}

func (s *leaseSuite) deposedHolder(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "deposed")
	old := mustTake(t, ctx, h.Store, holderA, role, 0, s.short)
	time.Sleep(s.pastShort)
	succ := mustTake(t, ctx, h.Second, holderB, role, 0, longLease)
	if succ.Token <= old.Token {
		t.Fatalf("successor token %d is not above the deposed holder's %d", succ.Token, old.Token)
	}
	succ.Held = false

	r := mustRefuse(t, ctx, h.Store, holderA, role, old.Token, longLease)
	if r.Holder != holderB || r.Token != succ.Token {
		t.Errorf("the deposed holder's refusal shows holder %q token %d, want %q token %d", r.Holder, r.Token, holderB, succ.Token)
	}
	mustRelease(t, ctx, h.Store, role, holderA, old.Token, false)
	mustRelease(t, ctx, h.Store, role, holderA, succ.Token, false)
	if got := mustRead(t, ctx, h.Second, role); !sameRow(got, succ) {
		t.Fatalf("the deposed holder changed its successor's row: %+v, was %+v", got, succ)
	}
	mustRefuse(t, ctx, h.Store, holderA, role, 0, longLease)
	if r := mustTake(t, ctx, h.Second, holderB, role, succ.Token, longLease); r.Token != succ.Token {
		t.Errorf("the successor's renewal changed its token from %d to %d", succ.Token, r.Token)
	}
}

func (s *leaseSuite) mixedHeartbeat(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	own := uniqueName(t, "own")        // held by A: renewed
	free := uniqueName(t, "free")      // never held: taken
	other := uniqueName(t, "other")    // held by B: refused
	lapsed := uniqueName(t, "lapsed")  // B's lease expired: taken
	wrongTok := uniqueName(t, "wrong") // held by A, claimed with a wrong token: refused
	aOwn := mustTake(t, ctx, h.Store, holderA, own, 0, longLease)
	bOther := mustTake(t, ctx, h.Second, holderB, other, 0, longLease)
	bLapsed := mustTake(t, ctx, h.Second, holderB, lapsed, 0, s.short)
	aWrong := mustTake(t, ctx, h.Store, holderA, wrongTok, 0, longLease)
	time.Sleep(s.pastShort)

	recs := heartbeat(t, ctx, h.Store, holderA, time.Minute,
		lease.Claim{Role: own, Token: aOwn.Token},
		lease.Claim{Role: free},
		lease.Claim{Role: other},
		lease.Claim{Role: lapsed, Token: bLapsed.Token},
		lease.Claim{Role: wrongTok, Token: aWrong.Token + 7},
	)
	if r := recs[own]; !r.Held || r.Token != aOwn.Token || r.Holder != holderA {
		t.Errorf("own role: %+v, want renewed with token %d", r, aOwn.Token)
	} else {
		checkTerm(t, "renewed in a batch", r, time.Minute)
	}
	if r := recs[free]; !r.Held || r.Token == 0 || r.Holder != holderA {
		t.Errorf("free role: %+v, want taken", r)
	} else {
		checkTerm(t, "taken in a batch", r, time.Minute)
	}
	if r := recs[other]; r.Held || r.Holder != holderB || r.Token != bOther.Token {
		t.Errorf("role held by another: %+v, want refused showing holder %q token %d", r, holderB, bOther.Token)
	}
	if r := recs[lapsed]; !r.Held || r.Holder != holderA || r.Token <= bLapsed.Token {
		t.Errorf("lapsed role: %+v, want taken with a token above %d", r, bLapsed.Token)
	}
	if r := recs[wrongTok]; r.Held || r.Token != aWrong.Token {
		t.Errorf("own role claimed with a wrong token: %+v, want refused with token %d unchanged", r, aWrong.Token)
	}
	aWrong.Held, bOther.Held = false, false
	if got := mustRead(t, ctx, h.Second, wrongTok); !sameRow(got, aWrong) {
		t.Errorf("the refused claim with a wrong token changed the row: %+v, was %+v", got, aWrong)
	}
	if got := mustRead(t, ctx, h.Second, other); !sameRow(got, bOther) {
		t.Errorf("the refused claim changed another holder's row: %+v, was %+v", got, bOther)
	}
	// An empty claim list is a valid, empty heartbeat.
	if recs, err := h.Store.Heartbeat(ctx, lease.HeartbeatRequest{Holder: holderA, LeaseDuration: time.Minute}); err != nil || len(recs) != 0 {
		t.Errorf("Heartbeat without claims = %v, %v; want nothing and no error", recs, err)
	}
}
