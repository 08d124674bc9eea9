package pgxstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/internal/testenv"
)

// benchProjectionStore migrates a schema of the benchmark's own and returns
// a store on it.
func benchProjectionStore(b *testing.B) *ProjectionStore {
	b.Helper()
	env := testenv.Postgres(b)
	if err := Migrate(context.Background(), env.Pool, MigrateOptions{}); err != nil {
		b.Fatal(err)
	}
	return mustProjectionStore(b, env.Pool, ProjectionStoreOptions{})
}

// BenchmarkProjectionRefresh times the store's side of a refresh: Reserve
// (one nextval) and Replace of a whole generation (COPY of the grants and
// the flip, one transaction), and reports the sweep of the
// generation it superseded separately, outside the timed part.
func BenchmarkProjectionRefresh(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("grants=%d", n), func(b *testing.B) {
			st := benchProjectionStore(b)
			ctx := context.Background()
			subject := projection.Subject{Type: "user", ID: "bench"}
			grants := manyGrants(n, 1)
			writeProjection(b, ctx, st, subject, grants)
			var swept time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				writeProjection(b, ctx, st, subject, grants)
				b.StopTimer()
				start := time.Now()
				if k, err := st.Sweep(ctx); err != nil || k != 1 {
					b.Fatalf("Sweep = %d, %v", k, err)
				}
				swept += time.Since(start)
				b.StartTimer()
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "grants/s")
			b.ReportMetric(float64(swept.Microseconds())/1000/float64(b.N), "sweep-ms/op")
		})
	}
}

// BenchmarkProjectionPointRead times LocalReader.Mask on a subject whose
// projection has 100 000 grants: one statement through two indexes.
func BenchmarkProjectionPointRead(b *testing.B) {
	st := benchProjectionStore(b)
	ctx := context.Background()
	subject := projection.Subject{Type: "user", ID: "bench"}
	grants := manyGrants(100_000, 1)
	writeProjection(b, ctx, st, subject, grants)
	local, err := projection.NewLocalReader(st)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			g := grants[(i*7919)%len(grants)]
			i++
			m, found, err := local.Mask(ctx, subject, g.ResourceType, g.ResourceID)
			if err != nil || !found || m != g.Mask {
				b.Fatalf("Mask = %v, %v, %v", m, found, err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				g := grants[(i*7919)%len(grants)]
				i++
				if _, found, err := local.Mask(ctx, subject, g.ResourceType, g.ResourceID); err != nil || !found {
					b.Errorf("Mask = %v, %v", found, err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reads/s")
	})
}
