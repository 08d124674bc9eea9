package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// Reading, and what every method refuses: bad input, an ended context, a
// database without the table.

func (s *leaseSuite) inputChecks() []check {
	return area(s.setup,
		subtest[leaseBundle]{"ReadReturnsOnlyRolesWithARow", s.readRoles},
		subtest[leaseBundle]{"RoleLimitIs128Bytes", s.roleLimit},
		subtest[leaseBundle]{"InvalidRequestsWriteNothing", s.invalidRequests},
		subtest[leaseBundle]{"CancelledContextIsRecognisable", s.cancelled},
		subtest[leaseBundle]{"MissingTableIsASchemaMismatch", s.unmigrated},
	)
}

func (s *leaseSuite) readRoles(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
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

func (s *leaseSuite) roleLimit(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
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

func (s *leaseSuite) invalidRequests(t *testing.T, env leaseBundle) {
	h, ctx := env.h, env.ctx
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

// cancelled: every method called with an ended context fails with an
// error that still wraps the context's, so callers can tell a shutdown
// from a failure.
func (s *leaseSuite) cancelled(t *testing.T, env leaseBundle) {
	h := env.h
	role := uniqueName(t, "cancelled")
	calls := []call{
		{"Heartbeat", func(ctx context.Context) error {
			return ignore(h.Store.Heartbeat(ctx, lease.HeartbeatRequest{Holder: holderA, LeaseDuration: longLease, Claims: []lease.Claim{{Role: role}}}))
		}},
		{"Release", func(ctx context.Context) error { return ignore(h.Store.Release(ctx, role, holderA, 1)) }},
		{"Read", func(ctx context.Context) error { return ignore(h.Store.Read(ctx, []string{role})) }},
	}
	if w, ok := h.Store.(lease.ReleaseWatcher); ok && !s.f.NoReleaseWatch {
		calls = append(calls, call{"WatchReleases", func(ctx context.Context) error { return w.WatchReleases(ctx, func(string) {}) }})
	}
	if l, ok := h.Store.(lease.Lister); ok && !s.f.NoList {
		calls = append(calls, call{"List", func(ctx context.Context) error { return ignore(l.List(ctx)) }})
	}
	checkCancelled(t, calls...)
	if _, ok := readOne(t, env.ctx, h.Store, role); ok {
		t.Error("a Heartbeat with a cancelled context wrote the role")
	}
}

// unmigrated: over a database without the lease table, every method fails
// with the adapter's schema-mismatch error.
func (s *leaseSuite) unmigrated(t *testing.T, env leaseBundle) {
	if env.h.Unmigrated == nil {
		t.Skip("the harness has no Unmigrated store (LeaseHarness.Unmigrated)")
	}
	st := env.h.Unmigrated(t).Store
	if st == nil {
		t.Fatal("conformance: Unmigrated returned no Store")
	}
	role := uniqueName(t, "unmigrated")
	calls := []call{
		{"Heartbeat", func(ctx context.Context) error {
			return ignore(st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: holderA, LeaseDuration: longLease, Claims: []lease.Claim{{Role: role}}}))
		}},
		{"Release", func(ctx context.Context) error { return ignore(st.Release(ctx, role, holderA, 1)) }},
		{"Read", func(ctx context.Context) error { return ignore(st.Read(ctx, []string{role})) }},
	}
	if l, ok := st.(lease.Lister); ok && !s.f.NoList {
		calls = append(calls, call{"List", func(ctx context.Context) error { return ignore(l.List(ctx)) }})
	}
	checkSchemaMismatch(t, env.h.SchemaMismatch, calls...)
}
