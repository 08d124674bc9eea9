package conformance

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// LeaseHarness is what a lease store's factory returns for one subtest.
type LeaseHarness struct {
	// Store is the store under test.
	Store lease.Store
	// Second, if set, is another store over the same data, as a second
	// node would have it (its own client or pool). Subtests with two
	// instances act through both. nil means Store alone.
	Second lease.Store
}

// LeaseFeatures declares what a lease store cannot do. The zero value
// expects everything.
type LeaseFeatures struct {
	// NoReleaseWatch means the store does not implement
	// lease.ReleaseWatcher; the announcement subtests are skipped.
	// Otherwise the store must implement it, and a release must be
	// announced within 1s.
	NoReleaseWatch bool
	// ShortLease is the lease of the subtests that wait for one to expire;
	// 0 means 400ms. A store whose leases come in a coarser grain, or with
	// a floor, sets the shortest it grants exactly: etcd grants whole
	// seconds, no fewer than its minimum TTL (1.5 election timeouts).
	ShortLease time.Duration
	// ExpiryLag is how long after a lease's end the store may still refuse
	// to let another instance take it; 0 means 250ms (a slow round trip).
	// A store that removes expired leases on a timer of its own adds that
	// period: etcd's leader looks for expired leases every 500ms, then
	// revokes them through consensus.
	ExpiryLag time.Duration
}

func (f LeaseFeatures) withDefaults() LeaseFeatures {
	if f.ShortLease == 0 {
		f.ShortLease = defaultShortLease
	}
	if f.ExpiryLag == 0 {
		f.ExpiryLag = defaultExpiryLag
	}
	return f
}

// Timing of the lease subtests.
const (
	// defaultShortLease is the lease of the expiry subtests; they wait
	// defaultExpiryLag past its end for it to be over (LeaseFeatures).
	defaultShortLease = 400 * time.Millisecond
	defaultExpiryLag  = 250 * time.Millisecond
	// longLease outlives every subtest, so only a release or a test's
	// own short lease ever frees a role.
	longLease = 10 * time.Minute
	// releaseAnnouncement bounds how long after a release a watcher hears
	// of it: a successor should take a released role at once, not at its
	// next heartbeat.
	releaseAnnouncement = time.Second
	// leaseTakers is how many goroutines race for one free role.
	leaseTakers = 8
)

// RunLeaseStore runs the lease.Store contract against the stores the
// factory returns. Subtest names are stable, so a failure names the broken
// rule: TakesAFreeRole, TakesAnExpiredRole, RefusesWhileAnotherHolds,
// RenewsItsOwnTerm, RenewRequiresTheCurrentToken,
// ExpiredTermIsRetakenWithANewToken, DeposedHolderCannotRenewOrRelease,
// ReleaseFreesTheRoleAtOnce, ReleaseKeepsTheToken,
// TokensIncreaseAcrossTakeovers, ReadReturnsOnlyRolesWithARow,
// OneHeartbeatRenewsTakesAndRefuses, RoleLimitIs128Bytes,
// InvalidRequestsWriteNothing, ExpiryIsJudgedByTheStoreClock,
// ConcurrentTakersOneWins, ReleaseIsAnnounced,
// WatchReleasesReturnsWhenItsContextEnds.
//
// Several subtests wait for a short lease to expire, in real time: the
// store's clock must run at the pace of the test's.
func RunLeaseStore(t *testing.T, factory func(t *testing.T) LeaseHarness, features LeaseFeatures) {
	f := features.withDefaults()
	s := &leaseSuite{factory: factory, f: f, shortLease: f.ShortLease, pastShortLease: f.ShortLease + f.ExpiryLag}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"TakesAFreeRole", s.takesFree},
		{"TakesAnExpiredRole", s.takesExpired},
		{"RefusesWhileAnotherHolds", s.refusesWhileHeld},
		{"RenewsItsOwnTerm", s.renewsOwnTerm},
		{"RenewRequiresTheCurrentToken", s.renewRequiresToken},
		{"ExpiredTermIsRetakenWithANewToken", s.expiredTermRetaken},
		{"DeposedHolderCannotRenewOrRelease", s.deposedHolder},
		{"ReleaseFreesTheRoleAtOnce", s.releaseFrees},
		{"ReleaseKeepsTheToken", s.releaseKeepsToken},
		{"TokensIncreaseAcrossTakeovers", s.tokensIncrease},
		{"ReadReturnsOnlyRolesWithARow", s.readRoles},
		{"OneHeartbeatRenewsTakesAndRefuses", s.mixedHeartbeat},
		{"RoleLimitIs128Bytes", s.roleLimit},
		{"InvalidRequestsWriteNothing", s.invalidRequests},
		{"ExpiryIsJudgedByTheStoreClock", s.expiryByStoreClock},
		{"ConcurrentTakersOneWins", s.concurrentTakers},
		{"ReleaseIsAnnounced", s.releaseAnnounced},
		{"WatchReleasesReturnsWhenItsContextEnds", s.watchEnds},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

type leaseSuite struct {
	factory func(t *testing.T) LeaseHarness
	f       LeaseFeatures
	// shortLease is the lease of the expiry subtests; pastShortLease is how
	// long they wait for it to end.
	shortLease, pastShortLease time.Duration
}

func (s *leaseSuite) harness(t *testing.T) LeaseHarness {
	t.Helper()
	h := s.factory(t)
	if h.Store == nil {
		t.Fatal("conformance: the factory returned no Store")
	}
	if h.Second == nil {
		h.Second = h.Store
	}
	return h
}

// Holders of the subtests; each subtest has roles of its own, so the names
// can repeat across subtests.
const (
	holderA = "instance-a"
	holderB = "instance-b"
	holderC = "instance-c"
)

// heartbeat sends one request and returns its records by role, failing the
// test unless there is exactly one record per claim.
func heartbeat(t *testing.T, ctx context.Context, st lease.Store, holder string, d time.Duration, claims ...lease.Claim) map[string]lease.Record {
	t.Helper()
	recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{
		Holder:        holder,
		Address:       "http://" + holder + ":8080",
		LeaseDuration: d,
		Claims:        claims,
	})
	if err != nil {
		t.Fatalf("Heartbeat(%s, %d claims): %v", holder, len(claims), err)
	}
	byRole := make(map[string]lease.Record, len(recs))
	for _, r := range recs {
		if _, dup := byRole[r.Role]; dup {
			t.Fatalf("Heartbeat(%s) returned two records for role %q", holder, r.Role)
		}
		byRole[r.Role] = r
	}
	for _, c := range claims {
		if _, ok := byRole[c.Role]; !ok {
			t.Fatalf("Heartbeat(%s) returned no record for claimed role %q (records: %+v)", holder, c.Role, recs)
		}
	}
	if len(recs) != len(claims) {
		t.Fatalf("Heartbeat(%s) returned %d records for %d claims: %+v", holder, len(recs), len(claims), recs)
	}
	return byRole
}

// claim heartbeats a single role and returns its record.
func claim(t *testing.T, ctx context.Context, st lease.Store, holder, role string, token uint64, d time.Duration) lease.Record {
	t.Helper()
	return heartbeat(t, ctx, st, holder, d, lease.Claim{Role: role, Token: token})[role]
}

// mustTake claims a role that must be granted.
func mustTake(t *testing.T, ctx context.Context, st lease.Store, holder, role string, token uint64, d time.Duration) lease.Record {
	t.Helper()
	r := claim(t, ctx, st, holder, role, token, d)
	if !r.Held {
		t.Fatalf("%s was refused role %q (token %d); the record shows holder %q with token %d", holder, role, token, r.Holder, r.Token)
	}
	if r.Holder != holder {
		t.Fatalf("%s got role %q, but the record names holder %q", holder, role, r.Holder)
	}
	if r.Token == 0 {
		t.Fatalf("%s got role %q with token 0; terms are numbered from 1", holder, role)
	}
	return r
}

// mustRefuse claims a role that must not be granted.
func mustRefuse(t *testing.T, ctx context.Context, st lease.Store, holder, role string, token uint64, d time.Duration) lease.Record {
	t.Helper()
	r := claim(t, ctx, st, holder, role, token, d)
	if r.Held {
		t.Fatalf("%s was granted role %q (token %d → %d) although it must be refused", holder, role, token, r.Token)
	}
	return r
}

// readOne reads a role; ok is false when it has no row.
func readOne(t *testing.T, ctx context.Context, st lease.Store, role string) (lease.Record, bool) {
	t.Helper()
	recs, err := st.Read(ctx, []string{role})
	if err != nil {
		t.Fatalf("Read(%q): %v", role, err)
	}
	switch len(recs) {
	case 0:
		return lease.Record{}, false
	case 1:
		if recs[0].Role != role {
			t.Fatalf("Read(%q) returned role %q", role, recs[0].Role)
		}
		if recs[0].Held {
			t.Fatalf("Read(%q) returned Held=true; Read never sets it", role)
		}
		return recs[0], true
	default:
		t.Fatalf("Read(%q) returned %d records", role, len(recs))
		return lease.Record{}, false
	}
}

func mustRead(t *testing.T, ctx context.Context, st lease.Store, role string) lease.Record {
	t.Helper()
	r, ok := readOne(t, ctx, st, role)
	if !ok {
		t.Fatalf("Read(%q) found no row", role)
	}
	return r
}

func mustRelease(t *testing.T, ctx context.Context, st lease.Store, role, holder string, token uint64, want bool) {
	t.Helper()
	got, err := st.Release(ctx, role, holder, token)
	if err != nil {
		t.Fatalf("Release(%q, %s, %d): %v", role, holder, token, err)
	}
	if got != want {
		t.Fatalf("Release(%q, %s, %d) = %v, want %v", role, holder, token, got, want)
	}
}

// checkTerm checks the times of a freshly granted record.
func checkTerm(t *testing.T, what string, r lease.Record, d time.Duration) {
	t.Helper()
	if got := r.ExpiresAt.Sub(r.RenewedAt); got != d {
		t.Errorf("%s: ExpiresAt - RenewedAt = %v, want the LeaseDuration %v", what, got, d)
	}
	if r.RenewedAt.Before(r.AcquiredAt) {
		t.Errorf("%s: RenewedAt %v is before AcquiredAt %v", what, r.RenewedAt, r.AcquiredAt)
	}
}

// sameRow reports whether two records describe the same row state.
func sameRow(a, b lease.Record) bool {
	return a.Role == b.Role && a.Holder == b.Holder && a.HolderAddress == b.HolderAddress && a.Token == b.Token &&
		a.AcquiredAt.Equal(b.AcquiredAt) && a.RenewedAt.Equal(b.RenewedAt) && a.ExpiresAt.Equal(b.ExpiresAt)
}

func (s *leaseSuite) takesFree(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *leaseSuite) takesExpired(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	role := uniqueName(t, "expired")
	first := mustTake(t, ctx, h.Store, holderA, role, 0, s.shortLease)
	time.Sleep(s.pastShortLease)
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

func (s *leaseSuite) refusesWhileHeld(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *leaseSuite) renewsOwnTerm(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *leaseSuite) renewRequiresToken(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *leaseSuite) expiredTermRetaken(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	role := uniqueName(t, "lapsed")
	first := mustTake(t, ctx, h.Store, holderA, role, 0, s.shortLease)
	time.Sleep(s.pastShortLease)
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

func (s *leaseSuite) deposedHolder(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	role := uniqueName(t, "deposed")
	old := mustTake(t, ctx, h.Store, holderA, role, 0, s.shortLease)
	time.Sleep(s.pastShortLease)
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

func (s *leaseSuite) releaseFrees(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *leaseSuite) releaseKeepsToken(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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
	b := mustTake(t, ctx, h.Second, holderB, role, 0, longLease)
	if b.Token <= a.Token {
		t.Fatalf("the term after a release got token %d, not above the released term's %d", b.Token, a.Token)
	}
}

func (s *leaseSuite) tokensIncrease(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	role := uniqueName(t, "tokens")
	holders := []string{holderA, holderB, holderC}
	var prev uint64
	for i := range 30 {
		st := h.Store
		if i%2 == 1 {
			st = h.Second
		}
		holder := holders[i%len(holders)]
		r := mustTake(t, ctx, st, holder, role, 0, longLease)
		if r.Token <= prev {
			t.Fatalf("takeover %d got token %d, not above the previous %d", i, r.Token, prev)
		}
		prev = r.Token
		mustRelease(t, ctx, st, role, holder, r.Token, true)
	}
	// A takeover after expiry continues the sequence too.
	r := mustTake(t, ctx, h.Store, holderA, role, 0, s.shortLease)
	if r.Token <= prev {
		t.Fatalf("got token %d, not above the previous %d", r.Token, prev)
	}
	prev = r.Token
	time.Sleep(s.pastShortLease)
	if r := mustTake(t, ctx, h.Second, holderB, role, 0, longLease); r.Token <= prev {
		t.Fatalf("the takeover after expiry got token %d, not above the previous %d", r.Token, prev)
	}
	// Another role has a sequence of its own, from 1.
	if r := mustTake(t, ctx, h.Store, holderA, uniqueName(t, "tokens-other"), 0, longLease); r.Token == 0 {
		t.Fatal("a second role got token 0")
	}
}

func (s *leaseSuite) readRoles(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	r1, r2, never := uniqueName(t, "read-1"), uniqueName(t, "read-2"), uniqueName(t, "read-never")
	a := mustTake(t, ctx, h.Store, holderA, r1, 0, longLease)
	b := mustTake(t, ctx, h.Second, holderB, r2, 0, longLease)

	recs, err := h.Store.Read(ctx, []string{r1, never, r2})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	got := make(map[string]lease.Record)
	for _, r := range recs {
		if r.Held {
			t.Errorf("Read returned Held=true for %q; Read never sets it", r.Role)
		}
		got[r.Role] = r
	}
	if len(recs) != 2 || len(got) != 2 {
		t.Fatalf("Read of two held roles and one never held returned %d records: %+v", len(recs), recs)
	}
	if _, ok := got[never]; ok {
		t.Errorf("Read returned a record for a role never held")
	}
	a.Held, b.Held = false, false
	if !sameRow(got[r1], a) {
		t.Errorf("Read(%q) = %+v, want %+v", r1, got[r1], a)
	}
	if !sameRow(got[r2], b) {
		t.Errorf("Read(%q) = %+v, want %+v", r2, got[r2], b)
	}
	if recs, err := h.Store.Read(ctx, nil); err != nil || len(recs) != 0 {
		t.Errorf("Read(nil) = %v, %v; want nothing and no error", recs, err)
	}
	if recs, err := h.Store.Read(ctx, []string{never}); err != nil || len(recs) != 0 {
		t.Errorf("Read of a role never held = %v, %v; want nothing and no error", recs, err)
	}
}

func (s *leaseSuite) mixedHeartbeat(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	own := uniqueName(t, "own")        // held by A: renewed
	free := uniqueName(t, "free")      // never held: taken
	other := uniqueName(t, "other")    // held by B: refused
	lapsed := uniqueName(t, "lapsed")  // B's lease expired: taken
	wrongTok := uniqueName(t, "wrong") // held by A, claimed with a wrong token: refused
	aOwn := mustTake(t, ctx, h.Store, holderA, own, 0, longLease)
	bOther := mustTake(t, ctx, h.Second, holderB, other, 0, longLease)
	bLapsed := mustTake(t, ctx, h.Second, holderB, lapsed, 0, s.shortLease)
	aWrong := mustTake(t, ctx, h.Store, holderA, wrongTok, 0, longLease)
	time.Sleep(s.pastShortLease)

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

// padRole pads base to exactly n bytes with fill (whose length must divide
// the remainder; otherwise single 'x' bytes make up the rest).
func padRole(base string, n int, fill string) string {
	var b strings.Builder
	b.WriteString(base)
	for b.Len()+len(fill) <= n {
		b.WriteString(fill)
	}
	for b.Len() < n {
		b.WriteByte('x')
	}
	return b.String()
}

func (s *leaseSuite) roleLimit(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	ascii := padRole(uniqueName(t, "a"), lease.MaxRoleLength, "x")
	// Two-byte characters: 128 bytes is fewer than 128 characters.
	wide := padRole(uniqueName(t, "w"), lease.MaxRoleLength, "é")
	for _, role := range []string{ascii, wide} {
		if len(role) != lease.MaxRoleLength {
			t.Fatalf("test role is %d bytes", len(role))
		}
		r := mustTake(t, ctx, h.Store, holderA, role, 0, longLease)
		if r.Role != role {
			t.Errorf("record role = %q, want %q", r.Role, role)
		}
		if got := mustRead(t, ctx, h.Second, role); got.Role != role || got.Token != r.Token {
			t.Errorf("Read of a %d-byte role = %+v", len(role), got)
		}
		mustRelease(t, ctx, h.Store, role, holderA, r.Token, true)
	}

	valid := uniqueName(t, "ok")
	tooLong := padRole(uniqueName(t, "long"), lease.MaxRoleLength+1, "x")
	// 100 characters, 200 bytes: the limit counts bytes.
	wideTooLong := uniqueName(t, "wl") + strings.Repeat("é", 100)
	for _, role := range []string{tooLong, wideTooLong} {
		_, err := h.Store.Heartbeat(ctx, lease.HeartbeatRequest{
			Holder: holderA, LeaseDuration: longLease,
			Claims: []lease.Claim{{Role: valid}, {Role: role}},
		})
		if !errors.Is(err, lease.ErrInvalidRole) {
			t.Errorf("Heartbeat with a %d-byte role: err = %v, want one wrapping lease.ErrInvalidRole", len(role), err)
		}
		if _, err := h.Store.Release(ctx, role, holderA, 1); !errors.Is(err, lease.ErrInvalidRole) {
			t.Errorf("Release of a %d-byte role: err = %v, want one wrapping lease.ErrInvalidRole", len(role), err)
		}
		if _, err := h.Store.Read(ctx, []string{role}); !errors.Is(err, lease.ErrInvalidRole) {
			t.Errorf("Read of a %d-byte role: err = %v, want one wrapping lease.ErrInvalidRole", len(role), err)
		}
	}
	if r, ok := readOne(t, ctx, h.Store, valid); ok {
		t.Errorf("a rejected request wrote its valid claim: %+v", r)
	}
}

func (s *leaseSuite) invalidRequests(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	valid := uniqueName(t, "ok")
	dup := uniqueName(t, "dup")
	cases := []struct {
		name    string
		req     lease.HeartbeatRequest
		badRole bool // the error must wrap lease.ErrInvalidRole
	}{
		{"empty role", lease.HeartbeatRequest{Holder: holderA, LeaseDuration: longLease, Claims: []lease.Claim{{Role: valid}, {Role: ""}}}, true},
		{"NUL byte in role", lease.HeartbeatRequest{Holder: holderA, LeaseDuration: longLease, Claims: []lease.Claim{{Role: valid}, {Role: "a\x00b"}}}, true},
		{"role not UTF-8", lease.HeartbeatRequest{Holder: holderA, LeaseDuration: longLease, Claims: []lease.Claim{{Role: valid}, {Role: "a\xffb"}}}, true},
		{"empty holder", lease.HeartbeatRequest{Holder: "", LeaseDuration: longLease, Claims: []lease.Claim{{Role: valid}}}, false},
		{"zero duration", lease.HeartbeatRequest{Holder: holderA, Claims: []lease.Claim{{Role: valid}}}, false},
		{"negative duration", lease.HeartbeatRequest{Holder: holderA, LeaseDuration: -time.Second, Claims: []lease.Claim{{Role: valid}}}, false},
		{"duplicate role", lease.HeartbeatRequest{Holder: holderA, LeaseDuration: longLease, Claims: []lease.Claim{{Role: valid}, {Role: dup}, {Role: dup, Token: 3}}}, false},
	}
	for _, tc := range cases {
		recs, err := h.Store.Heartbeat(ctx, tc.req)
		if err == nil {
			t.Errorf("%s: Heartbeat accepted the request and returned %+v", tc.name, recs)
			continue
		}
		if tc.badRole && !errors.Is(err, lease.ErrInvalidRole) {
			t.Errorf("%s: err = %v, want one wrapping lease.ErrInvalidRole", tc.name, err)
		}
	}
	recs, err := h.Store.Read(ctx, []string{valid, dup})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(recs) != 0 {
		t.Errorf("rejected requests wrote rows: %+v", recs)
	}
	for _, role := range []string{"", "a\x00b", "a\xffb"} {
		if _, err := h.Store.Release(ctx, role, holderA, 1); !errors.Is(err, lease.ErrInvalidRole) {
			t.Errorf("Release(%q): err = %v, want one wrapping lease.ErrInvalidRole", role, err)
		}
		if _, err := h.Store.Read(ctx, []string{valid, role}); !errors.Is(err, lease.ErrInvalidRole) {
			t.Errorf("Read(%q): err = %v, want one wrapping lease.ErrInvalidRole", role, err)
		}
	}
}

// expiryByStoreClock: the request carries durations only; the store alone
// decides when a term ends, and the records show its arithmetic.
func (s *leaseSuite) expiryByStoreClock(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	role := uniqueName(t, "clock")
	a := mustTake(t, ctx, h.Store, holderA, role, 0, s.shortLease)
	checkTerm(t, "short term", a, s.shortLease)
	mustRefuse(t, ctx, h.Second, holderB, role, 0, time.Minute)
	time.Sleep(s.pastShortLease)
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

func (s *leaseSuite) concurrentTakers(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

// watchReleases runs WatchReleases on w until the test ends, forwarding roles to
// the returned channel (dropping them when it is full), and checks at the
// end that the call returned ctx's error.
func watchReleases(t *testing.T, w lease.ReleaseWatcher) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 256)
	done := make(chan error, 1)
	go func() {
		done <- w.WatchReleases(ctx, func(role string) {
			select {
			case got <- role:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("WatchReleases returned %v after its context was cancelled, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("WatchReleases did not return within 10s of its context being cancelled")
		}
	})
	return got
}

// awaitRole waits up to d for role to arrive on ch, skipping other roles.
func awaitRole(ch <-chan string, role string, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case r := <-ch:
			if r == role {
				return true
			}
		case <-timer.C:
			return false
		}
	}
}

func (s *leaseSuite) watcher(t *testing.T, h LeaseHarness) lease.ReleaseWatcher {
	t.Helper()
	if s.f.NoReleaseWatch {
		t.Skip("the store does not announce releases (LeaseFeatures.NoReleaseWatch)")
	}
	w, ok := h.Store.(lease.ReleaseWatcher)
	if !ok {
		t.Fatalf("the store %T does not implement lease.ReleaseWatcher; set LeaseFeatures.NoReleaseWatch if it cannot", h.Store)
	}
	return w
}

func (s *leaseSuite) releaseAnnounced(t *testing.T) {
	h := s.harness(t)
	w := s.watcher(t, h)
	ctx := testCtx(t)
	role := uniqueName(t, "announce")
	got := watchReleases(t, w)

	// The interface has no "now listening" signal, so first release until
	// one announcement arrives: from then on the watcher is live.
	live := false
	for deadline := time.Now().Add(5 * time.Second); !live && time.Now().Before(deadline); {
		r := mustTake(t, ctx, h.Second, holderB, role, 0, longLease)
		mustRelease(t, ctx, h.Second, role, holderB, r.Token, true)
		live = awaitRole(got, role, 200*time.Millisecond)
	}
	if !live {
		t.Fatalf("no release of %q was announced within 5s of watching", role)
	}
	// Give late duplicates of the warm-up a moment, then drain them.
	time.Sleep(50 * time.Millisecond)
	for len(got) > 0 {
		<-got
	}

	// A release that releases nothing is not announced.
	r := mustTake(t, ctx, h.Second, holderB, role, 0, longLease)
	mustRelease(t, ctx, h.Second, role, holderB, r.Token+1, false)
	mustRelease(t, ctx, h.Second, role, holderA, r.Token, false)
	if awaitRole(got, role, 300*time.Millisecond) {
		t.Errorf("a release that did not happen was announced")
	}

	// The measured one, made through the other instance.
	released := time.Now()
	mustRelease(t, ctx, h.Second, role, holderB, r.Token, true)
	if !awaitRole(got, role, releaseAnnouncement) {
		t.Fatalf("the release of %q was not announced within %v", role, releaseAnnouncement)
	}
	t.Logf("announced %v after the release", time.Since(released).Round(time.Millisecond))
}

func (s *leaseSuite) watchEnds(t *testing.T) {
	h := s.harness(t)
	w := s.watcher(t, h)

	// An ended context ends the call at once.
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- w.WatchReleases(ended, func(string) {}) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("WatchReleases with a cancelled context = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchReleases with a cancelled context did not return within 5s")
	}

	// A context that ends while watching ends the call too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() { done <- w.WatchReleases(ctx, func(string) {}) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("WatchReleases after its deadline = %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WatchReleases did not return within 5s of its context's deadline")
	}
}
