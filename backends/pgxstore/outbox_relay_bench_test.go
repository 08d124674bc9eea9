package pgxstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	lockmem "github.com/baton-go/baton/locks/memory"
)

// BenchmarkOutboxRelay measures the whole relay: the real outbox.Driver,
// with no-op processors for the three lanes, walking 100 000 entries from
// the start of the table to the end, in entries per second. Beside it, on
// the same table in the same op, runs the physical limit: a bare loop of
// the same keyset query plus one cursor upsert per batch. ratio is the
// driver's rate over the bare loop's. An op is one full walk of each.
func BenchmarkOutboxRelay(b *testing.B) {
	const entries = 100_000
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			env, st := benchOutbox(b, ctx)
			loadOutbox(b, ctx, env.Pool, 1, horizonOf(b, ctx, env.Pool), entries)
			locks, err := lockmem.NewProvider(lockmem.Options{})
			if err != nil {
				b.Fatal(err)
			}

			var driverTime, bareTime time.Duration
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				resetCursor(b, ctx, env.Pool)
				b.StartTimer()
				driverTime += relayOnce(b, ctx, st, locks, batch, entries)
				bareTime += bareWalk(b, ctx, env.Pool, st, batch, entries)
			}
			driverRate := float64(entries*b.N) / driverTime.Seconds()
			bareRate := float64(entries*b.N) / bareTime.Seconds()
			b.ReportMetric(driverRate, "entries/s")
			b.ReportMetric(bareRate, "bare-entries/s")
			b.ReportMetric(driverRate/bareRate, "ratio")
		})
	}
}

// relayOnce runs a driver until its processors have seen n entries and
// returns how long that took.
func relayOnce(b *testing.B, ctx context.Context, st *OutboxStore, locks *lockmem.Provider, batch, n int) time.Duration {
	var seen atomic.Int64
	done := make(chan struct{})
	noop := func(lane string) outbox.Processor {
		return outbox.ProcessorFunc{LaneName: lane, Func: func(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			out := make([]outbox.Outcome, len(run))
			for i := range out {
				out[i] = outbox.Delivered()
			}
			if seen.Add(int64(len(run))) == int64(n) {
				close(done)
			}
			return out, nil
		}}
	}
	d, err := outbox.NewDriver(outbox.Config{
		Store: st, Locks: locks, BatchSize: batch, RetentionDisabled: true,
		Processors: []outbox.Processor{noop("bench.0"), noop("bench.1"), noop("bench.2")},
		Notify:     func(context.Context, outbox.Notice) error { return nil },
	})
	if err != nil {
		b.Fatal(err)
	}
	dctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	start := time.Now()
	go func() { defer close(stopped); d.Run(dctx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("the driver walked %d of %d entries in 5 minutes", seen.Load(), n)
	}
	took := time.Since(start)
	cancel()
	<-stopped
	return took
}

// bareWalk walks the table with the driver's keyset query and one cursor
// upsert per batch, nothing else.
func bareWalk(b *testing.B, ctx context.Context, pool *pgxpool.Pool, st *OutboxStore, batch, n int) time.Duration {
	const upsert = `INSERT INTO baton_outbox_state (key, value) VALUES ('bench_bare_cursor', $1)
ON CONFLICT (key) DO UPDATE SET value = excluded.value`
	start := time.Now()
	var cur outbox.Cursor
	walked := 0
	for walked < n {
		rows, err := pool.Query(ctx, st.Statements().Scan, cur.XID, [16]byte(cur.ID), batch)
		if err != nil {
			b.Fatal(err)
		}
		es, err := pgx.CollectRows(rows, scanOutboxEntry)
		if err != nil {
			b.Fatal(err)
		}
		if len(es) == 0 {
			b.Fatalf("the bare walk ran out after %d of %d", walked, n)
		}
		cur = es[len(es)-1].Cursor()
		xid, id := outbox.CursorState(cur)
		if _, err := pool.Exec(ctx, upsert, xid+"/"+id); err != nil {
			b.Fatal(err)
		}
		walked += len(es)
	}
	return time.Since(start)
}
