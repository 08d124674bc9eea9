package memory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
)

func TestLeaseStore_Conformance(t *testing.T) {
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		memLeases, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return conformance.LeaseHarness{Store: memLeases}
	}, conformance.LeaseFeatures{})
}

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func heartbeat(t *testing.T, st *memory.LeaseStore, holder string, d time.Duration, role string, token uint64) lease.Record {
	t.Helper()
	recs, err := st.Heartbeat(t.Context(), lease.HeartbeatRequest{
		Holder: holder, LeaseDuration: d, Claims: []lease.Claim{{Role: role, Token: token}},
	})
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if len(recs) != 1 {
		t.Fatalf("Heartbeat returned %d records for one claim", len(recs))
	}
	return recs[0]
}

func TestLeaseStore_ExpiryIsJudgedByTheInjectedClock(t *testing.T) {
	clock := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	st, err := memory.NewLeaseStore(memory.LeaseStoreOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	const d = time.Hour
	start := time.Now()

	a := heartbeat(t, st, "a", d, "maintenance", 0)
	if !a.Held || a.Token != 1 {
		t.Fatalf("first take = %+v, want held with token 1", a)
	}
	if !a.AcquiredAt.Equal(clock.Now()) || !a.ExpiresAt.Equal(clock.Now().Add(d)) {
		t.Fatalf("record times %v..%v do not come from the store's clock (%v)", a.AcquiredAt, a.ExpiresAt, clock.Now())
	}

	clock.Advance(d - time.Nanosecond)
	if b := heartbeat(t, st, "b", d, "maintenance", 0); b.Held {
		t.Fatalf("taken a nanosecond before expiry by the store's clock: %+v", b)
	}
	clock.Advance(time.Nanosecond)
	b := heartbeat(t, st, "b", d, "maintenance", 0)
	if !b.Held || b.Token != 2 || b.Holder != "b" {
		t.Fatalf("take at expiry by the store's clock = %+v, want held by b with token 2", b)
	}
	if r := heartbeat(t, st, "a", d, "maintenance", a.Token); r.Held {
		t.Fatalf("the deposed holder renewed: %+v", r)
	}
	// Hours passed for the store; no real time did.
	if took := time.Since(start); took > time.Minute {
		t.Fatalf("the test took %v of real time", took)
	}
}

func TestLeaseStore_ReleaseIsJudgedByTheInjectedClock(t *testing.T) {
	clock := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	st, err := memory.NewLeaseStore(memory.LeaseStoreOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	a := heartbeat(t, st, "a", time.Minute, "r", 0)
	clock.Advance(time.Minute)
	// The term has ended by the store's clock: nothing left to release.
	ok, err := st.Release(t.Context(), "r", "a", a.Token)
	if err != nil || ok {
		t.Fatalf("Release after expiry = %v, %v; want false", ok, err)
	}
}

func TestLeaseStore_EveryWatcherHearsEachRelease(t *testing.T) {
	st, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	const watchers = 3
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		heard   = make(map[int][]string)
		started sync.WaitGroup
	)
	started.Add(watchers)
	for i := range watchers {
		wg.Go(func() {
			first := true
			_ = st.WatchReleases(ctx, func(role string) {
				mu.Lock()
				heard[i] = append(heard[i], role)
				mu.Unlock()
				if first && role == "warm-up" {
					first = false
					started.Done()
				}
			})
		})
	}
	// Release "warm-up" until every watcher has heard it once.
	allStarted := make(chan struct{})
	go func() { started.Wait(); close(allStarted) }()
	for warm := true; warm; {
		r := heartbeat(t, st, "a", time.Minute, "warm-up", 0)
		if _, err := st.Release(ctx, "warm-up", "a", r.Token); err != nil {
			t.Fatal(err)
		}
		select {
		case <-allStarted:
			warm = false
		case <-time.After(10 * time.Millisecond):
		}
	}
	mu.Lock()
	clear(heard)
	mu.Unlock()

	for _, role := range []string{"r1", "r2", "r3"} {
		r := heartbeat(t, st, "a", time.Minute, role, 0)
		if ok, err := st.Release(ctx, role, "a", r.Token); err != nil || !ok {
			t.Fatalf("Release(%s) = %v, %v", role, ok, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		done := true
		for i := range watchers {
			done = done && len(heard[i]) == 3
		}
		snapshot := make(map[int][]string, len(heard))
		for k, v := range heard {
			snapshot[k] = append([]string(nil), v...)
		}
		mu.Unlock()
		if done {
			for i := range watchers {
				if got := snapshot[i]; got[0] != "r1" || got[1] != "r2" || got[2] != "r3" {
					t.Errorf("watcher %d heard %v, want [r1 r2 r3] in release order", i, got)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 5s the watchers heard %v", snapshot)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait() // goleak, in TestMain, checks nothing is left behind
}

func TestLeaseStore_SlowWatcherDoesNotBlockRelease(t *testing.T) {
	st, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	unblock := make(chan struct{})
	done := make(chan error, 1)
	entered := make(chan struct{}, 1)
	go func() {
		done <- st.WatchReleases(ctx, func(string) {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-unblock
		})
	}()
	// Release until the watcher is stuck in its callback, then many more.
	for stuck := false; !stuck; {
		r := heartbeat(t, st, "a", time.Minute, "r", 0)
		if _, err := st.Release(ctx, "r", "a", r.Token); err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
			stuck = true
		case <-time.After(10 * time.Millisecond):
		}
	}
	start := time.Now()
	for range 1000 {
		r := heartbeat(t, st, "a", time.Minute, "r", 0)
		if ok, err := st.Release(ctx, "r", "a", r.Token); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("1000 releases took %v with a stuck watcher", took)
	}
	cancel()
	close(unblock)
	if err := <-done; err != context.Canceled {
		t.Fatalf("WatchReleases = %v, want context.Canceled", err)
	}
}
