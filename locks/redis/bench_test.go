package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/internal/testenv"
	batonredis "github.com/baton-go/baton/locks/redis"
)

// BenchmarkAcquireRelease times one uncontended acquire+release with this
// provider and, interleaved in the same loop on the same server, with raw
// redislock (Obtain + Release). The difference is the fencing token and
// the keepalive. Reported: baton-ns/op, redislock-ns/op and their ratio.
func BenchmarkAcquireRelease(b *testing.B) {
	env := testenv.Redis(b)
	p := newProvider(b, env, batonredis.Options{})
	raw := redislock.New(env.Client)
	ctx := context.Background()
	name := "bench"
	rawKey := env.Prefix + "raw"
	var ours, theirs time.Duration
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
		rl, err := raw.Obtain(ctx, rawKey, batonredis.DefaultTTL, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := rl.Release(ctx); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		ours += t1.Sub(t0)
		theirs += t2.Sub(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(ours.Nanoseconds())/n, "baton-ns/op")
	b.ReportMetric(float64(theirs.Nanoseconds())/n, "redislock-ns/op")
	b.ReportMetric(float64(ours)/float64(theirs), "ratio")
}
