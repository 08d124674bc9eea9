package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/testenv"
)

// TestMapError_TurnsRefusalsIntoCoreSentinels: values the tables' checks
// refuse become the area's invalid-input sentinel, and a missing dead
// letter outbox.ErrNotFound.
func TestMapError_TurnsRefusalsIntoCoreSentinels(t *testing.T) {
	_, db := bunEnv(t)
	ctx := testContext(t)
	_, err := db.NewRaw(`INSERT INTO baton_role_leases (role, holder, token, acquired_at, renewed_at, expires_at) VALUES ('', 'a', 1, now(), now(), now())`).Exec(ctx)
	if err := adapter.MapError(pgsql.AreaLease, "insert", err); !errors.Is(err, lease.ErrInvalidRole) {
		t.Errorf("an empty role refused by the table: %v; want lease.ErrInvalidRole", err)
	}
	_, err = db.NewRaw(`INSERT INTO baton_outbox (id, lane, payload) VALUES (gen_random_uuid(), ?, '{}')`, strings.Repeat("l", 129)).Exec(ctx)
	if err := adapter.MapError(pgsql.AreaOutbox, "insert", err); !errors.Is(err, outbox.ErrInvalidEntry) {
		t.Errorf("a long lane refused by the table: %v; want outbox.ErrInvalidEntry", err)
	}
	_, err = db.NewRaw(`INSERT INTO baton_outbox_state (key, value) VALUES ('k', convert_from('\xff'::bytea, 'UTF8'))`).Exec(ctx)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "22021" {
		t.Fatalf("an invalid UTF-8 state value: err = %v, want SQLSTATE 22021", err)
	}
	if err := adapter.MapError(pgsql.AreaSettle, "write state", err); !errors.Is(err, outbox.ErrInvalidSettlement) || errors.Is(err, outbox.ErrInvalidEntry) {
		t.Errorf("a state value refused in a settlement: %v; want outbox.ErrInvalidSettlement, not outbox.ErrInvalidEntry", err)
	}
	st := mustOutboxStore(t, db, OutboxStoreOptions{})
	if _, err := st.GetDead(ctx, outbox.NewID()); !errors.Is(err, outbox.ErrNotFound) {
		t.Errorf("GetDead of an unknown id: %v; want outbox.ErrNotFound", err)
	}
}

func TestEnqueue_InvalidEntryWritesNothingAndLeavesTheTransactionUsable(t *testing.T) {
	_, db := bunEnv(t)
	ctx := testContext(t)
	good := outbox.NewID()
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		for _, bad := range []struct {
			id      outbox.ID
			lane    string
			payload string
		}{{outbox.NilID, "lane", `{}`}, {outbox.NewID(), "", `{}`}, {outbox.NewID(), "lane", `{not json`}, {outbox.NewID(), "lane", `"\u0000"`}} {
			if err := Enqueue(ctx, tx, bad.id, bad.lane, []byte(bad.payload)); !errors.Is(err, outbox.ErrInvalidEntry) {
				t.Errorf("Enqueue(%v, %q, %s) = %v; want outbox.ErrInvalidEntry", bad.id, bad.lane, bad.payload, err)
			}
		}
		return Enqueue(ctx, tx, good, "lane", []byte(`{"ok": true}`))
	})
	if err != nil {
		t.Fatalf("the transaction after invalid enqueues: %v", err)
	}
	n, err := db.NewSelect().Model((*OutboxEntry)(nil)).Count(ctx)
	if err != nil || n != 1 {
		t.Fatalf("%d entries (%v); want only the valid one", n, err)
	}
}

func TestNewStores_RejectInvalidOptionsNamingTheField(t *testing.T) {
	db := offlineDB(t)
	for what, err := range map[string]error{
		"LeaseStoreOptions.Channel":     errOf(NewLeaseStore(context.Background(), db, LeaseStoreOptions{Channel: `a"b`})),
		"LeaseStoreOptions.Schema":      errOf(NewLeaseStore(context.Background(), db, LeaseStoreOptions{Schema: "pg_x"})),
		"OutboxStoreOptions.Schema":     errOf(NewOutboxStore(context.Background(), db, OutboxStoreOptions{Schema: strings.Repeat("s", 64)})),
		"ProjectionStoreOptions.Schema": errOf(NewProjectionStore(context.Background(), db, ProjectionStoreOptions{Schema: "a\x00"})),
		"WorkRowsOptions.Live":          errOf(NewWorkRows[int64, suiteRow](context.Background(), db, WorkRowsOptions{})),
		"WorkRowsOptions.Order[0]":      errOf(NewWorkRows[int64, suiteRow](context.Background(), db, WorkRowsOptions{Live: conformance.WorkRowsLive, Order: []workrow.Order{workrow.Asc("lock_id")}})),
		"WorkRowsOptions.IDColumn":      errOf(NewWorkRows[int64, suiteRow](context.Background(), db, WorkRowsOptions{Live: conformance.WorkRowsLive, IDColumn: "lock_id"})),
	} {
		if err == nil || !strings.Contains(err.Error(), what) {
			t.Errorf("%s: err = %v; want one naming the field", what, err)
		}
	}
	if _, err := NewWorkRows[int64, suiteRow](context.Background(), db, WorkRowsOptions{Live: workrow.IsNull("locked_until")}); err == nil {
		t.Error("a live filter on a lock column was accepted")
	}
}

func errOf[T any](_ T, err error) error { return err }

// TestWorkRows_ClaimWithBunExpressionsAndFinalizeWith: a model embedding
// LockColumns, claimed with a bun predicate, order and set; the rows come
// back stamped with the claim's lock, in the bun order; a finalize by
// another lock changes nothing, by the owner it completes the row.
func TestWorkRows_ClaimWithBunExpressionsAndFinalizeWith(t *testing.T) {
	env := testenv.Postgres(t)
	db := openBun(t, env)
	ctx := testContext(t)
	createSuiteTable(t, ctx, db)
	if err := insertSuiteRows(ctx, db, []conformance.WorkRow{{ID: 1, Seq: 30}, {ID: 2, Seq: 20}, {ID: 3, Seq: 10, Attempts: 9}, {ID: 4, Seq: 40}}); err != nil {
		t.Fatal(err)
	}
	rows, err := NewWorkRows[int64, suiteRow](context.Background(), db, suiteOptions())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	c := ClaimQuery{
		LockID: workrow.NewLockID(), Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 2,
		Where: func(q bun.QueryBuilder) bun.QueryBuilder { return q.Where("?TableAlias.attempts < ?", 5) },
		Order: func(q *bun.SelectQuery) *bun.SelectQuery { return q.OrderExpr("?TableAlias.seq DESC") },
		Set:   func(q *bun.UpdateQuery) *bun.UpdateQuery { return q.Set("attempts = ?TableAlias.attempts + 1") },
	}
	got, err := rows.ClaimWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != 4 || got[1].ID != 1 {
		t.Fatalf("ClaimWith took %+v; want rows 4 then 1 (seq descending, row 3 has no attempts left)", got)
	}
	for _, g := range got {
		if g.Row.Lock() != c.LockID || g.Row.Attempts != 1 || !g.Row.LockedUntil.Equal(c.LeaseUntil.Truncate(time.Microsecond)) {
			t.Errorf("claimed row %+v; want our lock, lease end and 1 attempt", g.Row)
		}
	}
	complete := func(q *bun.UpdateQuery) *bun.UpdateQuery { return q.Set("completed_at = ?", now) }
	if owned, err := rows.FinalizeWith(ctx, workrow.NewLockID(), 4, time.Time{}, complete); err != nil || owned {
		t.Fatalf("FinalizeWith by another lock = %v, %v; want false", owned, err)
	}
	if owned, err := rows.FinalizeWith(ctx, c.LockID, 4, time.Time{}, complete); err != nil || !owned {
		t.Fatalf("FinalizeWith by the owner = %v, %v; want true", owned, err)
	}
	var r suiteRow
	if err := db.NewSelect().Model(&r).Where("id = 4").Scan(ctx); err != nil {
		t.Fatal(err)
	}
	if r.CompletedAt == nil || !r.Lock().IsZero() || !r.LockedUntil.IsZero() {
		t.Fatalf("after FinalizeWith the row is %+v; want completed and unlocked", r)
	}
	for name, bad := range map[string]ClaimQuery{
		"no Where":   {LockID: c.LockID, Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 1},
		"zero lock":  {Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 1, Where: c.Where},
		"batch 0":    {LockID: c.LockID, Now: now, LeaseUntil: now.Add(time.Minute), Where: c.Where},
		"lease past": {LockID: c.LockID, Now: now, LeaseUntil: now, BatchSize: 1, Where: c.Where},
		"an Order that limits": {LockID: c.LockID, Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 1, Where: c.Where,
			Order: func(q *bun.SelectQuery) *bun.SelectQuery { return q.Order("seq").Limit(1) }},
		"a Set that filters": {LockID: c.LockID, Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 1, Where: c.Where,
			Set: func(q *bun.UpdateQuery) *bun.UpdateQuery { return q.Set("attempts = 0").Where("seq > 0") }},
	} {
		if _, err := rows.ClaimWith(ctx, bad); !errors.Is(err, workrow.ErrInvalidSpec) {
			t.Errorf("ClaimWith with %s: %v; want workrow.ErrInvalidSpec", name, err)
		}
	}
}

// TestLeaseStore_WatchReleasesOnPgxStdlibDriver: bun on pgx's database/sql
// driver hears releases too (through the driver's own connection).
func TestLeaseStore_WatchReleasesOnPgxStdlibDriver(t *testing.T) {
	env, _ := bunEnv(t)
	sqldb, err := sql.Open("pgx", env.URL)
	if err != nil {
		t.Fatal(err)
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	t.Cleanup(func() { _ = db.Close() })
	channel := "releases " + env.Schema
	st := mustLeaseStore(t, db, LeaseStoreOptions{Channel: channel})
	ctx := testContext(t)
	wctx, cancel := context.WithCancel(ctx)
	heard := make(chan string, 16)
	done := make(chan error, 1)
	go func() { done <- st.WatchReleases(wctx, func(role string) { heard <- role }) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchReleases = %v; want context.Canceled", err)
		}
	}()
	for deadline := time.Now().Add(5 * time.Second); ; {
		recs, err := st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "r"}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Release(ctx, "r", "a", recs[0].Token); err != nil {
			t.Fatal(err)
		}
		select {
		case role := <-heard:
			if role != "r" {
				t.Fatalf("heard %q", role)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no release heard within 5s on the pgx stdlib driver")
		}
	}
}

func TestLeaseStore_WatchReleasesOnATransactionIsUnsupported(t *testing.T) {
	_, db := bunEnv(t)
	ctx := testContext(t)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	err = mustLeaseStore(t, tx, LeaseStoreOptions{}).WatchReleases(ctx, func(string) {})
	if !errors.Is(err, ErrListenUnsupported) || !strings.HasPrefix(err.Error(), "baton/bunstore: ") {
		t.Fatalf("WatchReleases on a bun.Tx = %v; want ErrListenUnsupported, starting with baton/bunstore:", err)
	}
}

// TestWorkRows_ClaimWithKeepsAnOrInsideItsPredicate: a Where joined with
// WhereOr stays one predicate under the live filter, so a finished row
// the OR matches is not claimed.
func TestWorkRows_ClaimWithKeepsAnOrInsideItsPredicate(t *testing.T) {
	env := testenv.Postgres(t)
	db := openBun(t, env)
	ctx := testContext(t)
	createSuiteTable(t, ctx, db)
	done := time.Now()
	if err := insertSuiteRows(ctx, db, []conformance.WorkRow{{ID: 1, Seq: 10}, {ID: 2, Seq: 10, CompletedAt: &done}}); err != nil {
		t.Fatal(err)
	}
	rows, err := NewWorkRows[int64, suiteRow](ctx, db, suiteOptions())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	got, err := rows.ClaimWith(ctx, ClaimQuery{LockID: workrow.NewLockID(), Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 10,
		Where: func(q bun.QueryBuilder) bun.QueryBuilder { return q.Where("attempts < 0").WhereOr("seq = 10") }})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != 1 {
		t.Fatalf("ClaimWith took %+v; want row 1 only (row 2 is finished)", got)
	}
}
