package conformance

import (
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// Taking a role: free, expired, contended, and never while another's term
// is live by the store's clock.

func (s *leaseSuite) takeChecks() []check {
	return area(s.setup,
		subtest[leaseBundle]{"TakesAFreeRole", s.takesFree},
		subtest[leaseBundle]{"TakesAnExpiredRole", s.takesExpired},
		subtest[leaseBundle]{"RefusesWhileAnotherHolds", s.refusesWhileHeld},
		subtest[leaseBundle]{"ConcurrentTakersOneWins", s.concurrentTakers},
		subtest[leaseBundle]{"ExpiryIsJudgedByTheStoreClock", s.expiryByStoreClock},
	)
}

func (s *leaseSuite) takesFree(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "free")
	if _, ok := readOne(t, ctx, h.Store, role); ok {
		t.Fatalf("a role never held has a row")
	}
	r := mustTake(t, ctx, h.Store, holderA, role, 0, time.Minute)
	if r.HolderAddress != "http://"+holderA+":8080" {
		t.Errorf("HolderAddress = %q, want the request's address", r.HolderAddress)
	}
	if !r.AcquiredAt.Equal(r.RenewedAt) {
		t.Errorf("a new term has AcquiredAt %v and RenewedAt %v; both are the moment it was taken", r.AcquiredAt, r.RenewedAt)
	}
	checkTerm(t, "new term", r, time.Minute)
	// The second instance sees the same row.
	got := mustRead(t, ctx, h.Second, role)
	want := r
	want.Held = false
	if !sameRow(got, want) {
		t.Errorf("Read after the take = %+v, want %+v", got, want)
	}
}

func (s *leaseSuite) takesExpired(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "expired")
	first := mustTake(t, ctx, h.Store, holderA, role, 0, s.short)
	time.Sleep(s.pastShort)
	next := mustTake(t, ctx, h.Second, holderB, role, 0, time.Minute)
	if next.Token <= first.Token {
		t.Errorf("the takeover's token %d is not above the expired term's %d", next.Token, first.Token)
	}
	if next.HolderAddress != "http://"+holderB+":8080" {
		t.Errorf("HolderAddress = %q, want the new holder's", next.HolderAddress)
	}
	if !next.AcquiredAt.After(first.AcquiredAt) {
		t.Errorf("the takeover's AcquiredAt %v is not after the expired term's %v", next.AcquiredAt, first.AcquiredAt)
	}
	checkTerm(t, "takeover", next, time.Minute)
}

func (s *leaseSuite) refusesWhileHeld(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "held")
	a := mustTake(t, ctx, h.Store, holderA, role, 0, longLease)
	// Neither a claim without a token nor one with the holder's own token
	// lets another instance in.
	for _, tok := range []uint64{0, a.Token, a.Token + 1} {
		r := mustRefuse(t, ctx, h.Second, holderB, role, tok, longLease)
		if r.Holder != holderA || r.Token != a.Token {
			t.Errorf("a refused claim (token %d) shows holder %q token %d, want the current holder %q token %d", tok, r.Holder, r.Token, holderA, a.Token)
		}
	}
	got := mustRead(t, ctx, h.Store, role)
	a.Held = false
	if !sameRow(got, a) {
		t.Errorf("refused claims changed the row: %+v, was %+v", got, a)
	}
}

func (s *leaseSuite) concurrentTakers(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	for round := range 5 {
		role := uniqueName(t, "race")
		start := make(chan struct{})
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []lease.Record
			errs    []error
		)
		for g := range leaseTakers {
			st := h.Store
			if g%2 == 1 {
				st = h.Second
			}
			holder := "racer-" + string(rune('a'+g))
			wg.Go(func() {
				<-start
				recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{
					Holder: holder, LeaseDuration: longLease, Claims: []lease.Claim{{Role: role}},
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				for _, r := range recs {
					if r.Held {
						winners = append(winners, r)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			t.Errorf("round %d: Heartbeat: %v", round, err)
		}
		if len(winners) != 1 {
			t.Fatalf("round %d: %d of %d concurrent takers of a free role were granted it, want exactly 1: %+v", round, len(winners), leaseTakers, winners)
		}
		row := mustRead(t, ctx, h.Store, role)
		if row.Holder != winners[0].Holder || row.Token != winners[0].Token {
			t.Fatalf("round %d: the row names holder %q token %d, but %q token %d was granted", round, row.Holder, row.Token, winners[0].Holder, winners[0].Token)
		}
	}
}

// expiryByStoreClock: the request carries durations only; the store alone
// decides when a term ends, and the records show its arithmetic.
func (s *leaseSuite) expiryByStoreClock(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "clock")
	a := mustTake(t, ctx, h.Store, holderA, role, 0, s.short)
	checkTerm(t, "short term", a, s.short)
	mustRefuse(t, ctx, h.Second, holderB, role, 0, time.Minute)
	time.Sleep(s.pastShort)
	b := mustTake(t, ctx, h.Second, holderB, role, 0, time.Minute)
	checkTerm(t, "takeover", b, time.Minute)
	if b.AcquiredAt.Before(a.ExpiresAt) {
		t.Errorf("the takeover happened at %v by the store's clock, before the previous term ended at %v", b.AcquiredAt, a.ExpiresAt)
	}
	// A renewal is measured from the renewal, by the same clock.
	r := mustTake(t, ctx, h.Second, holderB, role, b.Token, 3*time.Minute)
	checkTerm(t, "renewal", r, 3*time.Minute)
	if r.RenewedAt.Before(b.RenewedAt) {
		t.Errorf("the store's clock went back: renewal at %v, take at %v", r.RenewedAt, b.RenewedAt)
	}
}
