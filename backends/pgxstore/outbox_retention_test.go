package pgxstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
	locksmemory "github.com/baton-go/baton/locks/memory"
)

// firstDelete signals the first DeleteDelivered call.
type firstDelete struct {
	*OutboxStore
	once   sync.Once
	called chan struct{}
}

func (s *firstDelete) DeleteDelivered(ctx context.Context, upTo outbox.Cursor, window time.Duration, limit int) (int, error) {
	s.once.Do(func() { close(s.called) })
	return s.OutboxStore.DeleteDelivered(ctx, upTo, window, limit)
}

// loadDelivered inserts n entries created 8 days ago, in one transaction,
// and settles the cursor past them.
func loadDelivered(t testing.TB, ctx context.Context, env *testenv.PostgresEnv, st *OutboxStore, n int) {
	t.Helper()
	if _, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox (id, lane, payload, created_at)
SELECT gen_random_uuid(), 'bench', $1::jsonb, now() - interval '8 days' FROM generate_series(1, $2::int)`, benchPayload, n); err != nil {
		t.Fatal(err)
	}
	var xid uint64
	if err := env.Pool.QueryRow(ctx, `SELECT max(xid::text::bigint) FROM baton_outbox`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	top := outbox.Cursor{XID: xid}
	for i := range top.ID {
		top.ID[i] = 0xff
	}
	if err := st.Settle(ctx, outbox.Settlement{To: top}); err != nil {
		t.Fatal(err)
	}
}

// sweepOnce runs a driver that only sweeps (no processors, one sweep per
// hour) until its first sweep has ended: retention releases its lock at
// the end of a sweep, so taking it after the sweep began waits for that.
func sweepOnce(t testing.TB, ctx context.Context, st *OutboxStore, batch int) {
	t.Helper()
	locks, err := locksmemory.NewProvider(locksmemory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := &firstDelete{OutboxStore: st, called: make(chan struct{})}
	d, err := outbox.NewDriver(outbox.Config{
		Store: store, Locks: locks, Notify: func(context.Context, outbox.Notice) error { return nil },
		IdleDelay: time.Hour, RetentionBatchSize: batch, RetentionInterval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(runCtx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case <-store.called:
	case <-time.After(time.Minute):
		t.Fatal("retention did not start within a minute")
	}
	l, err := locks.Acquire(ctx, outbox.DefaultLeaderLockName+outbox.RetentionLockSuffix, lock.AcquireOptions{Wait: 10 * time.Minute})
	if err != nil {
		t.Fatalf("waiting for the sweep to end: %v", err)
	}
	_ = l.Release(ctx)
}

func TestRetention_OneSweepDeletesTheWholeBacklogInBatches(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
	loadDelivered(t, ctx, env, st, 5000)
	sweepOnce(t, ctx, st, 500)
	if n := countRows(t, ctx, env.Pool, OutboxTable); n != 0 {
		t.Fatalf("%d of 5000 delivered entries past the window are left after one sweep with batches of 500; want none", n)
	}
}

// BenchmarkOutboxRetentionSweep measures how fast one retention sweep with
// the default batch size and pause deletes a backlog of delivered entries
// past the window, through the real driver, and what the defaults sustain:
// the sweep's rate times the share of each RetentionInterval its budget
// may take. An op is one sweep of the whole backlog.
//
//	go test ./backends/pgxstore/ -run '^$' -bench BenchmarkOutboxRetentionSweep -benchtime 3x
func BenchmarkOutboxRetentionSweep(b *testing.B) {
	const backlog = 100_000
	ctx := context.Background()
	env, st := benchOutbox(b, ctx)
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		loadDelivered(b, ctx, env, st, backlog)
		if _, err := env.Pool.Exec(ctx, "VACUUM (ANALYZE) baton_outbox"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		sweepOnce(b, ctx, st, outbox.DefaultRetentionBatchSize)
		elapsed += time.Since(start)
		b.StopTimer()
		var left int
		if err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM baton_outbox").Scan(&left); err != nil || left != 0 {
			b.Fatalf("%d entries left after the sweep (%v)", left, err)
		}
		// The next load starts from the cursor the last one left.
		resetCursor(b, ctx, env.Pool)
		b.StartTimer()
	}
	rate := float64(b.N*backlog) / elapsed.Seconds()
	b.ReportMetric(rate, "entries/s-sweeping")
	b.ReportMetric(rate*outbox.DefaultRetentionSweepBudget.Seconds()/outbox.DefaultRetentionInterval.Seconds(), "entries/s-sustained")
	b.ReportMetric(0, "ns/op")
}
