package pgxstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/internal/testenv"
)

func mustProjectionStore(t testing.TB, pool *pgxpool.Pool, opts ProjectionStoreOptions) *ProjectionStore {
	t.Helper()
	st, err := NewProjectionStore(pool, opts)
	if err != nil {
		t.Fatalf("NewProjectionStore: %v", err)
	}
	return st
}

// migratedProjectionStore gives the test a migrated schema and a store on it.
func migratedProjectionStore(t *testing.T) (*testenv.PostgresEnv, *ProjectionStore) {
	t.Helper()
	env := testenv.Postgres(t)
	mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
	return env, mustProjectionStore(t, env.Pool, ProjectionStoreOptions{})
}

func TestProjectionStore_Conformance(t *testing.T) {
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		env, st := migratedProjectionStore(t)
		return conformance.ProjectionHarness{
			Store:  st,
			Second: mustProjectionStore(t, newPool(t, env, nil), ProjectionStoreOptions{}),
			Unmigrated: func(t *testing.T) conformance.ProjectionHarness {
				return conformance.ProjectionHarness{Store: mustProjectionStore(t, testenv.Postgres(t).Pool, ProjectionStoreOptions{})}
			},
			SchemaMismatch: ErrSchemaMismatch,
		}
	}, conformance.ProjectionFeatures{})
}

// writeProjection reserves a generation from st and replaces subject's
// projection with it, as a refresh does.
func writeProjection(t testing.TB, ctx context.Context, st projection.Store, subject projection.Subject, grants []projection.Grant) projection.Generation {
	t.Helper()
	gen, err := st.Reserve(ctx)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if err := st.Replace(ctx, subject, gen, grants); err != nil {
		t.Fatalf("Replace(%s, generation %d, %d grants): %v", subject, gen, len(grants), err)
	}
	return gen
}

// TestProjectionStore_ConformanceUnderRepeatableReadByDefault runs the
// contract on sessions whose default_transaction_isolation is REPEATABLE
// READ (set per connection, never on the server): Replace runs READ
// COMMITTED whatever the default, as the bun store does, so concurrent
// flips of one subject still serialize on its lock without serialization
// failures.
func TestProjectionStore_ConformanceUnderRepeatableReadByDefault(t *testing.T) {
	repeatableRead := func(c *pgxpool.Config) {
		c.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	}
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		env := testenv.Postgres(t)
		mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
		pool := newPool(t, env, repeatableRead)
		var level string
		if err := pool.QueryRow(testContext(t), "SHOW default_transaction_isolation").Scan(&level); err != nil || level != "repeatable read" {
			t.Fatalf("the session's default isolation is %q, %v; the test needs repeatable read", level, err)
		}
		return conformance.ProjectionHarness{
			Store:  mustProjectionStore(t, pool, ProjectionStoreOptions{}),
			Second: mustProjectionStore(t, newPool(t, env, repeatableRead), ProjectionStoreOptions{}),
		}
	}, conformance.ProjectionFeatures{})
}

// manyGrants builds n grants spread over a few resource types.
func manyGrants(n int, seed uint64) []projection.Grant {
	types := []string{"doc", "folder", "project", "report"}
	grants := make([]projection.Grant, n)
	for i := range grants {
		grants[i] = projection.Grant{
			ResourceType: types[i%len(types)],
			ResourceID:   fmt.Sprintf("res-%07d", i),
			Mask:         projection.Mask((uint64(i) + seed) * 0x9E3779B97F4A7C15),
		}
	}
	return grants
}

func TestProjectionStore_TablesAreUnloggedAndTheGenerationSequenceIsLogged(t *testing.T) {
	env, _ := migratedProjectionStore(t)
	ctx := testContext(t)
	for name, want := range map[string]string{
		ProjectionHeaderTable:         "u",
		ProjectionDetailTable:         "u",
		"baton_projection_generation": "p",
	} {
		var persistence string
		err := env.Pool.QueryRow(ctx, `SELECT c.relpersistence::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname = $2`, env.Schema, name).Scan(&persistence)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if persistence != want {
			t.Errorf("%s has relpersistence %q, want %q", name, persistence, want)
		}
	}
}

// truncateAsACrashWould empties both projection tables, which is what
// PostgreSQL does to UNLOGGED tables when it restarts after a crash.
func truncateAsACrashWould(t *testing.T, ctx context.Context, env *testenv.PostgresEnv) {
	t.Helper()
	if _, err := env.Pool.Exec(ctx, "TRUNCATE "+ProjectionHeaderTable+", "+ProjectionDetailTable); err != nil {
		t.Fatal(err)
	}
}

// TestProjectionStore_AfterCrashTruncationLocalReaderSaysRefreshAndReaderRefreshes
// is the UNLOGGED caveat: once the tables are emptied as a crash restart
// empties them, a subject that had grants reads as ErrNoProjection
// ("refresh it"), never as "no access", and a Reader refreshes it through
// from the Source and answers. The Source here is a function in the test;
// TestProjectionStore_AfterCrashTruncationReaderRefreshesFromTheGraphEngine
// runs the same story against the fake graph engine.
func TestProjectionStore_AfterCrashTruncationLocalReaderSaysRefreshAndReaderRefreshes(t *testing.T) {
	env, st := migratedProjectionStore(t)
	ctx := testContext(t)
	alice := projection.Subject{Type: "user", ID: "alice"}
	bits := projection.Bits{"read": 0, "write": 1, "own": 63}
	var fetches atomic.Int64
	source := projection.SourceFunc(func(ctx context.Context, s projection.Subject) ([]projection.Grant, error) {
		fetches.Add(1)
		if s != alice {
			return nil, nil
		}
		return []projection.Grant{{ResourceType: "doc", ResourceID: "plan", Mask: 1<<63 | 0b01}}, nil
	})
	local, err := projection.NewLocalReader(st)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := projection.NewReader(projection.ReaderConfig{Store: st, Source: source})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Refresh(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if own, err := local.HasPermission(ctx, alice, "doc", "plan", bits, "own"); err != nil || !own {
		t.Fatalf("before the crash: own = %v, %v", own, err)
	}

	truncateAsACrashWould(t, ctx, env)

	held, err := local.HasPermission(ctx, alice, "doc", "plan", bits, "read")
	if !errors.Is(err, projection.ErrNoProjection) || held {
		t.Fatalf("LocalReader after the crash = %v, %v; want ErrNoProjection (refresh), not an answer", held, err)
	}
	if _, found, err := local.Mask(ctx, alice, "doc", "plan"); !errors.Is(err, projection.ErrNoProjection) || found {
		t.Fatalf("LocalReader.Mask after the crash = found %v, %v; want ErrNoProjection", found, err)
	}
	before := fetches.Load()
	own, err := reader.HasPermission(ctx, alice, "doc", "plan", bits, "own")
	if err != nil || !own {
		t.Fatalf("Reader after the crash = %v, %v; want it to refresh and answer true", own, err)
	}
	if n := fetches.Load() - before; n != 1 {
		t.Errorf("the Reader fetched %d times, want 1 refresh-through", n)
	}
	if own, err := local.HasPermission(ctx, alice, "doc", "plan", bits, "own"); err != nil || !own {
		t.Errorf("LocalReader after the refresh-through = %v, %v", own, err)
	}
	if write, err := local.HasPermission(ctx, alice, "doc", "plan", bits, "write"); err != nil || write {
		t.Errorf("write after the refresh-through = %v, %v; want false", write, err)
	}
}

func TestProjectionStore_GenerationNumbersDoNotRepeatAfterTruncation(t *testing.T) {
	env, st := migratedProjectionStore(t)
	ctx := testContext(t)
	s := projection.Subject{Type: "user", ID: "u"}
	g1 := writeProjection(t, ctx, st, s, nil)
	truncateAsACrashWould(t, ctx, env)
	g2 := writeProjection(t, ctx, st, s, nil)
	if g2 <= g1 {
		t.Errorf("generation after the truncation = %d, not above %d", g2, g1)
	}
}

func TestProjectionStore_MaskIsStoredAsItsBitPatternInTheBigint(t *testing.T) {
	env, st := migratedProjectionStore(t)
	ctx := testContext(t)
	s := projection.Subject{Type: "user", ID: "bits"}
	want := map[string]int64{"top": -1 << 63, "all": -1, "low": 5, "max-signed": 1<<63 - 1}
	grants := []projection.Grant{
		{ResourceType: "doc", ResourceID: "top", Mask: 1 << 63},
		{ResourceType: "doc", ResourceID: "all", Mask: 1<<64 - 1},
		{ResourceType: "doc", ResourceID: "low", Mask: 5},
		{ResourceType: "doc", ResourceID: "max-signed", Mask: 1<<63 - 1},
	}
	writeProjection(t, ctx, st, s, grants)
	for id, v := range want {
		var got int64
		if err := env.Pool.QueryRow(ctx, "SELECT mask FROM "+ProjectionDetailTable+" WHERE resource_id = $1", id).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != v {
			t.Errorf("%s: the column holds %d, want %d", id, got, v)
		}
	}
	// SQL can test a bit directly: bit 63 of the bigint.
	var top bool
	if err := env.Pool.QueryRow(ctx, "SELECT (mask & (1::bigint << 63)) <> 0 FROM "+ProjectionDetailTable+" WHERE resource_id = 'top'").Scan(&top); err != nil || !top {
		t.Errorf("bit 63 in SQL = %v, %v", top, err)
	}
}

// pointReadPlanProblems lists what is wrong with a point read's plan: any
// sequential scan, a header not found through the partial index of active
// headers, or detail rows not found through the primary key.
func pointReadPlanProblems(t *testing.T, raw []byte) []string {
	t.Helper()
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("cannot read the plan (%v): %s", err, raw)
	}
	var problems []string
	headerByIndex, detailByIndex := false, false
	plans[0].Plan.walk(func(n planNode) {
		switch {
		case n.NodeType == "Seq Scan":
			problems = append(problems, "a Seq Scan on "+n.RelationName)
		case n.RelationName == ProjectionHeaderTable:
			if strings.HasPrefix(n.NodeType, "Index") && n.IndexName == ProjectionHeaderTable+"_active" {
				headerByIndex = true
			} else {
				problems = append(problems, fmt.Sprintf("a %s on %s (index %q)", n.NodeType, n.RelationName, n.IndexName))
			}
		case n.RelationName == ProjectionDetailTable:
			if strings.HasPrefix(n.NodeType, "Index") && n.IndexName == ProjectionDetailTable+"_pkey" {
				detailByIndex = true
			} else {
				problems = append(problems, fmt.Sprintf("a %s on %s (index %q)", n.NodeType, n.RelationName, n.IndexName))
			}
		}
	})
	if !headerByIndex {
		problems = append(problems, "the active header is not found through "+ProjectionHeaderTable+"_active")
	}
	if !detailByIndex {
		problems = append(problems, "the detail row is not found through "+ProjectionDetailTable+"_pkey")
	}
	return problems
}

func checkPointReadPlan(t *testing.T, what string, raw []byte) {
	t.Helper()
	reportPlan(t, what, raw, pointReadPlanProblems(t, raw))
}

// TestProjectionStore_RefreshOf100000GrantsAndPointReadsUseIndexes writes a
// projection of 100 000 grants next to a few thousand other subjects, and
// checks that a point read, for the given values and as a generic prepared
// plan, is answered through indexes with no sequential scan.
func TestProjectionStore_RefreshOf100000GrantsAndPointReadsUseIndexes(t *testing.T) {
	env, st := migratedProjectionStore(t)
	ctx := testContext(t)
	big := projection.Subject{Type: "user", ID: "big"}
	grants := manyGrants(100_000, 1)
	start := time.Now()
	gen := writeProjection(t, ctx, st, big, grants)
	t.Logf("refresh of %d grants: %v", len(grants), time.Since(start).Round(time.Millisecond))
	// A second generation of it, superseded, and other subjects with a few
	// grants each, so the tables look lived in.
	writeProjection(t, ctx, st, big, grants)
	_, err := env.Pool.Exec(ctx, `WITH h AS (
    INSERT INTO baton_projection_header (subject_type, subject_id, active)
    SELECT 'user', 'other-' || g, true FROM generate_series(1, 3000) AS g
    RETURNING generation)
INSERT INTO baton_projection_detail (generation, resource_type, resource_id, mask)
SELECT h.generation, 'doc', 'd-' || k, k FROM h, generate_series(1, 5) AS k`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, "ANALYZE "+ProjectionHeaderTable+", "+ProjectionDetailTable); err != nil {
		t.Fatal(err)
	}
	local, err := projection.NewLocalReader(st)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 49_999, 99_999} {
		g := grants[i]
		m, found, err := local.Mask(ctx, big, g.ResourceType, g.ResourceID)
		if err != nil || !found || m != g.Mask {
			t.Errorf("Mask(%s/%s) = %v, %v, %v; want %v", g.ResourceType, g.ResourceID, m, found, err, g.Mask)
		}
	}
	snap, err := local.Snapshot(ctx, big)
	if err != nil || len(snap.Grants) != len(grants) || snap.Generation <= gen {
		t.Fatalf("Snapshot = generation %d with %d grants, %v", snap.Generation, len(snap.Grants), err)
	}

	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var raw []byte
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.MaskSQL(), big.Type, big.ID, "doc", "res-0004000").Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	checkPointReadPlan(t, "plan for a point read of the 100 000-grant subject", raw)
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.MaskSQL(), "user", "other-7", "doc", "d-3").Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	checkPointReadPlan(t, "plan for a point read of a small subject", raw)

	if _, err := conn.Exec(ctx, "PREPARE baton_point_read (text, text, text, text) AS "+st.MaskSQL()); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "DEALLOCATE baton_point_read")
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode")
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE baton_point_read ('user', 'big', 'doc', 'res-0004000')").Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN EXECUTE: %v", err)
	}
	checkPointReadPlan(t, "generic plan of a point read", raw)

	// The check itself sees a sequential scan when there is one.
	if _, err := conn.Exec(ctx, "SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET enable_indexscan; RESET enable_bitmapscan; RESET enable_indexonlyscan")
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.MaskSQL(), big.Type, big.ID, "doc", "res-0004000").Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	if problems := pointReadPlanProblems(t, raw); !slices.ContainsFunc(problems, func(p string) bool { return strings.HasPrefix(p, "a Seq Scan") }) {
		t.Errorf("with index scans disabled the plan check found only %q; it cannot see a Seq Scan", problems)
	}
}

// TestProjectionStore_SweepFindsItsWorkThroughThePartialIndex checks that a
// sweep among many active headers reads only the superseded ones, through
// baton_projection_header_superseded, and deletes detail rows by the
// primary key.
func TestProjectionStore_SweepFindsItsWorkThroughThePartialIndex(t *testing.T) {
	env, st := migratedProjectionStore(t)
	ctx := testContext(t)
	_, err := env.Pool.Exec(ctx, `WITH h AS (
    INSERT INTO baton_projection_header (subject_type, subject_id, active)
    SELECT 'user', 'u-' || g, g % 100 <> 0 FROM generate_series(1, 20000) AS g
    RETURNING generation)
INSERT INTO baton_projection_detail (generation, resource_type, resource_id, mask)
SELECT h.generation, 'doc', 'd-' || k, k FROM h, generate_series(1, 5) AS k`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, "ANALYZE "+ProjectionHeaderTable+", "+ProjectionDetailTable); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := env.Pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+st.SweepSQL()).Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN: %v", err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil {
		t.Fatal(err)
	}
	var problems []string
	usesPartial, usesDetailKey := false, false
	plans[0].Plan.walk(func(n planNode) {
		switch {
		case n.NodeType == "Seq Scan":
			problems = append(problems, "a Seq Scan on "+n.RelationName)
		case n.IndexName == ProjectionHeaderTable+"_superseded":
			usesPartial = true
		case n.IndexName == ProjectionDetailTable+"_pkey":
			usesDetailKey = true
		}
	})
	if !usesPartial {
		problems = append(problems, "the candidates are not read through "+ProjectionHeaderTable+"_superseded")
	}
	if !usesDetailKey {
		problems = append(problems, "detail rows are not found through "+ProjectionDetailTable+"_pkey")
	}
	reportPlan(t, "sweep plan", raw, problems)
	n, err := st.Sweep(ctx)
	if err != nil || n != 200 {
		t.Fatalf("Sweep = %d, %v; want the 200 inactive generations", n, err)
	}
	var details int
	if err := env.Pool.QueryRow(ctx, "SELECT count(*) FROM "+ProjectionDetailTable).Scan(&details); err != nil || details != 19800*5 {
		t.Errorf("%d detail rows left, %v; want %d", details, err, 19800*5)
	}
}

// TestProjectionStore_ConcurrentFlipsOfOneSubjectAcrossPoolsNeverFail has
// writers on three pools refresh one subject at once, many times, starting
// with its very first refresh: the flips serialize on the subject's lock,
// so none fails (no unique violation, no serialization failure; at most a
// refresh overtaken by one that reserved later is stale) and the largest
// generation written stays active.
func TestProjectionStore_ConcurrentFlipsOfOneSubjectAcrossPoolsNeverFail(t *testing.T) {
	env, st := migratedProjectionStore(t)
	ctx := testContext(t)
	stores := []*ProjectionStore{st,
		mustProjectionStore(t, newPool(t, env, nil), ProjectionStoreOptions{}),
		mustProjectionStore(t, newPool(t, env, nil), ProjectionStoreOptions{}),
	}
	s := projection.Subject{Type: "user", ID: "contended"}
	const writers, rounds = 9, 15
	start := make(chan struct{})
	errs := make(chan error, writers)
	var written atomic.Int64
	var largest atomic.Uint64
	for i := range writers {
		go func() {
			<-start
			var err error
			for n := range rounds {
				st := stores[i%len(stores)]
				var gen projection.Generation
				if gen, err = st.Reserve(ctx); err != nil {
					break
				}
				err = st.Replace(ctx, s, gen, manyGrants(1+n%7, uint64(i)))
				if errors.Is(err, projection.ErrStale) {
					err = nil
					continue
				}
				if err != nil {
					break
				}
				written.Add(1)
				for old := largest.Load(); uint64(gen) > old && !largest.CompareAndSwap(old, uint64(gen)); old = largest.Load() {
				}
			}
			errs <- err
		}()
	}
	close(start)
	for range writers {
		if err := <-errs; err != nil {
			t.Errorf("Replace: %v", err)
		}
	}
	var active, all int
	var activeGen int64
	err := env.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE active), count(*), max(generation) FILTER (WHERE active) FROM "+ProjectionHeaderTable).Scan(&active, &all, &activeGen)
	if err != nil || active != 1 || int64(all) != written.Load() || uint64(activeGen) != largest.Load() {
		t.Errorf("%d active generations (%d) of %d, %v; want 1, the largest written (%d), of %d", active, activeGen, all, err, largest.Load(), written.Load())
	}
}

// The flips of one subject take turns on the subject's advisory lock, so
// each demote and promote sees what the flip before it committed. The
// concurrency tests catch a missing lock only when flips happen to
// collide; this one holds the lock and checks that Replace waits for it.
func TestProjectionStore_ReplaceWaitsForTheSubjectsFlipLock(t *testing.T) {
	env, st := migratedProjectionStore(t)
	ctx := testContext(t)
	subject := projection.Subject{Type: "user", ID: "flip-lock"}
	gen, err := st.Reserve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	holder, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx))
	key := pgsql.ProjectionLockKey(pgsql.Qualified("", ProjectionHeaderTable), subject.Type, subject.ID)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	replaced := make(chan error, 1)
	go func() { replaced <- st.Replace(ctx, subject, gen, manyGrants(3, 1)) }()
	eventually(t, 30*time.Second, "the flip never waited for the subject's lock", func() bool {
		select {
		case err := <-replaced:
			t.Fatalf("Replace returned (%v) while another transaction held the subject's flip lock", err)
		default:
		}
		var waiting bool
		if err := env.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks
WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid::text::bigint = $1 AND objid::text::bigint = $2)`,
			int64(uint64(key)>>32), int64(uint64(key)&0xffffffff)).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return waiting
	})
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-replaced; err != nil {
		t.Fatalf("Replace after the lock was freed: %v", err)
	}
}

func TestProjectionStore_WorksInASchemaNeedingQuotes(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schema := extraSchema(t, env, `Projection "odd" Schema`)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{Schema: schema})
	a := mustProjectionStore(t, env.Pool, ProjectionStoreOptions{Schema: schema})
	b := mustProjectionStore(t, newPool(t, env, nil), ProjectionStoreOptions{Schema: schema})
	s := projection.Subject{Type: "user", ID: "q"}
	grants := manyGrants(10, 3)
	for range 2 {
		writeProjection(t, ctx, a, s, grants)
	}
	if m, found, err := b.Mask(ctx, s, grants[3].ResourceType, grants[3].ResourceID); err != nil || !found || m != grants[3].Mask {
		t.Fatalf("Mask through the other store = %v, %v, %v", m, found, err)
	}
	if n, err := b.Sweep(ctx); err != nil || n != 1 {
		t.Fatalf("Sweep = %d, %v; want 1", n, err)
	}
	if tables := tablesIn(t, ctx, env, env.Schema); len(tables) != 0 {
		t.Errorf("the search_path schema got tables %q; everything belongs in %q", tables, schema)
	}
}

// TestProjectionStore_WithoutTheTablesSaysToMigrate: that every call
// wraps ErrSchemaMismatch is the suite's (MissingTablesAreASchemaMismatch);
// the message's advice is this adapter's.
func TestProjectionStore_WithoutTheTablesSaysToMigrate(t *testing.T) {
	env := testenv.Postgres(t) // not migrated
	st := mustProjectionStore(t, env.Pool, ProjectionStoreOptions{})
	err := st.Replace(testContext(t), projection.Subject{Type: "user", ID: "x"}, 1, manyGrants(3, 1))
	if !strings.Contains(fmt.Sprint(err), "Migrate") {
		t.Errorf("Replace = %v, want an error that says to run Migrate", err)
	}
}

func TestProjectionStore_TableRefusesSubjectsOutOfRange(t *testing.T) {
	env, _ := migratedProjectionStore(t)
	ctx := testContext(t)
	insert := "INSERT INTO " + ProjectionHeaderTable + " (subject_type, subject_id) VALUES ($1, $2)"
	for _, c := range [][2]string{{"", "x"}, {"user", ""}, {strings.Repeat("t", 129), "x"}, {"user", strings.Repeat("é", 129)}} {
		_, err := env.Pool.Exec(ctx, insert, c[0], c[1])
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("inserting a %d-byte type and %d-byte ID: err = %v, want a check violation", len(c[0]), len(c[1]), err)
		}
		if mapped := projectionError("replace", err); !errors.Is(mapped, projection.ErrInvalidSubject) {
			t.Errorf("projectionError(%v) = %v, want one wrapping projection.ErrInvalidSubject", err, mapped)
		}
	}
	if _, err := env.Pool.Exec(ctx, insert, strings.Repeat("t", 128), strings.Repeat("é", 128)); err != nil {
		t.Errorf("inserting the longest subject: %v", err)
	}
}

func TestNewProjectionStore_RejectsInvalidOptionsNamingTheField(t *testing.T) {
	env := testenv.Postgres(t)
	if _, err := NewProjectionStore(nil, ProjectionStoreOptions{}); err == nil {
		t.Error("a nil pool was accepted")
	}
	for _, schema := range []string{"pg_projection", strings.Repeat("s", 64), "a\x00b"} {
		_, err := NewProjectionStore(env.Pool, ProjectionStoreOptions{Schema: schema})
		if !errors.Is(err, ErrInvalidSchemaName) || !strings.Contains(err.Error(), "ProjectionStoreOptions.Schema") {
			t.Errorf("Schema %q: err = %v, want ErrInvalidSchemaName naming ProjectionStoreOptions.Schema", schema, err)
		}
	}
}

func TestProjectionStore_ReplaceSendsFixedRoundTripsWhateverTheGrantCount(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	counter := &queryCounter{}
	st := mustProjectionStore(t, newPool(t, env, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }), ProjectionStoreOptions{})
	s := projection.Subject{Type: "user", ID: "n"}
	var counts []int64
	for _, n := range []int{1, 1000, 20_000} {
		gen, err := st.Reserve(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before := counter.n.Load()
		if err := st.Replace(ctx, s, gen, manyGrants(n, 1)); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, counter.n.Load()-before)
	}
	if counts[0] != counts[1] || counts[1] != counts[2] {
		t.Errorf("statements per Replace of 1, 1000 and 20 000 grants = %v; the grants must go by COPY, not a statement each", counts)
	}
}

// A generation sequence that caches numbers per session would let a
// refresh that reserved later get a smaller number than one that reserved
// earlier: the stale answer would win the flip. VerifySchema says so.
func TestVerifySchemaNamesAGenerationSequenceThatCachesNumbers(t *testing.T) {
	env, _ := migratedProjectionStore(t)
	ctx := testContext(t)
	if _, err := env.Pool.Exec(ctx, "ALTER SEQUENCE "+ProjectionGenerationSequence+" CACHE 20"); err != nil {
		t.Fatal(err)
	}
	problems := schemaProblems(t, VerifySchema(ctx, env.Pool, VerifyOptions{}))
	if len(problems) != 1 || !strings.Contains(problems[0], "sequence "+ProjectionGenerationSequence+" caches 20 numbers per session, want 1") {
		t.Errorf("problems = %q, want the sequence's cache named", problems)
	}
}

func TestVerifySchemaNamesATableWhosePersistenceChanged(t *testing.T) {
	env, _ := migratedProjectionStore(t)
	ctx := testContext(t)
	for _, stmt := range []string{
		"ALTER TABLE " + ProjectionDetailTable + " SET LOGGED",
		"ALTER TABLE " + LeaseTable + " SET UNLOGGED",
	} {
		if _, err := env.Pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	problems := schemaProblems(t, VerifySchema(ctx, env.Pool, VerifyOptions{}))
	want := []string{
		"table " + LeaseTable + " is UNLOGGED, want logged",
		"table " + ProjectionDetailTable + " is logged, want UNLOGGED",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems:\n got %q\nwant %q", problems, want)
	}
}
