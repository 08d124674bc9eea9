package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/testenv"
)

// suiteTable is the conformance suite's table: conformance.WorkRow's
// columns, the lock columns, fillfactor 90 so updates find room for HOT
// versions in the same page.
const suiteTable = `CREATE TABLE work_rows (
    id           bigint PRIMARY KEY,
    seq          bigint NOT NULL,
    attempts     integer NOT NULL DEFAULT 0,
    completed_at timestamptz,
    last_error   text,
    lock_id      uuid,
    locked_until timestamptz
) WITH (fillfactor = 90)`

func suiteIndex() ClaimIndex {
	return ClaimIndex{Table: "work_rows", Order: conformance.WorkRowsOrder, Live: conformance.WorkRowsLive}
}

// createSuiteTable creates the suite's table and claim index in the test's
// schema.
func createSuiteTable(t testing.TB, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	ddl, err := suiteIndex().DDL()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{suiteTable, ddl} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

func suiteStore(t testing.TB, pool *pgxpool.Pool) *WorkRows[int64, conformance.WorkRow] {
	t.Helper()
	return suiteStoreWith(t, pool, func(*WorkRowsOptions[conformance.WorkRow]) {})
}

// lockFreeCandidates is the suite store's options changed to claim with
// LockFreeCandidates.
func lockFreeCandidates(o *WorkRowsOptions[conformance.WorkRow]) { o.LockFreeCandidates = true }

// suiteStoreWith is suiteStore with its options changed by change.
func suiteStoreWith(t testing.TB, pool *pgxpool.Pool, change func(*WorkRowsOptions[conformance.WorkRow])) *WorkRows[int64, conformance.WorkRow] {
	t.Helper()
	opts := WorkRowsOptions[conformance.WorkRow]{
		Table: "work_rows", Live: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder,
	}
	change(&opts)
	st, err := NewWorkRows[int64](pool, opts)
	if err != nil {
		t.Fatalf("NewWorkRows: %v", err)
	}
	return st
}

func insertSuiteRows(ctx context.Context, pool pgxQuerier, rows []conformance.WorkRow) error {
	ids, seqs, attempts := make([]int64, len(rows)), make([]int64, len(rows)), make([]int32, len(rows))
	done, errs := make([]*time.Time, len(rows)), make([]*string, len(rows))
	for i, r := range rows {
		ids[i], seqs[i], attempts[i], done[i], errs[i] = r.ID, r.Seq, int32(r.Attempts), r.CompletedAt, r.LastError
	}
	_, err := pool.Exec(ctx, `INSERT INTO work_rows (id, seq, attempts, completed_at, last_error)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::timestamptz[], $5::text[])`, ids, seqs, attempts, done, errs)
	return err
}

func readSuiteRows(ctx context.Context, pool *pgxpool.Pool) ([]conformance.WorkRowState, error) {
	rows, err := pool.Query(ctx, `SELECT id, seq, attempts, completed_at, last_error, lock_id, locked_until FROM work_rows ORDER BY id`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (conformance.WorkRowState, error) {
		var r conformance.WorkRowState
		var lock pgtype.UUID
		var until pgtype.Timestamptz
		err := row.Scan(&r.ID, &r.Seq, &r.Attempts, &r.CompletedAt, &r.LastError, &lock, &until)
		if lock.Valid {
			r.LockID = lock.Bytes
		}
		if until.Valid {
			r.LockedUntil = until.Time
		}
		return r, err
	})
}

// claimIndexed reads the ids the claim index holds, through the index: the
// other paths are disabled, and the plan is checked to use it.
func claimIndexed(ctx context.Context, pool *pgxpool.Pool) ([]int64, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(ctx)
	for _, q := range []string{"SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return nil, err
		}
	}
	const q = `SELECT id FROM work_rows WHERE completed_at IS NULL ORDER BY seq, id`
	var plan []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q).Scan(&plan); err != nil {
		return nil, err
	}
	if used := planIndexes(plan); !slices.Contains(used, "work_rows_claim") {
		return nil, fmt.Errorf("reading the claim index: the plan uses %v", used)
	}
	rows, err := tx.Query(ctx, q)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

func TestWorkRows_Conformance(t *testing.T) {
	runWorkRowsConformance(t, func(*WorkRowsOptions[conformance.WorkRow]) {})
}

// With LockFreeCandidates the candidate read locks nothing, so two claims
// can pick the same row and only the UPDATE's re-check of the whole
// predicate keeps a row to one claim; the deadlocks such claims meet
// against finalizes are sent again.
func TestWorkRows_ConformanceWithLockFreeCandidates(t *testing.T) {
	runWorkRowsConformance(t, lockFreeCandidates)
}

func runWorkRowsConformance(t *testing.T, change func(*WorkRowsOptions[conformance.WorkRow])) {
	conformance.RunWorkRows(t, func(t *testing.T) conformance.WorkRowsHarness {
		env := testenv.Postgres(t)
		createSuiteTable(t, testContext(t), env.Pool)
		second := newPool(t, env, nil)
		return conformance.WorkRowsHarness{
			Store:  suiteStoreWith(t, env.Pool, change),
			Second: suiteStoreWith(t, second, change),
			Insert: func(ctx context.Context, rows []conformance.WorkRow) error {
				return insertSuiteRows(ctx, env.Pool, rows)
			},
			Read: func(ctx context.Context) ([]conformance.WorkRowState, error) {
				return readSuiteRows(ctx, env.Pool)
			},
			ClaimIndexed: func(ctx context.Context) ([]int64, error) {
				return claimIndexed(ctx, env.Pool)
			},
			Signalled: func(ctx context.Context, rows []conformance.WorkRow) (conformance.WorkRowsTx, error) {
				return signalledInsert(ctx, env.Pool, rows)
			},
			Unmigrated: func(t *testing.T) conformance.WorkRowsHarness {
				return conformance.WorkRowsHarness{Store: suiteStoreWith(t, testenv.Postgres(t).Pool, change)}
			},
			SchemaMismatch: ErrSchemaMismatch,
		}
	}, conformance.WorkRowsFeatures{})
}

// signalledInsert inserts rows in a transaction of pool that signals the
// suite's table with SignalWorkRows, and leaves it open.
func signalledInsert(ctx context.Context, pool *pgxpool.Pool, rows []conformance.WorkRow) (conformance.WorkRowsTx, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if err := insertSuiteRows(ctx, tx, rows); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	if err := SignalWorkRows(ctx, tx, "", "work_rows"); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return tx, nil
}

// suiteEnv is a test schema with the suite's table, n fresh rows and a
// store over it.
func suiteEnv(t *testing.T, n int) (*testenv.PostgresEnv, *WorkRows[int64, conformance.WorkRow]) {
	t.Helper()
	env := testenv.Postgres(t)
	ctx := testContext(t)
	createSuiteTable(t, ctx, env.Pool)
	rows := make([]conformance.WorkRow, n)
	for i := range rows {
		rows[i] = conformance.WorkRow{ID: int64(i + 1), Seq: int64(i + 1)}
	}
	if err := insertSuiteRows(ctx, env.Pool, rows); err != nil {
		t.Fatal(err)
	}
	return env, suiteStore(t, env.Pool)
}

func suiteSpec(now time.Time, batch int) workrow.ClaimSpec {
	return workrow.ClaimSpec{
		LockID: workrow.NewLockID(), Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: batch,
		Eligible: workrow.IsNull("completed_at"), OnClaim: []workrow.Set{workrow.Add("attempts", 1)},
	}
}

func TestWorkRows_ClaimSkipsARowAnotherStatementIsWriting(t *testing.T) {
	env, st := suiteEnv(t, 3)
	ctx := testContext(t)
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE work_rows SET last_error = 'busy' WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	got, err := st.Claim(ctx, suiteSpec(time.Now(), 10))
	if err != nil {
		t.Fatal(err)
	}
	if ids := claimedIDs(got); !slices.Equal(ids, []int64{2, 3}) {
		t.Fatalf("claimed %v; want [2 3] at once: a row being written is skipped, not waited for", ids)
	}
}

func claimedIDs[R any](got []workrow.Claimed[int64, R]) []int64 {
	ids := make([]int64, len(got))
	for i, c := range got {
		ids[i] = c.ID
	}
	return ids
}

// TestWorkRows_ClaimRechecksThePredicateOnARowChangedWhileItWaited uses
// LockFreeCandidates, where the candidate read does not skip the row: the
// UPDATE waits for the writer, then re-checks the whole predicate on the
// row as committed (live, eligible, and its lock free or expired) and
// leaves it.
func TestWorkRows_ClaimRechecksThePredicateOnARowChangedWhileItWaited(t *testing.T) {
	for _, c := range []struct {
		name, change string
	}{
		{"completed", `UPDATE work_rows SET completed_at = now() WHERE id = 1`},
		{"out of attempts", `UPDATE work_rows SET attempts = 5 WHERE id = 1`},
		{"claimed by another", `UPDATE work_rows SET lock_id = gen_random_uuid(), locked_until = now() + interval '1 hour' WHERE id = 1`},
	} {
		t.Run(c.name, func(t *testing.T) {
			env, _ := suiteEnv(t, 3)
			ctx := testContext(t)
			st := suiteStoreWith(t, env.Pool, lockFreeCandidates)

			spec := suiteSpec(time.Now(), 10)
			spec.Eligible = workrow.And(workrow.IsNull("completed_at"), workrow.Lt("attempts", 5))
			ids, err := claimAroundAWriter(t, ctx, env.Pool, st, spec, c.change)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids, []int64{2, 3}) {
				t.Fatalf("claimed %v; want [2 3]: the update must re-check the predicate on the committed row", ids)
			}
			if s := st.Stats(); s.Claims != 1 || s.Selected != 3 || s.Stamped != 2 || s.ShortClaims != 1 {
				t.Fatalf("stats %+v; want one claim that selected 3 and stamped 2", s)
			}
		})
	}
}

// A claim whose every candidate was taken while it waited tries again
// rather than report an empty queue while due rows remain: one more
// statement, which finds row 2.
func TestWorkRows_AClaimThatLostEveryCandidateTriesAgain(t *testing.T) {
	env, _ := suiteEnv(t, 2)
	ctx := testContext(t)
	st := suiteStoreWith(t, env.Pool, lockFreeCandidates)
	ids, err := claimAroundAWriter(t, ctx, env.Pool, st, suiteSpec(time.Now(), 1), `UPDATE work_rows SET completed_at = now() WHERE id = 1`)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids, []int64{2}) {
		t.Fatalf("claimed %v; want [2]: a claim that stamped none of the rows it selected must try again", ids)
	}
	if s := st.Stats(); s.Claims != 2 || s.Stamped != 1 {
		t.Fatalf("stats %+v; want two statements, one row stamped", s)
	}
}

// A finalize PostgreSQL picks as a deadlock's victim was rolled back whole,
// so the store sends it again; giving up would leave the rows to their
// lease's end and their work to be done again. Here another transaction
// holds row 2 while the finalize holds row 1 and waits for it, then asks
// for row 1: the finalize, which waited first, is the one the deadlock
// check ends.
func TestWorkRows_AFinalizeRolledBackByADeadlockIsSentAgain(t *testing.T) {
	env, st := suiteEnv(t, 2)
	ctx := testContext(t)
	spec := suiteSpec(time.Now(), 2)
	if got, err := st.Claim(ctx, spec); err != nil || len(got) != 2 {
		t.Fatalf("Claim = %d rows, %v", len(got), err)
	}
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `UPDATE work_rows SET last_error = 'held' WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		owned []bool
		err   error
	}
	finalized := make(chan result, 1)
	now := time.Now()
	go func() {
		owned, err := st.FinalizeMany(ctx, spec.LockID, []workrow.Final[int64]{
			{ID: 1, Set: []workrow.Set{workrow.Assign("completed_at", now)}},
			{ID: 2, Set: []workrow.Set{workrow.Assign("completed_at", now)}},
		})
		finalized <- result{owned, err}
	}()
	waitForLockWait(t, ctx, env.Pool, `UPDATE "work_rows"`, "the finalize")
	// Blocks on row 1 until the deadlock check rolls the finalize back.
	if _, err := tx.Exec(ctx, `UPDATE work_rows SET last_error = 'held' WHERE id = 1`); err != nil {
		t.Fatalf("the other transaction was the deadlock's victim, not the finalize: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-finalized
	if r.err != nil {
		t.Fatalf("FinalizeMany = %v; a statement rolled back by a deadlock must be sent again", r.err)
	}
	if !slices.Equal(r.owned, []bool{true, true}) {
		t.Fatalf("FinalizeMany owned %v; want both rows", r.owned)
	}
	if s := st.Stats(); s.Conflicts != 1 {
		t.Fatalf("stats %+v; want the one deadlock counted as a conflict", s)
	}
	for _, row := range mustReadRows(t, ctx, env.Pool) {
		if row.CompletedAt == nil || row.LastError != nil || !row.LockID.IsZero() {
			t.Fatalf("row %d: %+v; want completed, unlocked, without the rolled-back write", row.ID, row)
		}
	}
}

// claimAroundAWriter runs change in a transaction of pool and keeps it
// open, so that a claim with spec, whose snapshot still sees the rows as
// they were, waits for it on a changed row; it then commits and returns
// what the claim took.
func claimAroundAWriter(t *testing.T, ctx context.Context, pool *pgxpool.Pool, st *WorkRows[int64, conformance.WorkRow], spec workrow.ClaimSpec, change string) ([]int64, error) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, change); err != nil {
		t.Fatal(err)
	}
	type result struct {
		ids []int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := st.Claim(ctx, spec)
		done <- result{claimedIDs(got), err}
	}()
	waitForLockWait(t, ctx, pool, "WITH baton_candidate", "the claim")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	return r.ids, r.err
}

// waitForLockWait waits until a session of this database running a
// statement that starts with prefix waits for a lock; what names it.
func waitForLockWait(t *testing.T, ctx context.Context, pool *pgxpool.Pool, prefix, what string) {
	t.Helper()
	eventually(t, 30*time.Second, what+" never waited for the locked row", func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock' AND starts_with(query, $1))`, prefix).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		return waiting
	})
}

func TestWorkRows_FinalizeManyIsOneStatementForAMixedBatch(t *testing.T) {
	env, _ := suiteEnv(t, 50)
	ctx := testContext(t)
	counter := &queryCounter{}
	st := suiteStore(t, newPool(t, env, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }))
	now := time.Now()
	sp := suiteSpec(now, 50)
	if got, err := st.Claim(ctx, sp); err != nil || len(got) != 50 {
		t.Fatalf("Claim = %d rows, %v", len(got), err)
	}
	finals := make([]workrow.Final[int64], 50)
	for i := range finals {
		id := int64(i + 1)
		switch i % 3 {
		case 0:
			finals[i] = workrow.Final[int64]{ID: id, Set: []workrow.Set{workrow.Assign("completed_at", now), workrow.Assign("last_error", nil)}}
		case 1:
			finals[i] = workrow.Final[int64]{ID: id, Set: []workrow.Set{workrow.Assign("last_error", fmt.Sprint("e", id))}, VisibleAfter: now.Add(time.Hour)}
		default:
			finals[i] = workrow.Final[int64]{ID: id, Set: []workrow.Set{workrow.Add("attempts", 5), workrow.Assign("last_error", workrow.ColumnRef("last_error"))}}
		}
	}
	before := counter.n.Load()
	owned, err := st.FinalizeMany(ctx, sp.LockID, finals)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.n.Load() - before; n != 1 {
		t.Fatalf("FinalizeMany of 50 rows sent %d statements; want 1", n)
	}
	if slices.Contains(owned, false) {
		t.Fatalf("owned = %v", owned)
	}
	rows, err := readSuiteRows(ctx, env.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		var ok bool
		switch i % 3 {
		case 0:
			ok = r.CompletedAt != nil && r.LastError == nil && r.LockedUntil.IsZero() && r.Attempts == 1
		case 1:
			ok = r.CompletedAt == nil && r.LastError != nil && *r.LastError == fmt.Sprint("e", r.ID) && !r.LockedUntil.IsZero()
		default:
			ok = r.CompletedAt == nil && r.LastError == nil && r.Attempts == 6 && r.LockedUntil.IsZero()
		}
		if !ok || !r.LockID.IsZero() {
			t.Fatalf("row %d after FinalizeMany: %+v (lock %v, until %v)", r.ID, r.WorkRow, r.LockID, r.LockedUntil)
		}
	}
}

func TestWorkRows_SingleRowFinalizeRenewAndReleaseAreGuardedByTheLockID(t *testing.T) {
	env, st := suiteEnv(t, 2)
	ctx := testContext(t)
	now := time.Now()
	sp := suiteSpec(now, 2)
	if _, err := st.Claim(ctx, sp); err != nil {
		t.Fatal(err)
	}
	other := workrow.NewLockID()
	for name, call := range map[string]func(workrow.LockID) (bool, error){
		"Finalize": func(l workrow.LockID) (bool, error) {
			return st.Finalize(ctx, l, workrow.Final[int64]{ID: 1, Set: []workrow.Set{workrow.Assign("completed_at", now)}})
		},
		"Renew":   func(l workrow.LockID) (bool, error) { return st.Renew(ctx, l, 2, now.Add(time.Hour)) },
		"Release": func(l workrow.LockID) (bool, error) { return st.Release(ctx, l, 2) },
	} {
		if owned, err := call(other); err != nil || owned {
			t.Fatalf("%s by another lock = %v, %v; want false", name, owned, err)
		}
	}
	if owned, err := st.Renew(ctx, sp.LockID, 2, now.Add(time.Hour)); err != nil || !owned {
		t.Fatalf("Renew by the owner = %v, %v", owned, err)
	}
	if owned, err := st.Finalize(ctx, sp.LockID, workrow.Final[int64]{ID: 1, Set: []workrow.Set{workrow.Assign("completed_at", now)}, VisibleAfter: now.Add(time.Minute)}); err != nil || !owned {
		t.Fatalf("Finalize by the owner = %v, %v", owned, err)
	}
	if owned, err := st.Release(ctx, sp.LockID, 2); err != nil || !owned {
		t.Fatalf("Release by the owner = %v, %v", owned, err)
	}
	rows, err := readSuiteRows(ctx, env.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if r := rows[0]; r.CompletedAt == nil || !r.LockID.IsZero() || !r.LockedUntil.Equal(now.Add(time.Minute).Truncate(time.Microsecond)) {
		t.Fatalf("finalized row: %+v lock %v until %v", r.WorkRow, r.LockID, r.LockedUntil)
	}
	if r := rows[1]; !r.LockID.IsZero() || !r.LockedUntil.IsZero() {
		t.Fatalf("released row: lock %v until %v", r.LockID, r.LockedUntil)
	}
}

func TestWorkRows_RefusesSetsOnTheIDAndLockColumns(t *testing.T) {
	_, st := suiteEnv(t, 1)
	ctx := testContext(t)
	sp := suiteSpec(time.Now(), 1)
	sp.OnClaim = []workrow.Set{workrow.Assign("locked_until", nil)}
	if _, err := st.Claim(ctx, sp); !errors.Is(err, workrow.ErrInvalidSpec) || !strings.Contains(err.Error(), "which the store manages") {
		t.Fatalf("Claim setting locked_until = %v; want ErrInvalidSpec", err)
	}
	lock := workrow.NewLockID()
	for _, col := range []string{"id", "lock_id", "locked_until"} {
		_, err := st.FinalizeMany(ctx, lock, []workrow.Final[int64]{{ID: 1, Set: []workrow.Set{workrow.Assign(col, nil)}}})
		if !errors.Is(err, workrow.ErrInvalidSpec) {
			t.Fatalf("FinalizeMany setting %s = %v; want ErrInvalidSpec", col, err)
		}
	}
}

func TestWorkRows_ATableOfTheWrongShapeWrapsErrSchemaMismatch(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	if _, err := env.Pool.Exec(ctx, `
CREATE TABLE text_locks (id bigint PRIMARY KEY, done boolean, lock_id text, locked_until timestamptz);
CREATE TABLE local_time_locks (id bigint PRIMARY KEY, done boolean, lock_id uuid, locked_until timestamp);
CREATE TABLE no_lease_column (id bigint PRIMARY KEY, done boolean, lock_id uuid)`); err != nil {
		t.Fatal(err)
	}
	type row struct {
		ID   int64 `db:"id"`
		Done *bool `db:"done"`
	}
	// A missing table is the suite's (MissingTableIsASchemaMismatch); a
	// table of the wrong shape is this adapter's to detect.
	for table, want := range map[string]string{
		"text_locks": `column "lock_id" is text; it must be a nullable uuid`,
		// Compared with now() through the session's TimeZone, a lease in
		// local time would end early or late by the zone's offset.
		"local_time_locks": `column "locked_until" is timestamp without time zone; it must be a nullable timestamp with time zone`,
		"no_lease_column":  `no column "locked_until" (WorkRowsOptions.LockedUntilColumn)`,
	} {
		st, err := NewWorkRows[int64](env.Pool, WorkRowsOptions[row]{Table: table, Live: workrow.IsNull("done")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = st.Claim(ctx, suiteSpec(time.Now(), 1))
		if !errors.Is(err, ErrSchemaMismatch) || !strings.Contains(err.Error(), want) {
			t.Errorf("table %s: Claim = %v; want ErrSchemaMismatch saying %q", table, err, want)
		}
	}
}

func TestNewWorkRows_RejectsInvalidOptionsNamingTheField(t *testing.T) {
	env := testenv.Postgres(t)
	live := workrow.IsNull("completed_at")
	for want, opts := range map[string]WorkRowsOptions[conformance.WorkRow]{
		"WorkRowsOptions.Table":                  {Live: live},
		"WorkRowsOptions.Live is empty":          {Table: "t"},
		"must be three different columns":        {Table: "t", Live: live, LockIDColumn: "locked_until"},
		"Live mentions the lock column":          {Table: "t", Live: workrow.IsNull("locked_until")},
		"WorkRowsOptions.Order[0] is \"id\"":     {Table: "t", Live: live, Order: []workrow.Order{workrow.Asc("id")}},
		"Now cannot be part of an index":         {Table: "t", Live: workrow.Gt("expires_at", workrow.Now)},
		"cannot be written as a literal":         {Table: "t", Live: workrow.Eq("kind", []int{1})},
		"WorkRowsOptions.Schema":                 {Schema: "pg_x", Table: "t", Live: live},
		"WorkRowsOptions.Columns[0] \"\"":        {Table: "t", Live: live, Columns: []string{""}},
		"WorkRowsOptions.Live or Order: baton/w": {Table: "t", Live: workrow.And()},
	} {
		if _, err := NewWorkRows[int64](env.Pool, opts); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewWorkRows(%+v) = %v; want an error mentioning %q", opts, err, want)
		}
	}
	if _, err := NewWorkRows[int64, conformance.WorkRow](nil, WorkRowsOptions[conformance.WorkRow]{Table: "t", Live: live}); err == nil {
		t.Error("a nil pool was accepted")
	}
}

func TestClaimIndex_DDLQuotesIdentifiersAndWritesTheFilterAsLiterals(t *testing.T) {
	ix := ClaimIndex{
		Schema: "app", Table: "Deliveries", Order: []workrow.Order{workrow.Desc("priority"), workrow.Asc("created_at")},
		Live: workrow.And(workrow.IsNull("sent_at"), workrow.Ne("state", "it's \\ dead"), workrow.Eq("archived", false)),
	}
	got, err := ix.DDL()
	if err != nil {
		t.Fatal(err)
	}
	want := `CREATE INDEX IF NOT EXISTS "Deliveries_claim" ON "app"."Deliveries" ("priority" DESC, "created_at", "id") ` +
		`WHERE (("sent_at" IS NULL) AND ("state" <> E'it''s \\ dead') AND ("archived" = false))`
	if got != want {
		t.Fatalf("DDL:\n got %s\nwant %s", got, want)
	}
	ix.Concurrently, ix.Name = true, "d_claim"
	if got, _ := ix.DDL(); !strings.HasPrefix(got, `CREATE INDEX CONCURRENTLY IF NOT EXISTS "d_claim"`) {
		t.Fatalf("DDL with Concurrently: %s", got)
	}
	if _, err := (ClaimIndex{Table: "t"}).DDL(); err == nil {
		t.Fatal("a claim index without a live filter was accepted")
	}
}

func TestClaimIndex_CheckFindsTheIndexAndRefusesIndexesOnLockColumns(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	if _, err := env.Pool.Exec(ctx, suiteTable); err != nil {
		t.Fatal(err)
	}
	ix := suiteIndex()
	err := ix.Check(ctx, env.Pool)
	if !errors.Is(err, ErrClaimIndex) || !strings.Contains(err.Error(), `CREATE INDEX IF NOT EXISTS "work_rows_claim"`) {
		t.Fatalf("Check without the index = %v; want ErrClaimIndex naming the DDL", err)
	}
	// Right keys, but over every row: not a claim index.
	if _, err := env.Pool.Exec(ctx, `CREATE INDEX full_seq ON work_rows (seq, id)`); err != nil {
		t.Fatal(err)
	}
	if err := ix.Check(ctx, env.Pool); !errors.Is(err, ErrClaimIndex) {
		t.Fatalf("Check with a non-partial index = %v; want ErrClaimIndex", err)
	}
	ddl, _ := ix.DDL()
	if _, err := env.Pool.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	if err := ix.Check(ctx, env.Pool); err != nil {
		t.Fatalf("Check with the index: %v", err)
	}
	st := suiteStore(t, env.Pool)
	if err := st.Check(ctx); err != nil {
		t.Fatalf("WorkRows.Check: %v", err)
	}
	for _, bad := range []string{
		`CREATE INDEX by_lock ON work_rows (lock_id)`,
		`CREATE INDEX live_unlocked ON work_rows (seq) WHERE locked_until IS NULL`,
		`CREATE INDEX lock_expr ON work_rows ((lock_id IS NULL))`,
	} {
		if _, err := env.Pool.Exec(ctx, bad); err != nil {
			t.Fatal(err)
		}
		err := ix.Check(ctx, env.Pool)
		name := strings.Fields(bad)[2]
		if !errors.Is(err, ErrClaimIndex) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), "HOT") {
			t.Fatalf("Check with %s = %v; want ErrClaimIndex naming %s and HOT updates", name, err, name)
		}
		if _, err := env.Pool.Exec(ctx, "DROP INDEX "+name); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWorkRows_DefaultColumnsFollowTheRowType checks that a row type with
// only some of the table's columns, untagged field names included, reads
// just those.
func TestWorkRows_DefaultColumnsFollowTheRowType(t *testing.T) {
	env, _ := suiteEnv(t, 2)
	ctx := testContext(t)
	type slim struct {
		ID       int64
		Attempts int
		Note     string `db:"-"`
	}
	st, err := NewWorkRows[int64](env.Pool, WorkRowsOptions[slim]{Table: "work_rows", Live: conformance.WorkRowsLive})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.Claim(ctx, suiteSpec(time.Now(), 5))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Row != (slim{ID: 1, Attempts: 1}) || got[1].ID != 2 {
		t.Fatalf("claimed %+v", got)
	}
}

func TestWorkRows_ConcurrentClaimsRetryRatherThanReportAnEmptyQueue(t *testing.T) {
	env, _ := suiteEnv(t, 2000)
	ctx := testContext(t)
	stores := []*WorkRows[int64, conformance.WorkRow]{suiteStore(t, env.Pool), suiteStore(t, newPool(t, env, nil))}
	var wg sync.WaitGroup
	empties := make([]int, 8)
	for g := range 8 {
		wg.Go(func() {
			for {
				got, err := stores[g%2].Claim(ctx, suiteSpec(time.Now(), 10))
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					empties[g]++
					return
				}
			}
		})
	}
	wg.Wait()
	var n int
	if err := env.Pool.QueryRow(ctx, `SELECT count(*) FROM work_rows WHERE lock_id IS NULL`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows left unclaimed although every claimer stopped only at an empty claim", n)
	}
	var s WorkRowsStats
	for _, st := range stores {
		x := st.Stats()
		s.Claims, s.Selected, s.Stamped, s.ShortClaims = s.Claims+x.Claims, s.Selected+x.Selected, s.Stamped+x.Stamped, s.ShortClaims+x.ShortClaims
	}
	t.Logf("8 claimers over 2000 rows: %d claim statements, %d selected, %d stamped, %d short", s.Claims, s.Selected, s.Stamped, s.ShortClaims)
	if s.Stamped != 2000 {
		t.Fatalf("stamped %d rows in all; want 2000", s.Stamped)
	}
}

func mustReadRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool) []conformance.WorkRowState {
	t.Helper()
	rows, err := readSuiteRows(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
