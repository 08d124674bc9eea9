package etcd_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-go/baton/backends/etcd"
	"github.com/baton-go/baton/backends/etcd/internal/etcdtest"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
)

// BenchmarkLock_AcquireRelease times one uncontended acquire and release
// with this provider and, interleaved in the same loop on the same
// cluster, with etcd's concurrency.Mutex (Lock and Unlock). Both treat the
// session the same way: made once, outside the timed loop (the provider's
// session and a concurrency.Session), or made and closed in every
// iteration (a new provider, closed; NewSession and Close). Reported:
// baton-ns/op, mutex-ns/op and their ratio.
func BenchmarkLock_AcquireRelease(b *testing.B) {
	env := etcdtest.New(b)
	ctx := context.Background()
	opts := etcd.LockProviderOptions{Prefix: env.Prefix}
	ttl := int(etcd.DefaultLockTTL / time.Second)

	b.Run("SessionOutsideTheLoop", func(b *testing.B) {
		p, err := etcd.NewLockProvider(env.Client, opts)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close(ctx)
		s, err := concurrency.NewSession(env.Client, concurrency.WithTTL(ttl))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		// Warm both sessions up.
		l, err := p.Acquire(ctx, "bench", lock.AcquireOptions{})
		if err != nil {
			b.Fatal(err)
		}
		_ = l.Release(ctx)
		var ours, theirs time.Duration
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			t0 := time.Now()
			l, err := p.Acquire(ctx, "bench", lock.AcquireOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			m := concurrency.NewMutex(s, env.Prefix+"mutex/bench")
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			ours += t1.Sub(t0)
			theirs += t2.Sub(t1)
		}
		reportSideBySide(b, ours, theirs)
	})

	b.Run("SessionInsideTheLoop", func(b *testing.B) {
		var ours, theirs time.Duration
		b.ReportAllocs()
		for b.Loop() {
			t0 := time.Now()
			p, err := etcd.NewLockProvider(env.Client, opts)
			if err != nil {
				b.Fatal(err)
			}
			l, err := p.Acquire(ctx, "bench", lock.AcquireOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
			if err := p.Close(ctx); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			s, err := concurrency.NewSession(env.Client, concurrency.WithTTL(ttl))
			if err != nil {
				b.Fatal(err)
			}
			m := concurrency.NewMutex(s, env.Prefix+"mutex/bench")
			if err := m.Lock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := m.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			t2 := time.Now()
			ours += t1.Sub(t0)
			theirs += t2.Sub(t1)
		}
		reportSideBySide(b, ours, theirs)
	})
}

func reportSideBySide(b *testing.B, ours, theirs time.Duration) {
	n := float64(b.N)
	b.ReportMetric(float64(ours.Nanoseconds())/n, "baton-ns/op")
	b.ReportMetric(float64(theirs.Nanoseconds())/n, "mutex-ns/op")
	b.ReportMetric(float64(ours)/float64(theirs), "ratio")
}

// BenchmarkLease_Heartbeat times the heartbeat of a holder that renews n
// roles, and of a follower whose n claims are all refused, for 1, 100 and
// 1000 roles. A renewal is one KeepAlive and one quorum read whatever n; a
// follower's claims are transactions of at most MaxTxnOps-4 claims each.
func BenchmarkLease_Heartbeat(b *testing.B) {
	env := etcdtest.New(b)
	ctx := context.Background()
	for _, n := range []int{1, 100, 1000} {
		s, err := etcd.NewLeaseStore(env.Client, etcd.LeaseStoreOptions{Prefix: env.Prefix})
		if err != nil {
			b.Fatal(err)
		}
		set := fmt.Sprintf("bench-%d", n)
		req := lease.HeartbeatRequest{Holder: "holder", Address: "http://holder", LeaseDuration: time.Minute, Claims: claimsOf(set, n, nil)}
		recs, err := s.Heartbeat(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		tokens := map[string]uint64{}
		for _, r := range recs {
			tokens[r.Role] = r.Token
		}
		renew := req
		renew.Claims = claimsOf(set, n, tokens)
		b.Run(fmt.Sprintf("Renew/roles=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Heartbeat(ctx, renew); err != nil {
					b.Fatal(err)
				}
			}
		})
		follow := req
		follow.Holder = "follower"
		b.Run(fmt.Sprintf("Follow/roles=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := s.Heartbeat(ctx, follow); err != nil {
					b.Fatal(err)
				}
			}
		})
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLease_GracefulHandover times, per iteration, a holder's
// manager closing (releasing its role) until a waiting manager holds the
// role: the release deletes the key, the waiter's watch hears it and its
// heartbeat takes the role at once. Reported: handover-ns/op (the mean),
// p50-ns, p99-ns and max-ns.
func BenchmarkLease_GracefulHandover(b *testing.B) {
	env := etcdtest.New(b)
	ctx := context.Background()
	var total time.Duration
	took := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		role := fmt.Sprintf("handover-%d-%d", b.N, i)
		a, la := startManager(b, env, "a", role)
		waitHeld(b, la)
		bm, lb := startManager(b, env, "b", role)
		// b has heartbeated once (it sees a as the holder): from then on
		// its watch hears the release, even if it is not live yet.
		for lb.CurrentHolder() != "a" {
			time.Sleep(100 * time.Microsecond)
		}
		b.StartTimer()
		start := time.Now()
		if err := a.Close(ctx); err != nil {
			b.Fatal(err)
		}
		waitHeld(b, lb)
		took = append(took, time.Since(start))
		total += took[len(took)-1]
		b.StopTimer()
		_ = bm.Close(ctx)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "handover-ns/op")
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(took[len(took)-1].Nanoseconds()), "max-ns")
}

// startManager starts a manager over a store of its own that registers
// role. Its heartbeat is slow (every 20s), so a prompt takeover can only
// come from the release watch.
func startManager(b *testing.B, env *etcdtest.Env, id, role string) (*lease.Manager, *lease.Lease) {
	b.Helper()
	s := newLeaseStore(b, env, etcd.LeaseStoreOptions{})
	m, err := lease.NewManager(lease.Config{Store: s, InstanceID: id, LeaseDuration: time.Minute, RenewInterval: 20 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	l, err := m.Register(role)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	b.Cleanup(func() {
		_ = m.Close(context.Background())
		<-done
	})
	b.Cleanup(func() { _ = m.Close(context.Background()) })
	return m, l
}

func waitHeld(b *testing.B, l *lease.Lease) {
	b.Helper()
	for end := time.Now().Add(30 * time.Second); !l.IsHeld(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(end) {
			b.Fatalf("%s not held within 30s", l.Role())
		}
	}
}
