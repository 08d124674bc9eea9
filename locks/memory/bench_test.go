package memory_test

import (
	"context"
	"testing"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/memory"
)

func BenchmarkAcquireRelease(b *testing.B) {
	p, err := memory.NewProvider(memory.Options{})
	if err != nil {
		b.Fatal(err)
	}
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
