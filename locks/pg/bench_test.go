package pg_test

import (
	"context"
	"testing"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/pg"
)

// BenchmarkAcquireRelease times one uncontended acquire (advisory lock and
// fence increment in one statement) and release (unlock) on a pooled
// connection.
func BenchmarkAcquireRelease(b *testing.B) {
	env := setup(b)
	p := newProvider(b, newPool(b, env.URL), pg.Options{})
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
