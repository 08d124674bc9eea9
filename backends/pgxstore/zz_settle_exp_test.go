package pgxstore

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

func BenchmarkZZSettleVariants(b *testing.B) {
	ctx := context.Background()
	env, st := benchOutbox(b, ctx)
	pool := env.Pool
	now := time.Now().UTC().Format(time.RFC3339Nano)
	c0 := outbox.Cursor{XID: 10, ID: outbox.NewID()}
	if err := st.Settle(ctx, outbox.Settlement{From: outbox.Cursor{}, To: c0, State: map[string]*string{outbox.KeyLastScanAt: &now}}); err != nil {
		b.Fatal(err)
	}
	cur := c0
	next := func() outbox.Cursor { return outbox.Cursor{XID: cur.XID + 1, ID: outbox.NewID()} }
	const guarded = `WITH u AS (
UPDATE baton_outbox_state AS s SET value = v.new
FROM (VALUES ($1::text, $2::text, $3::text), ($4::text, $5::text, $6::text)) AS v (key, old, new)
WHERE s.key = v.key AND s.value = v.old
RETURNING s.key), removed AS (DELETE FROM baton_outbox_state WHERE key = ANY ($7::text[])),
written AS (INSERT INTO baton_outbox_state AS s (key, value) SELECT $8::text, $9::text
    ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE s.value IS DISTINCT FROM excluded.value)
SELECT CASE WHEN count(*) = 2 THEN 1 ELSE ('outbox settle refused: ' || count(*))::int END FROM u`
	const ctelock = `WITH locked AS (
SELECT key, value FROM baton_outbox_state WHERE key IN ($1::text, $4::text) ORDER BY key <> $1::text FOR UPDATE
), ok AS (SELECT count(*) = 2 AS ok FROM locked WHERE (key = $1::text AND value = $2::text) OR (key = $4::text AND value = $5::text)),
u AS (
UPDATE baton_outbox_state AS s SET value = v.new
FROM (VALUES ($1::text, $3::text), ($4::text, $6::text)) AS v (key, new)
WHERE s.key = v.key AND (SELECT ok FROM ok)), removed AS (DELETE FROM baton_outbox_state WHERE key = ANY ($7::text[]) AND (SELECT ok FROM ok)),
written AS (INSERT INTO baton_outbox_state AS s (key, value) SELECT $8::text, $9::text WHERE (SELECT ok FROM ok)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value WHERE s.value IS DISTINCT FROM excluded.value)
SELECT 1 FROM ok WHERE ok`
	rm := []string{outbox.KeyFirstStuckAt, outbox.KeyFailedAttempts}
	one := func(q string) func() {
		return func() {
			to := next()
			fx, fi := outbox.CursorState(cur)
			tx, ti := outbox.CursorState(to)
			now := time.Now().UTC().Format(time.RFC3339Nano)
			var one int
			if err := pool.QueryRow(ctx, q, outbox.KeyLastScannedXID, fx, tx, outbox.KeyLastScannedID, fi, ti, rm, outbox.KeyLastScanAt, now).Scan(&one); err != nil {
				b.Fatal(err)
			}
			cur = to
		}
	}
	vars := []func(){
		func() {
			to := next()
			now := time.Now().UTC().Format(time.RFC3339Nano)
			if err := st.Settle(ctx, outbox.Settlement{From: cur, To: to, State: map[string]*string{outbox.KeyLastScanAt: &now, outbox.KeyFirstStuckAt: nil, outbox.KeyFailedAttempts: nil}}); err != nil {
				b.Fatal(err)
			}
			cur = to
		},
		one(guarded),
		one(ctelock),
		func() {
			to := next()
			x, i := outbox.CursorState(to)
			if _, err := pool.Exec(ctx, `INSERT INTO baton_outbox_state (key, value) VALUES ('bench_bare_cursor', $1)
ON CONFLICT (key) DO UPDATE SET value = excluded.value`, x+"/"+i); err != nil {
				b.Fatal(err)
			}
		},
	}
	names := []string{"current", "guarded", "ctelock", "bare"}
	tot := make([]time.Duration, len(vars))
	for b.Loop() {
		for k, f := range vars {
			s := time.Now()
			f()
			tot[k] += time.Since(s)
		}
	}
	for k := range vars {
		b.ReportMetric(float64(tot[k].Microseconds())/float64(b.N), names[k]+"-us")
	}
}
