package bunstore

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/testenv"
)

// The benchmarks in this file run one operation on the pgx adapter and the
// same operation on the bun adapter, alternately, each on a schema of its
// own on the same server, and report both times and their ratio:
//
//	go test -run '^$' -bench BunVsPgx -benchtime 2000x ./backends/bunstore/
//
// bun/pgx above 1 means bun is slower. docs/bun.md records and explains
// the ratios.

// pair times pgxOp and bunOp alternately, b.N times each.
func pair(b *testing.B, pgxOp, bunOp func()) {
	b.Helper()
	var tp, tb time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		pgxOp()
		tp += time.Since(start)
		start = time.Now()
		bunOp()
		tb += time.Since(start)
	}
	b.ReportMetric(float64(tp.Nanoseconds())/float64(b.N), "pgx-ns/op")
	b.ReportMetric(float64(tb.Nanoseconds())/float64(b.N), "bun-ns/op")
	b.ReportMetric(tb.Seconds()/tp.Seconds(), "bun/pgx")
	b.ReportMetric(0, "ns/op") // both halves are reported above
}

// benchEnvs gives each adapter a migrated schema of its own: pgx's made by
// pgxstore.Migrate, bun's by bunstore.Migrate.
func benchEnvs(b *testing.B) (*testenv.PostgresEnv, *testenv.PostgresEnv, *bun.DB) {
	b.Helper()
	ctx := context.Background()
	pgxEnv := testenv.Postgres(b)
	if err := pgxstore.Migrate(ctx, pgxEnv.Pool, pgxstore.MigrateOptions{}); err != nil {
		b.Fatal(err)
	}
	bunEnv, db := bunEnv(b)
	return pgxEnv, bunEnv, db
}

var benchPayload = []byte(`{"resourceType": "profile", "resourceId": "0190f3c2-7a6b-7c3d-9e8f-123456789abc", "relations": [{"relation": "parent", "subjectType": "user", "subjectId": "0190f3c2-7a6b-7c3d-9e8f-cba987654321"}]}`)

// BenchmarkBunVsPgx_Enqueue: a producer transaction with one entry: begin,
// enqueue, commit.
func BenchmarkBunVsPgx_Enqueue(b *testing.B) {
	pgxEnv, _, db := benchEnvs(b)
	ctx := context.Background()
	pair(b, func() {
		tx, err := pgxEnv.Pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := pgxstore.Enqueue(ctx, tx, outbox.NewID(), "bench", benchPayload); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}, func() {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := Enqueue(ctx, tx, outbox.NewID(), "bench", benchPayload); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	})
}

// loadEntries fills a schema's outbox with n entries of one old xid, so
// every one of them is below the horizon.
func loadEntries(b *testing.B, pool *pgxpool.Pool, n int) {
	b.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload, created_at)
SELECT '3'::xid8, gen_random_uuid(), 'bench.' || (g % 3), $1::jsonb, now() FROM generate_series(1, $2::int) AS g`, benchPayload, n); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) baton_outbox"); err != nil {
		b.Fatal(err)
	}
}

// relayPass is one pass of the walk without delivery: a batch of 100
// scanned and the cursor settled past it with the stamps a driver writes;
// at the end of the table the walk starts over.
func relayPass(b *testing.B, st outbox.Store, cur *outbox.Cursor) {
	ctx := context.Background()
	es, err := st.Scan(ctx, *cur, 100)
	if err != nil {
		b.Fatal(err)
	}
	if len(es) == 0 {
		if err := st.Settle(ctx, outbox.Settlement{From: *cur, To: *cur}); err != nil {
			b.Fatal(err)
		}
		*cur = outbox.Cursor{}
		return
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	to := es[len(es)-1].Cursor()
	if err := st.Settle(ctx, outbox.Settlement{From: *cur, To: to, State: map[string]*string{
		outbox.KeyLastScanAt: &now, outbox.KeyFailedAttempts: nil, outbox.KeyLastError: nil, outbox.KeyFirstStuckAt: nil,
	}}); err != nil {
		b.Fatal(err)
	}
	*cur = to
}

// BenchmarkBunVsPgx_RelayPass: scan 100 entries and settle the cursor past
// them.
func BenchmarkBunVsPgx_RelayPass(b *testing.B) {
	pgxEnv, bunEnv, db := benchEnvs(b)
	loadEntries(b, pgxEnv.Pool, 20_000)
	loadEntries(b, bunEnv.Pool, 20_000)
	pgxStore, err := pgxstore.NewOutboxStore(pgxEnv.Pool, pgxstore.OutboxStoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	bunStore := mustOutboxStore(b, db, OutboxStoreOptions{})
	var pgxCur, bunCur outbox.Cursor
	// A settlement back to the start is a cursor move backwards: reset the
	// stored cursor whenever a walk starts over.
	reset := func(pool *pgxpool.Pool, cur *outbox.Cursor) {
		if cur.IsZero() {
			if _, err := pool.Exec(context.Background(), "DELETE FROM baton_outbox_state"); err != nil {
				b.Fatal(err)
			}
		}
	}
	pair(b, func() { reset(pgxEnv.Pool, &pgxCur); relayPass(b, pgxStore, &pgxCur) },
		func() { reset(bunEnv.Pool, &bunCur); relayPass(b, bunStore, &bunCur) })
}

// workTable creates the conformance work table in the schema, with rows
// 1..n, through pgx.
func workTable(b *testing.B, env *testenv.PostgresEnv, n int) {
	b.Helper()
	ctx := context.Background()
	ix, err := (pgxstore.ClaimIndex{Table: "work_rows", Order: conformance.WorkRowsOrder, Live: conformance.WorkRowsLive}).DDL()
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{`CREATE TABLE work_rows (id bigint PRIMARY KEY, seq bigint NOT NULL, attempts integer NOT NULL DEFAULT 0,
completed_at timestamptz, last_error text, lock_id uuid, locked_until timestamptz) WITH (fillfactor = 90)`, ix,
		fmt.Sprintf("INSERT INTO work_rows (id, seq) SELECT g, g FROM generate_series(1, %d) AS g", n), "ANALYZE work_rows"} {
		if _, err := env.Pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
}

// claimFinalize claims a batch of 20 and completes it; when the table runs
// dry every row is made live again.
func claimFinalize(b *testing.B, st workrow.Store[int64, conformance.WorkRow], pool *pgxpool.Pool) {
	ctx := context.Background()
	now := time.Now()
	spec := workrow.ClaimSpec{LockID: workrow.NewLockID(), Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 20,
		Eligible: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder, OnClaim: []workrow.Set{workrow.Add("attempts", 1)}}
	got, err := st.Claim(ctx, spec)
	if err != nil {
		b.Fatal(err)
	}
	if len(got) == 0 {
		if _, err := pool.Exec(ctx, "UPDATE work_rows SET completed_at = NULL, lock_id = NULL, locked_until = NULL"); err != nil {
			b.Fatal(err)
		}
		return
	}
	finals := make([]workrow.Final[int64], len(got))
	for i, c := range got {
		finals[i] = workrow.Final[int64]{ID: c.ID, Set: []workrow.Set{workrow.Assign("completed_at", now)}}
	}
	if _, err := st.FinalizeMany(ctx, spec.LockID, finals); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkBunVsPgx_ClaimFinalize: claim 20 rows (core condition trees)
// and finalize them as completed, in two statements.
func BenchmarkBunVsPgx_ClaimFinalize(b *testing.B) {
	pgxEnv := testenv.Postgres(b)
	bunEnv := testenv.Postgres(b)
	workTable(b, pgxEnv, 20_000)
	workTable(b, bunEnv, 20_000)
	pgxStore, err := pgxstore.NewWorkRows[int64](pgxEnv.Pool, pgxstore.WorkRowsOptions[conformance.WorkRow]{
		Table: "work_rows", Live: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder})
	if err != nil {
		b.Fatal(err)
	}
	bunStore := suiteStore(b, openBun(b, bunEnv))
	pair(b, func() { claimFinalize(b, pgxStore, pgxEnv.Pool) }, func() { claimFinalize(b, bunStore, bunEnv.Pool) })
}

// BenchmarkBunVsPgx_Heartbeat: one heartbeat renewing every role of an
// instance, for 1 role and for 64 partitions.
func BenchmarkBunVsPgx_Heartbeat(b *testing.B) {
	for _, roles := range []int{1, 64} {
		b.Run(fmt.Sprintf("roles=%d", roles), func(b *testing.B) {
			pgxEnv, _, db := benchEnvs(b)
			ctx := context.Background()
			pgxStore, err := pgxstore.NewLeaseStore(pgxEnv.Pool, pgxstore.LeaseStoreOptions{})
			if err != nil {
				b.Fatal(err)
			}
			bunStore := mustLeaseStore(b, db, LeaseStoreOptions{})
			taken := func(st lease.Store) lease.HeartbeatRequest {
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
				return req
			}
			pgxReq, bunReq := taken(pgxStore), taken(bunStore)
			beat := func(st lease.Store, req lease.HeartbeatRequest) {
				recs, err := st.Heartbeat(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if len(recs) != roles || !recs[0].Held {
					b.Fatalf("renewal failed: %+v", recs[0])
				}
			}
			pair(b, func() { beat(pgxStore, pgxReq) }, func() { beat(bunStore, bunReq) })
		})
	}
}

// BenchmarkPgxUnpreparedVsPrepared_Heartbeat measures what writing the
// arguments into the statement text costs the heartbeat: the pgx store
// itself, once with its prepared-statement cache (the default) and once in
// simple-protocol mode, where the server parses and plans the statement on
// every call. Its ratio (reported as bun/pgx: unprepared over prepared) is
// what the bun adapter's heartbeat ratio was while bun formatted baton's
// statements itself (docs/bun.md).
func BenchmarkPgxUnpreparedVsPrepared_Heartbeat(b *testing.B) {
	pgxEnv, _, _ := benchEnvs(b)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgxEnv.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	simple, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer simple.Close()
	prepared, err := pgxstore.NewLeaseStore(pgxEnv.Pool, pgxstore.LeaseStoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	unprepared, err := pgxstore.NewLeaseStore(simple, pgxstore.LeaseStoreOptions{})
	if err != nil {
		b.Fatal(err)
	}
	taken := func(st lease.Store, holder string) lease.HeartbeatRequest {
		req := lease.HeartbeatRequest{Holder: holder, LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "role-of-" + holder}}}
		recs, err := st.Heartbeat(ctx, req)
		if err != nil || !recs[0].Held {
			b.Fatalf("take: %v %+v", err, recs)
		}
		req.Claims[0].Token = recs[0].Token
		return req
	}
	preparedReq, unpreparedReq := taken(prepared, "prepared"), taken(unprepared, "unprepared")
	beat := func(st lease.Store, req lease.HeartbeatRequest) {
		if recs, err := st.Heartbeat(ctx, req); err != nil || !recs[0].Held {
			b.Fatalf("renew: %v %+v", err, recs)
		}
	}
	pair(b, func() { beat(prepared, preparedReq) }, func() { beat(unprepared, unpreparedReq) })
}
