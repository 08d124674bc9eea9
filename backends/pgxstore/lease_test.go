package pgxstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/internal/testenv"
)

// newPool opens another pool on the test's schema, closed when the test
// ends: a second node's view of the same database.
func newPool(t *testing.T, env *testenv.PostgresEnv, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func mustLeaseStore(t *testing.T, pool *pgxpool.Pool, opts LeaseStoreOptions) *LeaseStore {
	t.Helper()
	st, err := NewLeaseStore(pool, opts)
	if err != nil {
		t.Fatalf("NewLeaseStore: %v", err)
	}
	return st
}

func TestLeaseStore_Conformance(t *testing.T) {
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		env := testenv.Postgres(t)
		mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
		return conformance.LeaseHarness{
			Store:  mustLeaseStore(t, env.Pool, LeaseStoreOptions{}),
			Second: mustLeaseStore(t, newPool(t, env, nil), LeaseStoreOptions{}),
			Unmigrated: func(t *testing.T) conformance.LeaseHarness {
				return conformance.LeaseHarness{Store: mustLeaseStore(t, testenv.Postgres(t).Pool, LeaseStoreOptions{})}
			},
			SchemaMismatch: ErrSchemaMismatch,
		}
	}, conformance.LeaseFeatures{})
}

// watch runs WatchReleases until the test ends and returns the roles it
// hears.
func watch(t *testing.T, st *LeaseStore) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	heard := make(chan string, 100)
	done := make(chan error, 1)
	go func() { done <- st.WatchReleases(ctx, func(role string) { heard <- role }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchReleases = %v, want context.Canceled", err)
		}
	})
	return heard
}

// waitListening waits until some session listens on channel, so that a
// release made afterwards must be heard.
func waitListening(t *testing.T, ctx context.Context, pool *pgxpool.Pool, channel string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		// pg_stat_activity shows each session's last statement.
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1 AND datname = current_database()`,
			"LISTEN "+pgx.Identifier{channel}.Sanitize()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nobody listens on %q after 10s", channel)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLeaseStore_ReleaseByAnotherInstanceIsHeardThroughWatchReleases(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	// A channel of this test's own: other tests share the server.
	channel := "releases " + env.Schema
	watcher := mustLeaseStore(t, env.Pool, LeaseStoreOptions{Channel: channel})
	other := mustLeaseStore(t, newPool(t, env, nil), LeaseStoreOptions{Channel: channel})

	heard := watch(t, watcher)
	waitListening(t, ctx, env.Pool, channel)

	recs, err := other.Heartbeat(ctx, lease.HeartbeatRequest{
		Holder: "b", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "maintenance"}, {Role: "devices:partition-7"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]uint64{}
	for _, r := range recs {
		tokens[r.Role] = r.Token
	}
	for _, role := range []string{"devices:partition-7", "maintenance"} {
		released := time.Now()
		if ok, err := other.Release(ctx, role, "b", tokens[role]); err != nil || !ok {
			t.Fatalf("Release(%s) = %v, %v", role, ok, err)
		}
		select {
		case got := <-heard:
			if got != role {
				t.Fatalf("heard %q, want %q", got, role)
			}
			t.Logf("%s heard after %v", role, time.Since(released).Round(time.Microsecond))
		case <-time.After(time.Second):
			t.Fatalf("the release of %q was not heard within 1s", role)
		}
	}
	// A release that releases nothing notifies nothing.
	if ok, err := other.Release(ctx, "maintenance", "b", tokens["maintenance"]); err != nil || ok {
		t.Fatalf("second Release = %v, %v; want false", ok, err)
	}
	select {
	case got := <-heard:
		t.Fatalf("heard %q after a release that released nothing", got)
	case <-time.After(300 * time.Millisecond):
	}
}

func TestLeaseStore_WatchReleasesClosesItsConnectionWhenDone(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	channel := "closing " + env.Schema
	pool := newPool(t, env, func(c *pgxpool.Config) { c.MaxConns = 2 })
	st := mustLeaseStore(t, pool, LeaseStoreOptions{Channel: channel})

	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- st.WatchReleases(wctx, func(string) {}) }()
	waitListening(t, ctx, env.Pool, channel)
	cancel() // interrupts WaitForNotification mid-read
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WatchReleases = %v, want context.Canceled", err)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after WatchReleases returned", n)
	}
	// No connection left in the pool listens: the interrupted one was
	// closed, not returned.
	for range 2 {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_listening_channels()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatal("a pooled connection still listens after WatchReleases returned")
		}
	}
	// And the server's session is gone.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query = $1`,
			"LISTEN "+pgx.Identifier{channel}.Sanitize()).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the listening session is still open 5s after WatchReleases returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLeaseStore_WatchReleasesReturnsConnectionErrors(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	channel := "failing " + env.Schema
	st := mustLeaseStore(t, newPool(t, env, nil), LeaseStoreOptions{Channel: channel})
	done := make(chan error, 1)
	go func() { done <- st.WatchReleases(ctx, func(string) {}) }()
	waitListening(t, ctx, env.Pool, channel)
	if _, err := env.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1`,
		"LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || errors.Is(err, context.Canceled) {
			t.Fatalf("WatchReleases = %v after its session was terminated, want the connection error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchReleases did not return within 10s of its session being terminated")
	}
}

// queryCounter counts what a pool sends: every statement sent on its own
// and every batch is one round trip.
type queryCounter struct{ n atomic.Int64 }

func (c *queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *queryCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *queryCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *queryCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func TestLeaseStore_HeartbeatIsOneStatementForAllClaims(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	counter := &queryCounter{}
	st := mustLeaseStore(t, newPool(t, env, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }), LeaseStoreOptions{})

	claims := make([]lease.Claim, 64)
	for i := range claims {
		claims[i] = lease.Claim{Role: fmt.Sprintf("devices:partition-%d", i)}
	}
	before := counter.n.Load()
	recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: claims})
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.n.Load() - before; n != 1 {
		t.Fatalf("a heartbeat of %d claims sent %d statements, want 1", len(claims), n)
	}
	if len(recs) != len(claims) {
		t.Fatalf("%d records for %d claims", len(recs), len(claims))
	}
	// Renewing them all is one statement too.
	for i, r := range recs {
		if !r.Held {
			t.Fatalf("claim %d was not taken: %+v", i, r)
		}
		claims[i] = lease.Claim{Role: r.Role, Token: r.Token}
	}
	before = counter.n.Load()
	recs, err = st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: claims})
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.n.Load() - before; n != 1 {
		t.Fatalf("a renewal of %d claims sent %d statements, want 1", len(claims), n)
	}
	for _, r := range recs {
		if !r.Held {
			t.Fatalf("not renewed: %+v", r)
		}
	}
}

// planNode is the part of EXPLAIN (FORMAT JSON) output the plan test reads.
type planNode struct {
	NodeType        string     `json:"Node Type"`
	Operation       string     `json:"Operation"`
	RelationName    string     `json:"Relation Name"`
	IndexName       string     `json:"Index Name"`
	ArbiterIndexes  []string   `json:"Conflict Arbiter Indexes"`
	Plans           []planNode `json:"Plans"`
	ConflictResolve string     `json:"Conflict Resolution"`
}

func (n planNode) walk(visit func(planNode)) {
	visit(n)
	for _, c := range n.Plans {
		c.walk(visit)
	}
}

// leasePlanProblems lists what is wrong with a heartbeat plan: a sequential
// scan of the lease table, a table lookup that does not use the primary
// key, or a renewal/takeover that does not resolve conflicts on it.
func leasePlanProblems(t *testing.T, raw []byte) []string {
	t.Helper()
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("cannot read the plan (%v): %s", err, raw)
	}
	var problems []string
	var upsertOnPK bool
	lookups := 0
	plans[0].Plan.walk(func(n planNode) {
		switch {
		case n.NodeType == "ModifyTable":
			if n.Operation == "Insert" && n.RelationName == LeaseTable {
				upsertOnPK = slices.Equal(n.ArbiterIndexes, []string{LeaseTable + "_pkey"}) && n.ConflictResolve == "UPDATE"
			} else {
				problems = append(problems, fmt.Sprintf("an unexpected %s on %s", n.Operation, n.RelationName))
			}
		case n.RelationName != LeaseTable:
		case n.IndexName == LeaseTable+"_pkey":
			lookups++
		default:
			problems = append(problems, fmt.Sprintf("a %s on %s", n.NodeType, LeaseTable))
		}
	})
	if !upsertOnPK {
		problems = append(problems, "the INSERT that renews and takes does not resolve conflicts on "+LeaseTable+"_pkey")
	}
	// The snapshot filter and the report of refused claims.
	if lookups < 2 {
		problems = append(problems, fmt.Sprintf("%d lookups by %s_pkey, want 2", lookups, LeaseTable))
	}
	return problems
}

func checkLeasePlan(t *testing.T, what string, raw []byte) {
	t.Helper()
	reportPlan(t, what, raw, leasePlanProblems(t, raw))
}

// reportPlan fails the test with the plan's problems, if any, and the plan.
func reportPlan(t *testing.T, what string, raw []byte, problems []string) {
	t.Helper()
	if len(problems) > 0 {
		var pretty bytes.Buffer
		_ = json.Indent(&pretty, raw, "", "  ")
		t.Errorf("%s: %s\nplan:\n%s", what, strings.Join(problems, "; "), pretty.String())
	}
}

// TestLeaseStore_HeartbeatPlanUsesThePrimaryKey guards the hot path: on a
// table of many roles, both the plan for the given values and the generic
// plan a prepared statement may switch to look every claim up by the
// primary key, with no sequential scan.
func TestLeaseStore_HeartbeatPlanUsesThePrimaryKey(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustLeaseStore(t, env.Pool, LeaseStoreOptions{})
	_, err := env.Pool.Exec(ctx, `INSERT INTO baton_role_leases (role, holder, token, acquired_at, renewed_at, expires_at)
SELECT 'seed-' || g, 'h-' || (g % 7), g, now(), now(), now() + (g % 3 - 1) * interval '1 hour'
FROM generate_series(1, 20000) AS g`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, "ANALYZE baton_role_leases"); err != nil {
		t.Fatal(err)
	}
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()

	roles := []string{"seed-1", "seed-2", "seed-3", "fresh"}
	tokens := []int64{1, 2, 0, 0}
	var raw []byte
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.HeartbeatSQL(), "h-1", "", time.Minute, roles, tokens).Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	checkLeasePlan(t, "plan for the given claims", raw)

	// As many claims as a process with a few partitioned roles sends.
	roles, tokens = nil, nil
	for i := range 64 {
		roles = append(roles, fmt.Sprintf("seed-%d", i*100+1))
		tokens = append(tokens, int64(i*100+1))
	}
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.HeartbeatSQL(), "h-1", "", time.Minute, roles, tokens).Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	checkLeasePlan(t, "plan for 64 claims", raw)

	if _, err := conn.Exec(ctx, "PREPARE baton_heartbeat (text, text, interval, text[], bigint[]) AS "+st.HeartbeatSQL()); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE baton_heartbeat")
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode")
	err = conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE baton_heartbeat ('h-1', '', '1 minute', '{seed-1,seed-2,seed-3,fresh}', '{1,2,0,0}')`).Scan(&raw)
	if err != nil {
		t.Fatalf("EXPLAIN EXECUTE: %v", err)
	}
	checkLeasePlan(t, "generic plan", raw)

	// The check itself sees a sequential scan when there is one.
	if _, err := conn.Exec(ctx, "SET enable_indexscan = off; SET enable_bitmapscan = off"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET enable_indexscan; RESET enable_bitmapscan")
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.HeartbeatSQL(), "h-1", "", time.Minute, roles, tokens).Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	if problems := leasePlanProblems(t, raw); !slices.Contains(problems, "a Seq Scan on "+LeaseTable) {
		t.Errorf("with index scans disabled the plan check found only %q; it cannot see a Seq Scan", problems)
	}

	// The plan is also right in practice: the heartbeat works on the big table.
	// seed-2 is h-2's for another hour, seed-3 expired an hour ago and
	// fresh has no row.
	recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "h-1", LeaseDuration: time.Minute, Claims: []lease.Claim{
		{Role: "seed-2"}, {Role: "seed-3"}, {Role: "fresh"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for _, r := range recs {
		held[r.Role] = r.Held
	}
	if held["seed-2"] || !held["seed-3"] || !held["fresh"] || len(recs) != 3 {
		t.Errorf("records on the big table: %+v", recs)
	}
}

func TestLeaseStore_WorksInASchemaNeedingQuotes(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schema := extraSchema(t, env, `Lease "odd" Schema`)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{Schema: schema})
	channel := "Odd Channel " + env.Schema // upper case and a space: needs quoting
	a := mustLeaseStore(t, env.Pool, LeaseStoreOptions{Schema: schema, Channel: channel})
	b := mustLeaseStore(t, newPool(t, env, nil), LeaseStoreOptions{Schema: schema, Channel: channel})

	heard := watch(t, a)
	waitListening(t, ctx, env.Pool, channel)
	recs, err := a.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "r"}}})
	if err != nil {
		t.Fatalf("Heartbeat: %v", err)
	}
	if len(recs) != 1 || !recs[0].Held {
		t.Fatalf("Heartbeat = %+v, want the role taken", recs)
	}
	got, err := b.Read(ctx, []string{"r"})
	if err != nil || len(got) != 1 || got[0].Holder != "a" {
		t.Fatalf("Read through the other store = %+v, %v", got, err)
	}
	if ok, err := a.Release(ctx, "r", "a", recs[0].Token); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	select {
	case role := <-heard:
		if role != "r" {
			t.Fatalf("heard %q, want r", role)
		}
	case <-time.After(time.Second):
		t.Fatal("the release was not heard within 1s on a channel needing quotes")
	}
	if tables := tablesIn(t, ctx, env, env.Schema); len(tables) != 0 {
		t.Errorf("the search_path schema got tables %q; everything belongs in %q", tables, schema)
	}
	var rows int
	if err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, LeaseTable}.Sanitize()).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("rows in %q.%s = %d, %v; want 1", schema, LeaseTable, rows, err)
	}
}

func TestLeaseStore_ExpiryFollowsTheDatabaseClock(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustLeaseStore(t, env.Pool, LeaseStoreOptions{})
	hb := func(holder string, token uint64) lease.Record {
		t.Helper()
		recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: holder, LeaseDuration: time.Hour, Claims: []lease.Claim{{Role: "r", Token: token}}})
		if err != nil || len(recs) != 1 {
			t.Fatalf("Heartbeat = %+v, %v", recs, err)
		}
		return recs[0]
	}
	a := hb("a", 0)
	if b := hb("b", 0); b.Held {
		t.Fatalf("taken within an hour's lease: %+v", b)
	}
	// Move the row an hour into the database's past, as if the database
	// clock had advanced: no application clock is consulted, so the role
	// is free although the application's own reckoning says an hour remains.
	if _, err := env.Pool.Exec(ctx, "UPDATE baton_role_leases SET renewed_at = renewed_at - interval '1 hour', expires_at = expires_at - interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	b := hb("b", 0)
	if !b.Held || b.Token != a.Token+1 {
		t.Fatalf("after expiry by the database clock: %+v, want taken with token %d", b, a.Token+1)
	}
	if got := b.ExpiresAt.Sub(b.RenewedAt); got != time.Hour {
		t.Errorf("ExpiresAt - RenewedAt = %v, want 1h", got)
	}
}

func TestLeaseStore_RoundsLeaseDurationUpToMicroseconds(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustLeaseStore(t, env.Pool, LeaseStoreOptions{})
	recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Second + 1, Claims: []lease.Claim{{Role: "r"}}})
	if err != nil || len(recs) != 1 || !recs[0].Held {
		t.Fatalf("Heartbeat = %+v, %v", recs, err)
	}
	if got := recs[0].ExpiresAt.Sub(recs[0].RenewedAt); got != time.Second+time.Microsecond {
		t.Errorf("a lease of 1s+1ns lasts %v, want 1.000001s", got)
	}
}

func TestLeaseStore_TokenBeyondBigintRangeRenewsNothing(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustLeaseStore(t, env.Pool, LeaseStoreOptions{})
	recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "r"}}})
	if err != nil || len(recs) != 1 || !recs[0].Held {
		t.Fatalf("Heartbeat = %+v, %v", recs, err)
	}
	recs, err = st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "r", Token: 1<<64 - 1}}})
	if err != nil || len(recs) != 1 || recs[0].Held {
		t.Fatalf("Heartbeat with token 2^64-1 = %+v, %v; want refused", recs, err)
	}
	if ok, err := st.Release(ctx, "r", "a", 1<<63+1); err != nil || ok {
		t.Fatalf("Release with token 2^63+1 = %v, %v; want false", ok, err)
	}
}

func TestLeaseStore_TableRefusesRolesOutOfRange(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	insert := `INSERT INTO baton_role_leases (role, holder, token, acquired_at, renewed_at, expires_at) VALUES ($1, 'h', 1, now(), now(), now())`
	checkByteBound(t, ctx, env.Pool, "role", insert, func(err error) error { return leaseError("heartbeat", err) }, lease.ErrInvalidRole)
}

// checkByteBound: the table refuses a value (the insert's $1) of 0 and of
// 130 bytes with a check violation, which mapErr maps to one wrapping
// sentinel, and takes one of 128.
func checkByteBound(t *testing.T, ctx context.Context, pool *pgxpool.Pool, what, insert string, mapErr func(error) error, sentinel error) {
	t.Helper()
	for _, v := range []string{"", strings.Repeat("é", 65)} { // 0 and 130 bytes
		_, err := pool.Exec(ctx, insert, v)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("inserting a %d-byte %s: err = %v, want a check violation", len(v), what, err)
		}
		if mapped := mapErr(err); !errors.Is(mapped, sentinel) {
			t.Errorf("mapping %v gave %v, want one wrapping %v", err, mapped, sentinel)
		}
	}
	if _, err := pool.Exec(ctx, insert, strings.Repeat("é", 64)); err != nil { // 128 bytes
		t.Errorf("inserting a 128-byte %s: %v", what, err)
	}
}

// TestLeaseStore_WithoutTheTableSaysToMigrate: that every call wraps
// ErrSchemaMismatch is the suite's (MissingTableIsASchemaMismatch); the
// message's advice is this adapter's.
func TestLeaseStore_WithoutTheTableSaysToMigrate(t *testing.T) {
	env := testenv.Postgres(t) // not migrated
	st := mustLeaseStore(t, env.Pool, LeaseStoreOptions{})
	_, err := st.Heartbeat(testContext(t), lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "r"}}})
	if !strings.Contains(fmt.Sprint(err), "Migrate") {
		t.Errorf("Heartbeat = %v, want an error that says to run Migrate", err)
	}
}

func TestNewLeaseStore_RejectsInvalidOptionsNamingTheField(t *testing.T) {
	env := testenv.Postgres(t)
	if _, err := NewLeaseStore(nil, LeaseStoreOptions{}); err == nil {
		t.Error("a nil pool was accepted")
	}
	cases := []struct {
		opts    LeaseStoreOptions
		mention string
		is      error
	}{
		{LeaseStoreOptions{Schema: "pg_leases"}, "LeaseStoreOptions.Schema", ErrInvalidSchemaName},
		{LeaseStoreOptions{Schema: strings.Repeat("s", 64)}, "LeaseStoreOptions.Schema", ErrInvalidSchemaName},
		{LeaseStoreOptions{Channel: strings.Repeat("c", 64)}, "LeaseStoreOptions.Channel", nil},
		{LeaseStoreOptions{Channel: "a\x00b"}, "LeaseStoreOptions.Channel", nil},
		{LeaseStoreOptions{Channel: "a\xffb"}, "LeaseStoreOptions.Channel", nil},
		{LeaseStoreOptions{Channel: `a"b`}, "LeaseStoreOptions.Channel", nil},
	}
	for _, tc := range cases {
		_, err := NewLeaseStore(env.Pool, tc.opts)
		if err == nil {
			t.Errorf("%+v: accepted", tc.opts)
			continue
		}
		if !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%+v: err = %v, want it to name %s", tc.opts, err, tc.mention)
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%+v: err = %v, want one wrapping %v", tc.opts, err, tc.is)
		}
	}
	st := mustLeaseStore(t, env.Pool, LeaseStoreOptions{})
	if st.Channel() != DefaultLeaseChannel {
		t.Errorf("default channel = %q, want %q", st.Channel(), DefaultLeaseChannel)
	}
}

// TestLeaseStore_ConcurrentInstancesNeverShareATerm has several instances,
// on two pools, heartbeat the same roles (each listing them in its own
// order) with short leases, releasing now and then. Every term (role,
// token) must belong to one holder only, and no statement may fail: the
// claims of overlapping heartbeats lock rows in one order, so they cannot
// deadlock.
func TestLeaseStore_ConcurrentInstancesNeverShareATerm(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	stores := []*LeaseStore{
		mustLeaseStore(t, env.Pool, LeaseStoreOptions{}),
		mustLeaseStore(t, newPool(t, env, nil), LeaseStoreOptions{}),
	}
	roles := make([]string, 8)
	for i := range roles {
		roles[i] = fmt.Sprintf("devices:partition-%d", i)
	}
	type term struct {
		role  string
		token uint64
	}
	var (
		mu     sync.Mutex
		owners = map[term]string{}
		shared []string
		grants atomic.Int64
	)
	const instances = 6
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for i := range instances {
		st := stores[i%len(stores)]
		holder := fmt.Sprintf("instance-%d", i)
		wg.Go(func() {
			held := map[string]uint64{}
			order := slices.Clone(roles)
			for n := 0; time.Now().Before(stop); n++ {
				// Each instance lists its claims in an order of its own.
				for j := range order {
					k := (j*(i+1) + n) % len(order)
					order[j], order[k] = order[k], order[j]
				}
				claims := make([]lease.Claim, len(order))
				for j, r := range order {
					claims[j] = lease.Claim{Role: r, Token: held[r]}
				}
				recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: holder, LeaseDuration: 100 * time.Millisecond, Claims: claims})
				if err != nil {
					t.Errorf("%s: Heartbeat: %v", holder, err)
					return
				}
				clear(held)
				for _, r := range recs {
					if !r.Held {
						continue
					}
					grants.Add(1)
					held[r.Role] = r.Token
					mu.Lock()
					if o, ok := owners[term{r.Role, r.Token}]; ok && o != holder {
						shared = append(shared, fmt.Sprintf("%s token %d: %s and %s", r.Role, r.Token, o, holder))
					}
					owners[term{r.Role, r.Token}] = holder
					mu.Unlock()
				}
				if n%5 == 4 {
					for r, tok := range held {
						if _, err := st.Release(ctx, r, holder, tok); err != nil {
							t.Errorf("%s: Release: %v", holder, err)
							return
						}
						delete(held, r)
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if len(shared) > 0 {
		t.Fatalf("terms granted to two holders:\n%s", strings.Join(shared, "\n"))
	}
	t.Logf("%d grants over %d terms", grants.Load(), len(owners))
	if len(owners) <= len(roles) {
		t.Errorf("only %d terms over %d roles: the roles hardly changed hands", len(owners), len(roles))
	}
}

// A renewal extends only the term it names, also when the row changes
// under it: the heartbeat's snapshot shows its own live term, so it goes
// on to the upsert, which waits for the row; meanwhile a new term of the
// same holder (another token) commits. The upsert's condition is checked
// again on that committed row, and the stale claim is refused rather than
// extending a term whose token it does not know.
func TestLeaseStore_ARenewalRacingANewTermOfItsHolderIsRefused(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustLeaseStore(t, env.Pool, LeaseStoreOptions{})
	req := func(token uint64) lease.HeartbeatRequest {
		return lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "r", Token: token}}}
	}
	recs, err := st.Heartbeat(ctx, req(0))
	if err != nil || len(recs) != 1 || !recs[0].Held {
		t.Fatalf("Heartbeat = %+v, %v; want the role taken", recs, err)
	}
	term := recs[0].Token

	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `UPDATE baton_role_leases SET token = token + 1, acquired_at = now() WHERE role = 'r'`); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		recs []lease.Record
		err  error
	}
	renewed := make(chan answer, 1)
	go func() {
		recs, err := st.Heartbeat(ctx, req(term))
		renewed <- answer{recs, err}
	}()
	waitForLockWait(t, ctx, env.Pool, "WITH claim AS", "the renewal")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := <-renewed
	if got.err != nil || len(got.recs) != 1 {
		t.Fatalf("the racing renewal = %+v, %v", got.recs, got.err)
	}
	// A refused claim reports the row as the statement's snapshot saw it.
	if r := got.recs[0]; r.Held {
		t.Fatalf("a renewal of term %d after term %d of the same holder committed: %+v; want it refused", term, term+1, r)
	}
	now, err := st.Read(ctx, []string{"r"})
	if err != nil || len(now) != 1 || now[0].Holder != "a" || now[0].Token != term+1 {
		t.Fatalf("Read after the refused renewal = %+v, %v; want holder a in term %d", now, err, term+1)
	}
}
