package redis

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/internal/testenv"
)

// BenchmarkAcquireRelease times one uncontended acquire+release with this
// provider and, interleaved in the same loop on the same server, with raw
// redislock (Obtain + Release, no token, no keepalive) and with the fenced
// floor: the provider's own acquire and release scripts sent bare, without
// a Provider, a Lock or a keepalive. ratio is baton over raw redislock;
// floor-ratio is the floor over raw redislock, the part of the cost that
// fencing itself brings; baton over the floor is the provider's own share.
func BenchmarkAcquireRelease(b *testing.B) {
	env := testenv.Redis(b)
	p, err := NewProvider(env.Client, Options{Prefix: env.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	raw := redislock.New(env.Client)
	ctx := context.Background()
	name := "bench"
	rawKey := env.Prefix + "raw"
	floorKeys := []string{p.LockKey("floor"), p.FenceKey("floor")}
	ttl := DefaultTTL.Milliseconds()
	var ours, theirs, floor time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		l, err := p.Acquire(ctx, name, lock.AcquireOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		rl, err := raw.Obtain(ctx, rawKey, DefaultTTL, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := rl.Release(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if answer, err := acquireScript.Run(ctx, env.Client, floorKeys, "v", ttl).Int64Slice(); err != nil || len(answer) == 0 || answer[0] == 0 {
			b.Fatalf("floor acquire: %v, %v; want {token, uptime}", answer, err)
		}
		if err := releaseScript.Run(ctx, env.Client, floorKeys[:1], "v").Err(); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		ours += t1.Sub(t0)
		theirs += t2.Sub(t1)
		floor += t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(ours.Nanoseconds())/n, "baton-ns/op")
	b.ReportMetric(float64(theirs.Nanoseconds())/n, "redislock-ns/op")
	b.ReportMetric(float64(floor.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(ours)/float64(theirs), "ratio")
	b.ReportMetric(float64(floor)/float64(theirs), "floor-ratio")
}
