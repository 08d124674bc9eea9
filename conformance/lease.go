package conformance

import (
	"context"
	"strings"
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
	// Unmigrated, if set, returns a harness whose Store works on a
	// database without the lease table (a fresh schema, never migrated).
	// Every call of it must fail with an error wrapping SchemaMismatch.
	// nil skips that subtest: a store with no tables has nothing to miss.
	Unmigrated func(t *testing.T) LeaseHarness
	// SchemaMismatch is the adapter's error for a missing or different
	// schema, which Unmigrated's calls wrap.
	SchemaMismatch error
}

// LeaseFeatures declares what a lease store cannot do. The zero value
// expects everything.
type LeaseFeatures struct {
	// NoReleaseWatch means the store does not implement
	// lease.ReleaseWatcher; the announcement subtests are skipped.
	// Otherwise the store must implement it, and a release must be
	// announced within 1s.
	NoReleaseWatch bool
	// NoList means the store does not implement lease.Lister; the listing
	// subtest is skipped. Otherwise the store must implement it.
	NoList bool
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
// factory returns: one subtest per rule written on lease.Store and
// the optional lease.ReleaseWatcher and lease.Lister (L1, L2, ...), named
// as docs/adapters.md lists them.
//
// Several subtests wait for a short lease to expire, in real time: the
// store's clock must run at the pace of the test's.
func RunLeaseStore(t *testing.T, factory func(t *testing.T) LeaseHarness, features LeaseFeatures) {
	runChecks(t, newLeaseSuite(factory, features).checks())
}

type leaseSuite struct {
	factory func(t *testing.T) LeaseHarness
	f       LeaseFeatures
	// short is the lease the expiry subtests let run out; pastShort is how
	// long they wait for that.
	short, pastShort time.Duration
}

func newLeaseSuite(factory func(t *testing.T) LeaseHarness, features LeaseFeatures) *leaseSuite {
	f := features.withDefaults()
	return &leaseSuite{factory: factory, f: f, short: f.ShortLease, pastShort: f.ShortLease + f.ExpiryLag}
}

// checks lists the suite's subtests, area by area.
func (s *leaseSuite) checks() []check {
	return concat(s.takeChecks(), s.renewChecks(), s.releaseChecks(), s.announceChecks(), s.inputChecks(), s.listChecks())
}

// leaseBundle is what every lease subtest starts from.
type leaseBundle struct {
	h   LeaseHarness
	ctx context.Context
}

// setup is the setup of the take, renew, release and input areas: a fresh
// harness.
func (s *leaseSuite) setup(t *testing.T) leaseBundle {
	t.Helper()
	h := s.factory(t)
	if h.Store == nil {
		t.Fatal("conformance: the factory returned no Store")
	}
	if h.Second == nil {
		h.Second = h.Store
	}
	return leaseBundle{h: h, ctx: testCtx(t)}
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
