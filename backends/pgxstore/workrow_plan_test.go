package pgxstore

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/testenv"
)

// planNodes lists every "Node Type" of an EXPLAIN (FORMAT JSON) plan.
func planNodes(plan []byte) []string { return pgsql.PlanField(plan, "Node Type") }

// loadQueue creates table with the suite's shape and claim index, holding
// `finished` completed rows and `live` due ones (ids after the finished),
// loaded with one INSERT ... SELECT, then analyzed.
func loadQueue(t *testing.T, ctx context.Context, pool *pgxpool.Pool, table string, finished, live int) {
	t.Helper()
	ix := suiteIndex()
	ix.Table = table
	ddl, err := ix.DDL()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		strings.Replace(suiteTable, "work_rows", table, 1),
		`INSERT INTO ` + table + ` (id, seq, attempts, completed_at)
SELECT g, g, 1, CASE WHEN g <= $1 THEN now() END FROM generate_series($2::bigint, $3::bigint) AS g`,
		ddl,
		`ANALYZE ` + table,
	} {
		var args []any
		if strings.HasPrefix(q, "INSERT") {
			first := int64(1)
			if finished == 0 {
				first = 1_000_000_000
			}
			args = []any{int64(finished), first, first + int64(finished+live) - 1}
		}
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestWorkRows_ClaimRidesThePartialIndexPastAMillionFinishedRows loads a
// table with 1 000 000 completed rows and 1 000 live ones, checks that the
// claim's plan (custom and generic) scans the claim index and no table
// sequentially, and that a claim there costs about what it costs on a table
// holding only the 1 000 live rows.
func TestWorkRows_ClaimRidesThePartialIndexPastAMillionFinishedRows(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a million rows; skipped with -short")
	}
	env := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	loadQueue(t, ctx, env.Pool, "big_queue", 1_000_000, 1_000)
	loadQueue(t, ctx, env.Pool, "live_queue", 0, 1_000)
	t.Logf("loaded 1 001 000 + 1 000 rows in %v", time.Since(start).Round(time.Millisecond))

	open := func(table string) *WorkRows[int64, conformance.WorkRow] {
		st, err := NewWorkRows[int64](env.Pool, WorkRowsOptions[conformance.WorkRow]{
			Table: table, Live: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Check(ctx); err != nil {
			t.Fatalf("Check(%s): %v", table, err)
		}
		return st
	}
	big, small := open("big_queue"), open("live_queue")

	// The plans, custom (values known) and generic (what a prepared
	// statement may settle on after five runs).
	sp := suiteSpec(time.Now(), 20)
	sp.Eligible = eligibleForPlan
	q, args, err := big.ClaimStatement(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	var custom []byte
	// EXPLAIN takes no bind parameters: the values go in as literals.
	simple := append([]any{pgx.QueryExecModeSimpleProtocol}, args...)
	if err := env.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, simple...).Scan(&custom); err != nil {
		t.Fatal(err)
	}
	generic := explainGeneric(t, ctx, env.Pool, q, args)
	for name, plan := range map[string][]byte{"custom": custom, "generic": generic} {
		nodes, indexes := planNodes(plan), planIndexes(plan)
		t.Logf("%s plan: nodes %v, indexes %v", name, nodes, indexes)
		if slices.Contains(nodes, "Seq Scan") {
			t.Errorf("the %s claim plan has a Seq Scan: %s", name, plan)
		}
		if !slices.Contains(indexes, "big_queue_claim") {
			t.Errorf("the %s claim plan does not use big_queue_claim: %s", name, plan)
		}
	}

	// Latency: claim 20, then release them (not timed), alternating
	// between the tables so drift hits both alike.
	const claims = 300
	best := 0.0
	for round := 1; round <= 3; round++ {
		var tb, ts []time.Duration
		for i := range claims {
			if i%2 == 0 {
				tb = append(tb, timedClaim(t, ctx, big))
				ts = append(ts, timedClaim(t, ctx, small))
			} else {
				ts = append(ts, timedClaim(t, ctx, small))
				tb = append(tb, timedClaim(t, ctx, big))
			}
		}
		mb, ms := median(tb), median(ts)
		ratio := float64(mb) / float64(ms)
		t.Logf("round %d: median claim of 20 over %d claims: %v with 1M finished rows, %v with live rows only (ratio %.2f)",
			round, claims, mb, ms, ratio)
		if round == 1 || ratio < best {
			best = ratio
		}
		if best <= 1.2 {
			break
		}
	}
	if best > 1.2 {
		t.Errorf("a claim past a million finished rows took %.2f× as long as on the live rows alone; want at most 1.2×", best)
	}
}

// eligibleForPlan is a typical predicate: the live filter plus an attempts
// bound, which is a parameter in the statement.
var eligibleForPlan = workrow.And(conformance.WorkRowsLive, workrow.Lt("attempts", 8))

// explainGeneric returns the generic plan of q: prepared in a transaction
// with plan_cache_mode = force_generic_plan, then explained on execution.
func explainGeneric(t *testing.T, ctx context.Context, pool *pgxpool.Pool, q string, args []any) []byte {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Prepare(ctx, "claim_plan", q); err != nil {
		t.Fatal(err)
	}
	plan := explainExecute(t, ctx, tx, "claim_plan", args)
	// A prepared statement outlives the transaction: the connection may
	// explain another.
	if _, err := tx.Exec(ctx, "DEALLOCATE claim_plan"); err != nil {
		t.Fatal(err)
	}
	return plan
}

// explainExecute is the plan the prepared statement name runs for args,
// which go in as literals (EXPLAIN takes no bind parameters).
func explainExecute(t *testing.T, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, name string, args []any) []byte {
	t.Helper()
	ps := make([]string, len(args))
	for i := range args {
		ps[i] = "$" + strconv.Itoa(i+1)
	}
	var plan []byte
	simple := append([]any{pgx.QueryExecModeSimpleProtocol}, args...)
	if err := q.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+pgx.Identifier{name}.Sanitize()+"("+strings.Join(ps, ", ")+")", simple...).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

func timedClaim(t *testing.T, ctx context.Context, st *WorkRows[int64, conformance.WorkRow]) time.Duration {
	t.Helper()
	sp := suiteSpec(time.Now(), 20)
	start := time.Now()
	got, err := st.Claim(ctx, sp)
	took := time.Since(start)
	if err != nil || len(got) != 20 {
		t.Fatalf("Claim = %d rows, %v", len(got), err)
	}
	ids := make([]int64, len(got))
	for i, c := range got {
		ids[i] = c.ID
	}
	if _, err := st.ReleaseMany(ctx, sp.LockID, ids); err != nil {
		t.Fatal(err)
	}
	return took
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestWorkRows_PreparedClaimSettlesOnAGenericPlan: over one connection, the
// claim statement runs prepared (pgx's statement cache), and once
// PostgreSQL's five custom plans are done it keeps the generic one, so no
// claim after them is planned afresh. With the batch size a parameter
// (LIMIT $n), the generic plan's estimate was a tenth of the table and
// every claim got a custom plan of its own.
func TestWorkRows_PreparedClaimSettlesOnAGenericPlan(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	pool, st := oneConnectionQueue(t, ctx, env, "plan_cache_queue", 10_000)
	spec := func() workrow.ClaimSpec {
		sp := suiteSpec(time.Now(), 20)
		sp.Eligible = eligibleForPlan
		return sp
	}
	q, _, err := st.ClaimStatement(ctx, spec())
	if err != nil {
		t.Fatal(err)
	}
	const claims = 12
	for i := range claims {
		if got, err := st.Claim(ctx, spec()); err != nil || len(got) != 20 {
			t.Fatalf("claim %d = %d rows, %v; want 20", i+1, len(got), err)
		}
	}
	var generic, custom int64
	err = pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, q).Scan(&generic, &custom)
	if err != nil {
		t.Fatalf("reading the prepared claim's plan counts: %v", err)
	}
	t.Logf("%d claims: %d generic plans, %d custom", claims, generic, custom)
	if custom > 5 || generic < claims-5 {
		t.Errorf("%d claims over one connection ran on %d custom plans and %d generic; want at most 5 custom (PostgreSQL's trial plans) and the rest generic", claims, custom, generic)
	}
}

// TestWorkRows_FinalizeFindsItsRowsThroughThePrimaryKeyOnceTheGrownTableIsAnalyzed:
// a finalize matches its arrays to the table by id, a join whose strategy
// follows the table's size. A connection that prepared it while the table
// was small runs a plan made for that size (logged here before ANALYZE: a
// hash of the whole table); the statistics of the grown table (ANALYZE,
// or autovacuum's) invalidate it, and from then on a small finalize, and
// the generic plan a batch of finalizes runs on, probe the primary key.
func TestWorkRows_FinalizeFindsItsRowsThroughThePrimaryKeyOnceTheGrownTableIsAnalyzed(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	const table, first = "finals_growing", int64(1_000_000_000) // loadQueue's first live id
	pool, st := oneConnectionQueue(t, ctx, env, table, 30)
	now := time.Now()
	var lock workrow.LockID
	finalizeEach := func(batch int) {
		sp := suiteSpec(now, batch)
		sp.Eligible = eligibleForPlan
		claimed, err := st.Claim(ctx, sp)
		if err != nil || len(claimed) != batch {
			t.Fatalf("Claim = %d rows, %v; want %d", len(claimed), err, batch)
		}
		for i, c := range claimed {
			owned, err := st.FinalizeMany(ctx, sp.LockID, []workrow.Final[int64]{{ID: c.ID, Set: []workrow.Set{workrow.Assign("completed_at", now)}}})
			if err != nil || len(owned) != 1 || !owned[0] {
				t.Fatalf("finalize %d = %v, %v; want the row owned", i+1, owned, err)
			}
		}
		lock = sp.LockID
	}
	finalizeEach(12) // past PostgreSQL's five trial plans, on 30 rows
	if _, err := env.Pool.Exec(ctx, `INSERT INTO `+table+` (id, seq) SELECT g, g FROM generate_series($1::bigint, $2::bigint) AS g`, first+30, first+20_029); err != nil {
		t.Fatal(err)
	}

	var name, q string
	err := pool.QueryRow(ctx, `SELECT name, statement FROM pg_prepared_statements
WHERE statement LIKE 'UPDATE %' AND statement LIKE '%unnest(%'`).Scan(&name, &q)
	if err != nil {
		t.Fatalf("reading the prepared finalize: %v", err)
	}
	// The arrays, as literals: ids, lock ids, visibilities, then
	// completed_at's kinds and values.
	literals := func(ids ...int64) []any {
		var id, lk, vis, kind, val []string
		for _, i := range ids {
			id, lk, vis = append(id, strconv.FormatInt(i, 10)), append(lk, lock.String()), append(vis, "NULL")
			kind, val = append(kind, "1"), append(val, `"`+now.UTC().Format(time.RFC3339Nano)+`"`)
		}
		arr := func(s []string) any { return "{" + strings.Join(s, ",") + "}" }
		return []any{arr(id), arr(lk), arr(vis), arr(kind), arr(val)}
	}
	prepared := func(ids ...int64) []byte { return explainExecute(t, ctx, pool, name, literals(ids...)) }
	before := prepared(first + 20_000)
	t.Logf("a one-row finalize on the grown table before ANALYZE, on the connection that prepared it on 30 rows: nodes %v", planNodes(before))

	if _, err := env.Pool.Exec(ctx, `ANALYZE `+table); err != nil {
		t.Fatal(err)
	}
	finalizeEach(1)
	probesPrimaryKey(t, "a one-row finalize on the grown table after ANALYZE", table, prepared(first+20_000))
	batch := make([]int64, 100)
	for i := range batch {
		batch[i] = first + 100 + int64(i)*150
	}
	probesPrimaryKey(t, "the generic plan of a 100-row finalize", table, explainGeneric(t, ctx, pool, q, literals(batch...)))
}

// TestWorkRows_RenewAndReleaseFindTheirRowsThroughThePrimaryKey: the
// renewal of the rows in hand runs every few seconds for every worker, and
// a release returns a batch at shutdown; both match their ids with
// = ANY, which must probe the primary key rather than read the table, in
// the plan a connection runs and in the generic one.
func TestWorkRows_RenewAndReleaseFindTheirRowsThroughThePrimaryKey(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	const table = "renew_plan_queue"
	pool, st := oneConnectionQueue(t, ctx, env, table, 20_000)
	now := time.Now()
	sp := suiteSpec(now, 100)
	sp.Eligible = eligibleForPlan
	claimed, err := st.Claim(ctx, sp)
	if err != nil || len(claimed) != 100 {
		t.Fatalf("Claim = %d rows, %v; want 100", len(claimed), err)
	}
	ids := make([]int64, len(claimed))
	lits := make([]string, len(claimed))
	for i, c := range claimed {
		ids[i], lits[i] = c.ID, strconv.FormatInt(c.ID, 10)
	}
	if owned, err := st.RenewMany(ctx, sp.LockID, now.Add(time.Hour), ids); err != nil || slices.Contains(owned, false) {
		t.Fatalf("RenewMany = %v, %v; want every row owned", owned, err)
	}
	if owned, err := st.ReleaseMany(ctx, sp.LockID, ids); err != nil || slices.Contains(owned, false) {
		t.Fatalf("ReleaseMany = %v, %v; want every row owned", owned, err)
	}
	idArray := "{" + strings.Join(lits, ",") + "}"
	for _, c := range []struct {
		what, like string
		args       []any // as literals
	}{
		{"the renewal", `% = ANY ($3)%`, []any{sp.LockID.String(), now.Add(time.Hour).UTC().Format(time.RFC3339Nano), idArray}},
		{"the release", `% = ANY ($2)%`, []any{sp.LockID.String(), idArray}},
	} {
		var name, q string
		err := pool.QueryRow(ctx, `SELECT name, statement FROM pg_prepared_statements WHERE statement LIKE 'UPDATE %' AND statement LIKE $1`, c.like).Scan(&name, &q)
		if err != nil {
			t.Fatalf("reading the prepared statement of %s: %v", c.what, err)
		}
		prepared := explainExecute(t, ctx, pool, name, c.args)
		probesPrimaryKey(t, "the prepared plan of "+c.what, table, prepared)
		probesPrimaryKey(t, "the generic plan of "+c.what, table, explainGeneric(t, ctx, pool, q, c.args))
	}
}

// probesPrimaryKey fails the test unless plan finds its rows through
// table's primary key, with no Seq Scan or Sort.
func probesPrimaryKey(t *testing.T, what, table string, plan []byte) {
	t.Helper()
	nodes, indexes := planNodes(plan), planIndexes(plan)
	t.Logf("%s: nodes %v, indexes %v", what, nodes, indexes)
	if slices.Contains(nodes, "Seq Scan") || slices.Contains(nodes, "Sort") || !slices.Contains(indexes, table+"_pkey") {
		t.Errorf("%s must find its rows through %s_pkey, with no Seq Scan or Sort: %s", what, table, plan)
	}
}

// oneConnectionQueue loads table with live due rows (loadQueue) and opens
// a store on a pool of one connection, so that every statement runs on the
// connection whose prepared statements a test reads.
func oneConnectionQueue(t *testing.T, ctx context.Context, env *testenv.PostgresEnv, table string, live int) (*pgxpool.Pool, *WorkRows[int64, conformance.WorkRow]) {
	t.Helper()
	loadQueue(t, ctx, env.Pool, table, 0, live)
	pool := newPool(t, env, func(c *pgxpool.Config) { c.MaxConns = 1 })
	st, err := NewWorkRows[int64](pool, WorkRowsOptions[conformance.WorkRow]{
		Table: table, Live: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder,
	})
	if err != nil {
		t.Fatal(err)
	}
	return pool, st
}
