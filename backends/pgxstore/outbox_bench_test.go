package pgxstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// benchPayload is a payload of a realistic size (about 200 bytes).
var benchPayload = []byte(`{"resourceType": "profile", "resourceId": "0190f3c2-7a6b-7c3d-9e8f-123456789abc", "relations": [{"relation": "parent", "subjectType": "user", "subjectId": "0190f3c2-7a6b-7c3d-9e8f-cba987654321"}]}`)

// benchOutbox migrates a fresh schema and returns its store.
func benchOutbox(b *testing.B, ctx context.Context) (*testenv.PostgresEnv, *OutboxStore) {
	b.Helper()
	env := testenv.Postgres(b)
	if err := Migrate(ctx, env.Pool, MigrateOptions{}); err != nil {
		b.Fatal(err)
	}
	st, err := NewOutboxStore(env.Pool, OutboxStoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	return env, st
}

// horizonOf returns the current horizon: every xid below it has ended.
func horizonOf(tb testing.TB, ctx context.Context, pool *pgxpool.Pool) uint64 {
	tb.Helper()
	var h uint64
	if err := pool.QueryRow(ctx, "SELECT pg_snapshot_xmin(pg_current_snapshot())").Scan(&h); err != nil {
		tb.Fatal(err)
	}
	if h < 8 {
		tb.Fatalf("the horizon is %d; a few xids below it are needed", h)
	}
	return h
}

// loadOutbox inserts n entries with xids spread over [from, to), in
// batches, then vacuums and analyzes the table, so passes read a settled
// table (hint bits set, statistics current).
func loadOutbox(tb testing.TB, ctx context.Context, pool *pgxpool.Pool, from, to uint64, n int) {
	tb.Helper()
	const chunk = 100_000
	for start := 0; start < n; start += chunk {
		count := min(chunk, n-start)
		_, err := pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload, created_at)
SELECT ($1::bigint + (($4::bigint + g - 1) * ($2::bigint - $1::bigint)) / $5::bigint)::text::xid8,
       gen_random_uuid(), 'bench.' || (g % 3), $3::jsonb, now() - interval '1 hour'
FROM generate_series(1, $6::bigint) AS g`, int64(from), int64(to), benchPayload, int64(start), int64(n), int64(count))
		if err != nil {
			tb.Fatalf("load the outbox: %v", err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) baton_outbox"); err != nil {
		tb.Fatal(err)
	}
}

// resetCursor removes the stored cursor, so the walk starts over.
func resetCursor(b *testing.B, ctx context.Context, pool *pgxpool.Pool) {
	b.Helper()
	if _, err := pool.Exec(ctx, "DELETE FROM baton_outbox_state WHERE key = ANY ($1)",
		[]string{outbox.KeyLastScannedXID, outbox.KeyLastScannedID}); err != nil {
		b.Fatal(err)
	}
}

// storePass is one pass of the walk without delivery: a full batch scanned
// and the cursor settled past it, with the stamps the driver writes. It
// returns the new cursor and how many entries it walked.
func storePass(b *testing.B, ctx context.Context, st *OutboxStore, cur outbox.Cursor, batch int) (outbox.Cursor, int) {
	entries, err := st.Scan(ctx, cur, batch)
	if err != nil {
		b.Fatal(err)
	}
	if len(entries) == 0 {
		return cur, 0
	}
	to := entries[len(entries)-1].Cursor()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	err = st.Settle(ctx, outbox.Settlement{From: cur, To: to, State: map[string]*string{
		outbox.KeyLastScanAt: &now, outbox.KeyFirstStuckAt: nil, outbox.KeyFailedAttempts: nil,
	}})
	if err != nil {
		b.Fatal(err)
	}
	return to, len(entries)
}

// BenchmarkOutboxStorePass measures the store's side of the relay: passes
// that scan a full batch and settle the cursor past it (no parking, the
// driver's stamps), in entries per second. Beside it, alternating pass by
// pass on the same table, runs the physical limit: the same keyset query,
// its rows decoded the same way, and one upsert of a cursor value per
// batch, outside any transaction. bare-entries/s is that limit and ratio
// is entries/s over it. An op is one pass of each.
func BenchmarkOutboxStorePass(b *testing.B) {
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			ctx := context.Background()
			env, st := benchOutbox(b, ctx)
			loadOutbox(b, ctx, env.Pool, 1, horizonOf(b, ctx, env.Pool), 200_000)
			const bareUpsert = `INSERT INTO baton_outbox_state (key, value) VALUES ('bench_bare_cursor', $1)
ON CONFLICT (key) DO UPDATE SET value = excluded.value`
			barePass := func(cur outbox.Cursor) (outbox.Cursor, int) {
				rows, err := env.Pool.Query(ctx, st.Statements().Scan, cur.XID, [16]byte(cur.ID), batch)
				if err != nil {
					b.Fatal(err)
				}
				entries, err := pgx.CollectRows(rows, scanOutboxEntry)
				if err != nil {
					b.Fatal(err)
				}
				if len(entries) == 0 {
					return cur, 0
				}
				to := entries[len(entries)-1].Cursor()
				xid, id := outbox.CursorState(to)
				if _, err := env.Pool.Exec(ctx, bareUpsert, xid+"/"+id); err != nil {
					b.Fatal(err)
				}
				return to, len(entries)
			}

			var (
				storeCur, bareCur     outbox.Cursor
				storeN, bareN         int
				storeTime, bareTime   time.Duration
				storePasses, bareRuns int
			)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				next, n := storePass(b, ctx, st, storeCur, batch)
				storeTime += time.Since(start)
				storeN += n
				storePasses++
				storeCur = next
				if n < batch { // the end of the table: start over
					b.StopTimer()
					resetCursor(b, ctx, env.Pool)
					storeCur = outbox.Cursor{}
					b.StartTimer()
				}

				start = time.Now()
				next, n = barePass(bareCur)
				bareTime += time.Since(start)
				bareN += n
				bareRuns++
				bareCur = next
				if n < batch {
					bareCur = outbox.Cursor{}
				}
			}
			storeRate := float64(storeN) / storeTime.Seconds()
			bareRate := float64(bareN) / bareTime.Seconds()
			b.ReportMetric(storeRate, "entries/s")
			b.ReportMetric(bareRate, "bare-entries/s")
			b.ReportMetric(storeRate/bareRate, "ratio")
			b.ReportMetric(float64(storeTime.Microseconds())/float64(storePasses), "µs/pass")
			b.ReportMetric(float64(bareTime.Microseconds())/float64(bareRuns), "bare-µs/pass")
		})
	}
}

// BenchmarkOutboxPassLatency compares a pass (scan 100, settle) over an
// outbox with nothing behind the cursor with the same pass over one with
// 1 000 000 delivered entries behind it, alternating pass by pass. Both
// tables hold the same 20 000 entries ahead of the cursor, walked round
// and round. The scan starts at the cursor in the (xid, id) index, so the
// delivered entries should cost nothing: ratio (full over empty) near 1.
func BenchmarkOutboxPassLatency(b *testing.B) {
	if testing.Short() {
		b.Skip("loading 1 000 000 entries takes a while; not under -short")
	}
	const (
		batch  = 100
		behind = 1_000_000
		ahead  = 20_000
	)
	ctx := context.Background()
	type outboxUnderTest struct {
		env     *testenv.PostgresEnv
		st      *OutboxStore
		start   outbox.Cursor // just behind the first entry ahead
		cur     outbox.Cursor
		elapsed time.Duration
		passes  int
	}
	setup := func(withBehind bool) *outboxUnderTest {
		env, st := benchOutbox(b, ctx)
		h := horizonOf(b, ctx, env.Pool)
		c := h / 2
		if withBehind {
			loadOutbox(b, ctx, env.Pool, 1, c, behind)
		}
		loadOutbox(b, ctx, env.Pool, c, h, ahead)
		start := outbox.Cursor{XID: c - 1, ID: outbox.ID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		// Settle once to the start, so every pass compares with a stored
		// cursor as in steady state.
		if err := st.Settle(ctx, outbox.Settlement{To: start}); err != nil {
			b.Fatal(err)
		}
		return &outboxUnderTest{env: env, st: st, start: start, cur: start}
	}
	empty, full := setup(false), setup(true)
	var rows int64
	if err := full.env.Pool.QueryRow(ctx, "SELECT count(*) FROM baton_outbox").Scan(&rows); err != nil {
		b.Fatal(err)
	}
	b.Logf("entries: %d with nothing behind the cursor, %d with %d behind", ahead, rows, behind)

	pass := func(o *outboxUnderTest) {
		start := time.Now()
		next, n := storePass(b, ctx, o.st, o.cur, batch)
		o.elapsed += time.Since(start)
		o.passes++
		o.cur = next
		if n < batch { // walked round: back to the start, by the store's own rules
			b.StopTimer()
			resetCursor(b, ctx, o.env.Pool)
			if err := o.st.Settle(ctx, outbox.Settlement{To: o.start}); err != nil {
				b.Fatal(err)
			}
			o.cur = o.start
			b.StartTimer()
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		pass(empty)
		pass(full)
	}
	emptyUS := float64(empty.elapsed.Microseconds()) / float64(empty.passes)
	fullUS := float64(full.elapsed.Microseconds()) / float64(full.passes)
	b.ReportMetric(emptyUS, "empty-µs/pass")
	b.ReportMetric(fullUS, "1M-behind-µs/pass")
	b.ReportMetric(fullUS/emptyUS, "ratio")
}

// BenchmarkOutboxEnqueue measures what Enqueue adds to a one-row business
// transaction (BEGIN; INSERT the business row; Enqueue; COMMIT) against
// the same transaction inserting the same values into a plain table of
// the outbox's shape without its xid column and walk index, alternating
// transaction by transaction. An op is one transaction of each; ratio is
// outbox over plain.
func BenchmarkOutboxEnqueue(b *testing.B) {
	ctx := context.Background()
	env, _ := benchOutbox(b, ctx)
	_, err := env.Pool.Exec(ctx, `
CREATE TABLE bench_profiles (id uuid PRIMARY KEY, name text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE bench_plain (id uuid PRIMARY KEY, lane text NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`)
	if err != nil {
		b.Fatal(err)
	}
	const insertProfile = `INSERT INTO bench_profiles (id, name) VALUES ($1, $2)`
	const insertPlain = `INSERT INTO bench_plain (id, lane, payload) VALUES ($1, $2, $3)`
	txn := func(write func(tx pgx.Tx) error) time.Duration {
		start := time.Now()
		tx, err := env.Pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tx.Exec(ctx, insertProfile, [16]byte(outbox.NewID()), "profile name"); err != nil {
			b.Fatal(err)
		}
		if err := write(tx); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	withOutbox := func(tx pgx.Tx) error { return Enqueue(ctx, tx, outbox.NewID(), "graph.init", benchPayload) }
	withPlain := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertPlain, [16]byte(outbox.NewID()), "graph.init", benchPayload)
		return err
	}
	// Warm both paths (prepared statements, catalog caches).
	for range 20 {
		txn(withOutbox)
		txn(withPlain)
	}
	var outboxTime, plainTime time.Duration
	n := 0
	b.ReportAllocs()
	for b.Loop() {
		// Alternate which goes first, so neither always follows the other.
		if n%2 == 0 {
			outboxTime += txn(withOutbox)
			plainTime += txn(withPlain)
		} else {
			plainTime += txn(withPlain)
			outboxTime += txn(withOutbox)
		}
		n++
	}
	outboxUS := float64(outboxTime.Microseconds()) / float64(n)
	plainUS := float64(plainTime.Microseconds()) / float64(n)
	b.ReportMetric(outboxUS, "outbox-µs/tx")
	b.ReportMetric(plainUS, "plain-µs/tx")
	b.ReportMetric(outboxUS/plainUS, "ratio")
}

// BenchmarkOutboxEnqueueProducers measures Enqueue under concurrency: 1, 8
// and 32 producers, each running one-entry transactions (BEGIN; Enqueue;
// COMMIT) on a connection of its own, while the dead letters hold a few
// thousand ids, as they do in a deployment that has parked entries. An op
// is one transaction; µs/tx is the latency one producer sees and tx/s the
// throughput of all of them together.
func BenchmarkOutboxEnqueueProducers(b *testing.B) {
	ctx := context.Background()
	env, _ := benchOutbox(b, ctx)
	if _, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox_dead (id, xid, lane, payload, error)
SELECT gen_random_uuid(), '1'::xid8, 'bench', '{}'::jsonb, 'parked' FROM generate_series(1, 5000)`); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(env.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	txn := func() {
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Error(err)
			return
		}
		if err := Enqueue(ctx, tx, outbox.NewID(), "graph.init", benchPayload); err != nil {
			_ = tx.Rollback(ctx)
			b.Error(err)
			return
		}
		if err := tx.Commit(ctx); err != nil {
			b.Error(err)
		}
	}
	for _, producers := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			for range 2 * producers { // warm connections and prepared statements
				txn()
			}
			var next atomic.Int64
			start := time.Now()
			var wg sync.WaitGroup
			b.ResetTimer()
			for range producers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						txn()
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.ReportMetric(float64(elapsed.Microseconds())*float64(producers)/float64(b.N), "µs/tx")
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "tx/s")
			b.ReportMetric(0, "ns/op") // the two figures above say it per producer and in total
		})
	}
}
