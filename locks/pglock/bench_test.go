package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/pglock"
)

// BenchmarkAcquireRelease times one uncontended acquire (advisory lock and
// fence increment in one statement) and release (unlock) on a pooled
// connection.
func BenchmarkAcquireRelease(b *testing.B) {
	env := setup(b)
	p := newProvider(b, newPool(b, env.URL), pglock.Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := p.Acquire(ctx, "bench", lock.AcquireOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLost_AfterTerminate measures the window of doubt: the time from
// the moment the server has freed the lock (pg_terminate_backend with a
// timeout returns once the backend is gone, and with it the lock) to the
// holder's Lost closing, with the default PingInterval. It reports the mean
// as window-ms; 0 when the holder knew before the lock was free.
func BenchmarkLost_AfterTerminate(b *testing.B) {
	env := setup(b)
	p := newProvider(b, newPool(b, env.URL), pglock.Options{})
	ctx := context.Background()
	key := uint64(pglock.Key("bench-terminate"))
	var total time.Duration
	n := 0
	for b.Loop() {
		l, err := p.Acquire(ctx, "bench-terminate", lock.AcquireOptions{Wait: 10 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		var gone bool
		if err := env.Pool.QueryRow(ctx, `
SELECT bool_and(pg_terminate_backend(pid, 10000)) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid::text::bigint = $1 AND objid::text::bigint = $2`,
			int64(key>>32), int64(key&0xffffffff)).Scan(&gone); err != nil || !gone {
			b.Fatalf("terminate the holder: gone=%v, %v", gone, err)
		}
		freed := time.Now()
		select {
		case <-l.Lost():
		default:
			<-l.Lost()
			total += time.Since(freed)
		}
		n++
		_ = l.Release(ctx)
	}
	b.ReportMetric(total.Seconds()*1000/float64(n), "window-ms")
}
