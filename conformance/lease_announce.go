package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// Announcing releases (lease.ReleaseWatcher): every release that ends a
// term, after it took effect, and nothing else.

func (s *leaseSuite) announceChecks() []check {
	return area(s.watchSetup,
		subtest[watchBundle]{"ReleaseIsAnnounced", s.releaseAnnounced},
		subtest[watchBundle]{"RefusedReleasesAreNotAnnounced", s.refusedNotAnnounced},
		subtest[watchBundle]{"AnnouncementFollowsTheRelease", s.announcementFollows},
		subtest[watchBundle]{"WatchReleasesReturnsWhenItsContextEnds", s.watchEnds},
	)
}

// watchBundle is a lease subtest's start with the store's watcher.
type watchBundle struct {
	leaseBundle
	w lease.ReleaseWatcher
}

// watchSetup is the setup of the announcement area: a fresh harness whose
// store watches releases, or a skip when the features say it cannot.
func (s *leaseSuite) watchSetup(t *testing.T) watchBundle {
	t.Helper()
	if s.f.NoReleaseWatch {
		t.Skip("the store does not announce releases (LeaseFeatures.NoReleaseWatch)")
	}
	env := s.setup(t)
	w, ok := env.h.Store.(lease.ReleaseWatcher)
	if !ok {
		t.Fatalf("the store %T does not implement lease.ReleaseWatcher; set LeaseFeatures.NoReleaseWatch if it cannot", env.h.Store)
	}
	return watchBundle{leaseBundle: env, w: w}
}

// watchReleasesWith runs WatchReleases on w until the test ends, with
// released as its callback, and checks at the end that the call returned
// ctx's error.
func watchReleasesWith(t *testing.T, w lease.ReleaseWatcher, released func(role string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.WatchReleases(ctx, released) }()
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
}

// watchReleases watches w until the test ends, forwarding roles to the
// returned channel (dropping them when it is full).
func watchReleases(t *testing.T, w lease.ReleaseWatcher) chan string {
	t.Helper()
	heard := make(chan string, 256)
	watchReleasesWith(t, w, func(role string) {
		select {
		case heard <- role:
		default:
		}
	})
	return heard
}

// liveWatch watches w and returns the roles it hears once the watch is
// live.
func liveWatch(t *testing.T, env leaseBundle, w lease.ReleaseWatcher) <-chan string {
	t.Helper()
	heard := watchReleases(t, w)
	warmUp(t, env, heard)
	return heard
}

// warmUp returns once the watch that forwards to heard is live. The
// interface has no "now listening" signal, so it releases a role of its
// own until one release is announced, then drains what it caused.
func warmUp(t *testing.T, env leaseBundle, heard <-chan string) {
	t.Helper()
	h, ctx := env.h, env.ctx
	warm := uniqueName(t, "warm-up")
	live := false
	for deadline := time.Now().Add(5 * time.Second); !live && time.Now().Before(deadline); {
		r := mustTake(t, ctx, h.Second, holderC, warm, 0, longLease)
		mustRelease(t, ctx, h.Second, warm, holderC, r.Token, true)
		live = awaitRole(heard, warm, 200*time.Millisecond)
	}
	if !live {
		t.Fatalf("no release of %q was announced within 5s of watching", warm)
	}
	// Late duplicates of the warm-up are harmless: every subtest waits for
	// roles of its own.
}

// announcedBefore releases a marker role and reads heard until the
// marker's announcement arrives: announcements come in the order of the
// releases, so a release of any of roles announced before it shows first.
func announcedBefore(t *testing.T, env leaseBundle, heard <-chan string, roles ...string) bool {
	t.Helper()
	h, ctx := env.h, env.ctx
	marker := uniqueName(t, "marker")
	r := mustTake(t, ctx, h.Second, holderC, marker, 0, longLease)
	mustRelease(t, ctx, h.Second, marker, holderC, r.Token, true)
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	found := false
	for {
		select {
		case got := <-heard:
			if got == marker {
				return found
			}
			for _, role := range roles {
				found = found || got == role
			}
		case <-timer.C:
			t.Fatalf("the release of the marker role %q was not announced within 5s", marker)
			return found
		}
	}
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

// releaseAnnounced: a release made through either store is announced to a
// watcher within releaseAnnouncement.
func (s *leaseSuite) releaseAnnounced(t *testing.T, env watchBundle) {
	h, ctx := env.h, env.ctx
	heard := liveWatch(t, env.leaseBundle, env.w)
	role := uniqueName(t, "announce")
	r := mustTake(t, ctx, h.Second, holderB, role, 0, longLease)
	released := time.Now()
	mustRelease(t, ctx, h.Second, role, holderB, r.Token, true)
	if !awaitRole(heard, role, releaseAnnouncement) {
		t.Fatalf("the release of %q was not announced within %v", role, releaseAnnouncement)
	}
	t.Logf("announced %v after the release", time.Since(released).Round(time.Millisecond))
}

// refusedNotAnnounced: a release that releases nothing (a wrong token, a
// wrong holder, a role never held) is not announced.
func (s *leaseSuite) refusedNotAnnounced(t *testing.T, env watchBundle) {
	h, ctx := env.h, env.ctx
	heard := liveWatch(t, env.leaseBundle, env.w)
	role, never := uniqueName(t, "refused"), uniqueName(t, "never")
	r := mustTake(t, ctx, h.Second, holderB, role, 0, longLease)
	mustRelease(t, ctx, h.Second, role, holderB, r.Token+1, false)
	mustRelease(t, ctx, h.Store, role, holderA, r.Token, false)
	mustRelease(t, ctx, h.Store, never, holderA, 1, false)
	if announcedBefore(t, env.leaseBundle, heard, role, never) {
		t.Errorf("a release that released nothing was announced")
	}
}

// announcementFollows: a successor that takes the role the moment it hears
// of its release, from inside the watcher's callback, gets it: the
// announcement goes out only once the release has taken effect.
func (s *leaseSuite) announcementFollows(t *testing.T, env watchBundle) {
	h, ctx := env.h, env.ctx
	role := uniqueName(t, "follow")
	type taken struct {
		recs []lease.Record
		err  error
	}
	takes := make(chan taken, 16)
	others := make(chan string, 256)
	watchReleasesWith(t, env.w, func(r string) {
		if r != role {
			select {
			case others <- r:
			default:
			}
			return
		}
		recs, err := h.Second.Heartbeat(ctx, lease.HeartbeatRequest{
			Holder: holderB, Address: "http://" + holderB + ":8080", LeaseDuration: longLease,
			Claims: []lease.Claim{{Role: role}},
		})
		select {
		case takes <- taken{recs, err}:
		default:
		}
	})
	warmUp(t, env.leaseBundle, others)

	a := mustTake(t, ctx, h.Store, holderA, role, 0, longLease)
	mustRelease(t, ctx, h.Store, role, holderA, a.Token, true)
	select {
	case tk := <-takes:
		switch {
		case tk.err != nil:
			t.Fatalf("the successor's Heartbeat on hearing of the release: %v", tk.err)
		case len(tk.recs) != 1:
			t.Fatalf("the successor's Heartbeat returned %d records for one claim", len(tk.recs))
		case !tk.recs[0].Held:
			t.Fatalf("the successor that took %q the moment its release was announced was refused (the row shows holder %q, token %d): the announcement came before the release took effect",
				role, tk.recs[0].Holder, tk.recs[0].Token)
		case tk.recs[0].Token <= a.Token:
			t.Errorf("the successor got token %d, not above the released term's %d", tk.recs[0].Token, a.Token)
		}
	case <-time.After(releaseAnnouncement):
		t.Fatalf("the release of %q was not announced within %v", role, releaseAnnouncement)
	}
}

// watchEnds: WatchReleases returns its context's error when the context
// ends, whether before the call or during it.
func (s *leaseSuite) watchEnds(t *testing.T, env watchBundle) {
	w := env.w
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
