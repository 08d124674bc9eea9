package pgxstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/internal/testenv"
)

// BenchmarkLeaseHeartbeat times one heartbeat tick that renews every role
// an instance holds, for 1 role and for 64 partitions, and counts the
// statements it sends: the count must not grow with the roles.
func BenchmarkLeaseHeartbeat(b *testing.B) {
	for _, roles := range []int{1, 64} {
		b.Run(fmt.Sprintf("roles=%d", roles), func(b *testing.B) {
			env := testenv.Postgres(b)
			ctx := context.Background()
			if err := Migrate(ctx, env.Pool, MigrateOptions{}); err != nil {
				b.Fatal(err)
			}
			counter := &queryCounter{}
			cfg, err := pgxpool.ParseConfig(env.URL)
			if err != nil {
				b.Fatal(err)
			}
			cfg.ConnConfig.Tracer = counter
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			st, err := NewLeaseStore(pool, LeaseStoreOptions{})
			if err != nil {
				b.Fatal(err)
			}
			req := lease.HeartbeatRequest{Holder: "bench", LeaseDuration: time.Minute, Claims: make([]lease.Claim, roles)}
			for i := range req.Claims {
				req.Claims[i].Role = lease.PartitionRole("devices", i)
			}
			recs, err := st.Heartbeat(ctx, req)
			if err != nil {
				b.Fatal(err)
			}
			for i, r := range recs {
				req.Claims[i] = lease.Claim{Role: r.Role, Token: r.Token}
			}
			before := counter.n.Load()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				recs, err := st.Heartbeat(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if len(recs) != roles || !recs[0].Held {
					b.Fatalf("renewal failed: %+v", recs[0])
				}
			}
			b.ReportMetric(float64(counter.n.Load()-before)/float64(b.N), "statements/tick")
		})
	}
}
