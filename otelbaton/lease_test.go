package otelbaton_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
)

// cuttableLeases is the memory lease store with a switch that makes every
// heartbeat fail, as an unreachable database would.
type cuttableLeases struct {
	*memory.LeaseStore
	down atomic.Bool
}

func (s *cuttableLeases) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if s.down.Load() {
		return nil, errors.New("connection refused")
	}
	time.Sleep(50 * time.Millisecond) // a round trip
	return s.LeaseStore.Heartbeat(ctx, req)
}

func newManager(t *testing.T, f *fixture, store lease.Store, id string) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(lease.Config{Store: store, InstanceID: id, Hooks: f.obs.Leases()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// startCut starts a manager of the role "maintenance" over a cuttable
// store, and returns the store.
func startCut(t *testing.T, f *fixture) *cuttableLeases {
	t.Helper()
	store := &cuttableLeases{LeaseStore: newLeaseStore(t)}
	m := newManager(t, f, store, instance)
	if _, err := m.Register("maintenance"); err != nil {
		t.Fatal(err)
	}
	run(t, m)
	return store
}

func newLeaseStore(t *testing.T) *memory.LeaseStore {
	t.Helper()
	store, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// run runs m until Close, or until the test ends.
func run(t *testing.T, m *lease.Manager) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = m.Close(context.Background())
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestMetric_HeartbeatDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		startCut(t, f)
		time.Sleep(2*lease.DefaultRenewInterval + time.Second) // heartbeats at 0, 5 s and 10 s
		synctest.Wait()
		got := f.mustMetric("baton.lease.heartbeat.duration", "s")
		h := histograms[float64](t, got)
		if len(h) != 1 || h[""].Count != 3 || h[""].Sum < 0.149 || h[""].Sum > 0.151 {
			t.Errorf("%s = %v, want 3 heartbeats of 50ms, no attributes", got.Name, h)
		}
	})
}

func TestMetric_HeartbeatFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		store := startCut(t, f)
		synctest.Wait()
		store.down.Store(true)
		time.Sleep(4 * lease.DefaultRenewInterval) // at 5, 10, 15 and 20 s
		synctest.Wait()
		got := f.mustMetric("baton.lease.heartbeat.failures", "{heartbeat}")
		sameMap(t, got.Name, sums(t, got), map[string]int64{"error.type=_OTHER": 4})
		store.down.Store(false)
	})
}

func TestMetric_RoleHeldPerRoleAndInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		store := newLeaseStore(t)
		m := newManager(t, f, store, instance)
		other := newManager(t, newFixture(t), store, "other")
		for _, mgr := range []*lease.Manager{m, other} {
			if _, err := mgr.Register("maintenance"); err != nil {
				t.Fatal(err)
			}
		}
		run(t, m)
		synctest.Wait()
		run(t, other)
		// The outbox leader lock, through the lock hooks.
		r := newOutboxRig(t, f)
		stop := r.run(r.config(proc("a", 0, nil)))
		synctest.Wait()
		const (
			role = "baton.instance=" + instance + ",baton.role=maintenance,baton.role.kind=lease"
			lead = "baton.instance=" + instance + ",baton.role=baton-outbox-driver,baton.role.kind=lock"
		)
		held := f.mustMetric("baton.role.held", "{role}")
		sameMap(t, held.Name, gauges(t, held), map[string]int64{role: 1, lead: 1})

		// Stopped: both roles let go; the other instance takes the lease.
		stop()
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(lease.DefaultRenewInterval)
		synctest.Wait()
		sameMap(t, held.Name, gauges(t, f.mustMetric("baton.role.held", "{role}")), map[string]int64{role: 0, lead: 0})
	})
}

func TestMetric_LockAcquireDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		p := f.obs.Locks(r.locks)
		ctx := context.Background()
		l, err := p.Acquire(ctx, "job", lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := p.Acquire(ctx, "job", lock.AcquireOptions{Wait: 2 * time.Second}); !errors.Is(err, lock.ErrNotAcquired) {
				t.Fatalf("Acquire of a held lock: %v", err)
			}
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Acquire(ctx, "job", lock.AcquireOptions{Wait: -time.Second}); !errors.Is(err, lock.ErrInvalidOptions) {
			t.Fatalf("Acquire with a negative wait: %v", err)
		}
		got := f.mustMetric("baton.lock.acquire.duration", "s")
		sameMap(t, got.Name, histograms[float64](t, got), map[string]hist{
			"baton.lock=job,baton.outcome=acquired":     {1, 0},
			"baton.lock=job,baton.outcome=not_acquired": {2, 4},
			"baton.lock=job,baton.outcome=error":        {1, 0},
		})
	})
}

func TestMetric_LocksLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		p := f.obs.Locks(r.locks)
		ctx := context.Background()
		released, err := p.Acquire(ctx, "released", lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := released.Release(ctx); err != nil {
			t.Fatal(err)
		}
		lost, err := p.Acquire(ctx, "taken", lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r.locks.TakeAway("taken")
		<-lost.Lost()
		synctest.Wait()
		got := f.mustMetric("baton.lock.lost", "{lock}")
		sameMap(t, got.Name, sums(t, got), map[string]int64{"baton.lock=taken": 1})
		held := f.mustMetric("baton.role.held", "{role}")
		sameMap(t, held.Name, gauges(t, held), map[string]int64{
			"baton.instance=" + instance + ",baton.role=released,baton.role.kind=lock": 0,
			"baton.instance=" + instance + ",baton.role=taken,baton.role.kind=lock":    0,
		})
	})
}
