package pgxstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

func mustOutboxStore(t testing.TB, pool *pgxpool.Pool, opts OutboxStoreOptions) *OutboxStore {
	t.Helper()
	st, err := NewOutboxStore(pool, opts)
	if err != nil {
		t.Fatalf("NewOutboxStore: %v", err)
	}
	return st
}

// enqueueFunc is Enqueue or OutboxStore.Enqueue.
type enqueueFunc func(ctx context.Context, tx pgx.Tx, id outbox.ID, lane string, payload []byte) error

// pgxOutboxTx is a producer transaction of the conformance suite: a pgx
// transaction with Enqueue on it, as an application would write it.
type pgxOutboxTx struct {
	tx      pgx.Tx
	enqueue enqueueFunc
}

func (p pgxOutboxTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	return p.enqueue(ctx, p.tx, id, lane, payload)
}
func (p pgxOutboxTx) Commit(ctx context.Context) error   { return p.tx.Commit(ctx) }
func (p pgxOutboxTx) Rollback(ctx context.Context) error { return p.tx.Rollback(ctx) }

func pgxOutboxProducer(pool *pgxpool.Pool, enqueue enqueueFunc) conformance.OutboxProducer {
	return conformance.OutboxProducerFunc(func(ctx context.Context) (conformance.OutboxTx, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return pgxOutboxTx{tx: tx, enqueue: enqueue}, nil
	})
}

func TestOutboxStore_Conformance(t *testing.T) {
	conformance.RunOutboxStore(t, func(t *testing.T) conformance.OutboxHarness {
		env := testenv.Postgres(t)
		mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
		st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
		return conformance.OutboxHarness{
			Store:      st,
			Producer:   pgxOutboxProducer(env.Pool, Enqueue),
			HoldSettle: holdSettle(st, env.Pool),
			Unmigrated: func(t *testing.T) conformance.OutboxHarness {
				bare := testenv.Postgres(t)
				return conformance.OutboxHarness{
					Store:    mustOutboxStore(t, bare.Pool, OutboxStoreOptions{}),
					Producer: pgxOutboxProducer(bare.Pool, Enqueue),
				}
			},
			SchemaMismatch: ErrSchemaMismatch,
		}
	}, conformance.OutboxFeatures{})
}

// holdSettle runs the store's own settlement up to its commit on a
// connection of its own, and reports producers waiting on that backend.
func holdSettle(st *OutboxStore, pool *pgxpool.Pool) func(context.Context, outbox.Settlement) (conformance.HeldSettlement, error) {
	return func(ctx context.Context, s outbox.Settlement) (conformance.HeldSettlement, error) {
		tx, err := newPoolDB(pool).Begin(ctx)
		if err != nil {
			return nil, err
		}
		h := &heldSettlement{pool: pool, tx: tx}
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&h.pid); err != nil {
			h.Rollback(ctx)
			return nil, err
		}
		if err := st.SettleIn(ctx, tx, s); err != nil {
			h.Rollback(ctx)
			return nil, err
		}
		return h, nil
	}
}

type heldSettlement struct {
	pool *pgxpool.Pool
	tx   pgsql.Tx
	pid  uint32
}

func (h *heldSettlement) Blocking(ctx context.Context) (bool, error) {
	var blocking bool
	err := h.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)))", h.pid).Scan(&blocking)
	return blocking, err
}

func (h *heldSettlement) Commit(ctx context.Context) error   { return h.tx.Commit(ctx) }
func (h *heldSettlement) Rollback(ctx context.Context) error { return h.tx.Rollback(ctx) }

// awaitOutbox scans from after until at least n entries are visible (the
// horizon is cluster-wide: another test's open transaction holds it back
// for a moment), or fails after 10s.
func awaitOutbox(t *testing.T, ctx context.Context, st *OutboxStore, after outbox.Cursor, n int) []outbox.Entry {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := st.Scan(ctx, after, 1000)
		if err != nil {
			t.Fatalf("Scan: %v", err)
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries visible to Scan after 10s, want %d", len(got), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func countRows(t *testing.T, ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

func TestEnqueue_InvalidEntryWritesNothingAndLeavesTheTransactionUsable(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	valid := []byte(`{"n": 1}`)
	for _, tc := range []struct {
		name    string
		id      outbox.ID
		lane    string
		payload []byte
	}{
		{"nil id", outbox.NilID, "l", valid},
		{"empty lane", outbox.NewID(), "", valid},
		{"lane of 129 bytes", outbox.NewID(), strings.Repeat("é", 64) + "x", valid},
		{"lane not UTF-8", outbox.NewID(), "a\xffb", valid},
		{"empty payload", outbox.NewID(), "l", nil},
		{"payload not JSON", outbox.NewID(), "l", []byte(`{"n": 1`)},
		{"payload with \\u0000", outbox.NewID(), "l", []byte(`{"s": "\u0000"}`)},
	} {
		if err := Enqueue(ctx, tx, tc.id, tc.lane, tc.payload); !errors.Is(err, outbox.ErrInvalidEntry) {
			t.Errorf("Enqueue with %s: err = %v, want one wrapping outbox.ErrInvalidEntry", tc.name, err)
		}
	}
	// Nothing reached the server, so the transaction was not aborted: it
	// still takes a valid entry and commits.
	id := outbox.NewID()
	if err := Enqueue(ctx, tx, id, strings.Repeat("é", 64), valid); err != nil {
		t.Fatalf("Enqueue of a valid entry after the refused ones: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	var got outbox.ID
	if err := env.Pool.QueryRow(ctx, "SELECT id FROM baton_outbox").Scan((*[16]byte)(&got)); err != nil || got != id {
		t.Fatalf("the outbox holds %s (%v), want only %s", got, err, id)
	}
	if err := Enqueue(ctx, nil, outbox.NewID(), "l", valid); err == nil || !strings.Contains(err.Error(), "transaction is nil") {
		t.Errorf("Enqueue with a nil transaction: err = %v", err)
	}
}

func TestEnqueue_EntryCarriesTheXIDOfTheTransactionsFirstWrite(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
	if _, err := env.Pool.Exec(ctx, "CREATE TABLE profiles (id int PRIMARY KEY, name text)"); err != nil {
		t.Fatal(err)
	}
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var before *string
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned()::text").Scan(&before); err != nil {
		t.Fatal(err)
	}
	if before != nil {
		t.Fatalf("a transaction that has not written has xid %s; PostgreSQL assigns it at the first write", *before)
	}
	var xid uint64
	if err := tx.QueryRow(ctx, "INSERT INTO profiles VALUES (1, 'a') RETURNING pg_current_xact_id()").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	a, b := outbox.NewID(), outbox.NewID()
	for _, id := range []outbox.ID{a, b} {
		if err := Enqueue(ctx, tx, id, "profiles", []byte(`{"id": 1}`)); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := awaitOutbox(t, ctx, st, outbox.Cursor{}, 2)
	if len(got) != 2 || got[0].XID != xid || got[1].XID != xid {
		t.Fatalf("entries %+v, want two with the transaction's xid %d", got, xid)
	}
	if want := slices.SortedFunc(slices.Values([]outbox.ID{a, b}), outbox.ID.Compare); got[0].ID != want[0] || got[1].ID != want[1] {
		t.Errorf("entries of one transaction in order %s, %s; want id order", got[0].ID, got[1].ID)
	}
}

// TestEnqueue_RowLockTakesTheXIDWhenGrantedAnUpdateBeforeWaiting checks the
// server behaviour the order advice in Enqueue's documentation rests on:
// a transaction waiting in SELECT ... FOR UPDATE has no xid yet (it takes
// one once the lock is granted, so after the holder's), while one waiting
// in an UPDATE of the same row already has its xid; so an UPDATE queued
// behind a SELECT ... FOR UPDATE ends up with the smaller xid although it
// changes the row after it.
func TestEnqueue_RowLockTakesTheXIDWhenGrantedAnUpdateBeforeWaiting(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	if _, err := env.Pool.Exec(ctx, "CREATE TABLE profiles (id int PRIMARY KEY, name text); INSERT INTO profiles VALUES (1, 'a')"); err != nil {
		t.Fatal(err)
	}
	pool := newPool(t, env, func(c *pgxpool.Config) { c.MaxConns = 4 })
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx))
	if _, err := holder.Exec(ctx, "UPDATE profiles SET name = 'b' WHERE id = 1"); err != nil {
		t.Fatal(err)
	}

	// waiter runs stmt in a transaction of its own and reports the
	// backend_xid the server shows for it while it waits for the lock. The
	// transaction is rolled back when the test ends, after stmt returned.
	type waiting struct {
		tx   pgx.Tx
		xid  *string    // backend_xid while waiting
		done chan error // stmt's result
	}
	waiter := func(stmt string) waiting {
		t.Helper()
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var pid int32
		if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		w := waiting{tx: tx, done: make(chan error, 1)}
		wctx, cancel := context.WithCancel(ctx)
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			_, err := tx.Exec(wctx, stmt)
			w.done <- err
		}()
		t.Cleanup(func() {
			cancel()
			<-finished
			_ = tx.Rollback(context.Background())
		})
		// pg_stat_activity takes backend_xid from a snapshot of the
		// backends made as the query starts, and wait_event_type live: one
		// read can see the wait and, from just before it, no xid yet. So
		// the xid is the one of a second read that still sees the wait,
		// whose snapshot was made once the wait had begun.
		deadline := time.Now().Add(10 * time.Second)
		for seen := false; ; {
			var locked bool
			err := env.Pool.QueryRow(ctx, `SELECT wait_event_type IS NOT DISTINCT FROM 'Lock', backend_xid::text
FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&locked, &w.xid)
			if err != nil {
				t.Fatal(err)
			}
			if locked && seen {
				return w
			}
			if seen = locked; seen {
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("%q did not wait for the row lock within 10s", stmt)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	lock := waiter("SELECT 1 FROM profiles WHERE id = 1 FOR UPDATE")
	update := waiter("UPDATE profiles SET name = 'c' WHERE id = 1")
	if lock.xid != nil {
		t.Errorf("a transaction waiting in SELECT ... FOR UPDATE already has xid %s", *lock.xid)
	}
	if update.xid == nil {
		t.Errorf("a transaction waiting in UPDATE has no xid yet; Enqueue's documentation says it takes one before waiting")
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-lock.done; err != nil {
		t.Fatalf("SELECT ... FOR UPDATE: %v", err)
	}
	var lockXID uint64
	if err := lock.tx.QueryRow(ctx, "SELECT pg_current_xact_id()").Scan(&lockXID); err != nil {
		t.Fatal(err)
	}
	if err := lock.tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-update.done; err != nil {
		t.Fatalf("UPDATE: %v", err)
	}
	var updateXID uint64
	if err := update.tx.QueryRow(ctx, "SELECT pg_current_xact_id()").Scan(&updateXID); err != nil {
		t.Fatal(err)
	}
	// The UPDATE began waiting first, yet its xid is the smaller: taken
	// before the wait, while the lock's was taken when it was granted.
	if updateXID >= lockXID {
		t.Errorf("UPDATE got xid %d, SELECT ... FOR UPDATE got %d; want the UPDATE's smaller", updateXID, lockXID)
	}
}

func TestOutboxStore_ReadsXID8AboveTwoTo32AndTwoTo63(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})

	// The parameter itself: uint64 values above 2^63 go out and come back
	// as the same xid8, whatever sign an int64 would give them.
	for _, x := range []uint64{1<<63 + 1, 1<<64 - 1} {
		var text string
		var back uint64
		if err := env.Pool.QueryRow(ctx, "SELECT $1::xid8::text, $1::xid8", x).Scan(&text, &back); err != nil {
			t.Fatal(err)
		}
		if text != strconv.FormatUint(x, 10) || back != x {
			t.Errorf("xid8 parameter %d arrives as %s and comes back as %d", x, text, back)
		}
	}

	// Rows with explicit xids: small, above 2^32 (a later epoch), around
	// and above 2^63, and the largest. Those above the horizon are
	// invisible to Scan, so they are read with the scan's own columns and
	// decoder, without the horizon condition.
	xids := []uint64{5, 1<<32 + 7, 1<<63 - 1, 1<<63 + 1, 1<<63 + 1, 1<<64 - 1}
	ids := make([]outbox.ID, len(xids))
	for i, x := range xids {
		ids[i] = outbox.NewID()
		if _, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload) VALUES ($1, $2, 'big', '{"i": `+strconv.Itoa(i)+`}')`,
			x, [16]byte(ids[i])); err != nil {
			t.Fatalf("insert xid %d: %v", x, err)
		}
	}
	if ids[4].Compare(ids[3]) < 0 { // the two entries of one xid walk in id order
		ids[3], ids[4] = ids[4], ids[3]
	}
	const horizon = "  AND xid < pg_snapshot_xmin(pg_current_snapshot())\n"
	if !strings.Contains(st.Statements().Scan, horizon) {
		t.Fatalf("the scan statement has no horizon line %q:\n%s", horizon, st.Statements().Scan)
	}
	unbounded := strings.Replace(st.Statements().Scan, horizon, "", 1)
	read := func(after outbox.Cursor) []outbox.Entry {
		t.Helper()
		rows, err := env.Pool.Query(ctx, unbounded, after.XID, [16]byte(after.ID), 100)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, scanOutboxEntry)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := read(outbox.Cursor{})
	if len(got) != len(xids) {
		t.Fatalf("read %d entries, want %d", len(got), len(xids))
	}
	for i, e := range got {
		if e.XID != xids[i] || e.ID != ids[i] {
			t.Errorf("entry %d: (xid %d, id %s), want (%d, %s)", i, e.XID, e.ID, xids[i], ids[i])
		}
	}
	var maxID outbox.ID
	for i := range maxID {
		maxID[i] = 0xff
	}
	for _, tc := range []struct {
		after outbox.Cursor
		want  int // index of the first entry after the cursor
	}{
		{outbox.Cursor{XID: 1 << 32}, 1},
		{outbox.Cursor{XID: 1<<63 - 1, ID: maxID}, 3},
		{outbox.Cursor{XID: 1<<63 + 1}, 3},
		{outbox.Cursor{XID: 1<<63 + 1, ID: ids[3]}, 4},
		{outbox.Cursor{XID: 1<<63 + 1, ID: maxID}, 5},
		{outbox.Cursor{XID: 1<<64 - 1, ID: maxID}, 6},
	} {
		got := read(tc.after)
		if len(got) != len(xids)-tc.want || len(got) > 0 && got[0].ID != ids[tc.want] {
			t.Errorf("after (%d, %s): %d entries, want the %d from entry %d", tc.after.XID, tc.after.ID, len(got), len(xids)-tc.want, tc.want)
		}
	}

	// Scan itself sees only the row below the horizon, from any cursor.
	if got, err := st.Scan(ctx, outbox.Cursor{}, 100); err != nil || len(got) != 1 || got[0].XID != 5 {
		t.Errorf("Scan(start) = %+v, %v; want only the entry of xid 5", got, err)
	}
	if got, err := st.Scan(ctx, outbox.Cursor{XID: 1<<63 + 1}, 100); err != nil || len(got) != 0 {
		t.Errorf("Scan(after 2^63+1) = %+v, %v; want nothing", got, err)
	}

	// The cursor keeps such values through Settle and State.
	to := outbox.Cursor{XID: 1<<63 + 1, ID: ids[3]}
	if err := st.Settle(ctx, outbox.Settlement{To: to}); err != nil {
		t.Fatalf("Settle to (2^63+1, ...): %v", err)
	}
	state, err := st.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if state[outbox.KeyLastScannedXID] != "9223372036854775809" {
		t.Errorf("state %s = %q, want 9223372036854775809", outbox.KeyLastScannedXID, state[outbox.KeyLastScannedXID])
	}
	if err := st.Settle(ctx, outbox.Settlement{From: to, To: outbox.Cursor{XID: 1<<64 - 1}}); err != nil {
		t.Errorf("Settle from (2^63+1, ...): %v", err)
	}
	if err := st.Settle(ctx, outbox.Settlement{From: to, To: outbox.Cursor{XID: 1<<64 - 1}}); !errors.Is(err, outbox.ErrCursorMoved) {
		t.Errorf("a second Settle from (2^63+1, ...): err = %v, want ErrCursorMoved", err)
	}

	// Retention compares with the same cursor.
	if n, err := st.DeleteDelivered(ctx, to, 0, 100); err != nil || n != 4 {
		t.Errorf("DeleteDelivered(up to (2^63+1, the first id)) = %d, %v; want 4", n, err)
	}
	if got := read(outbox.Cursor{}); len(got) != 2 || got[0].ID != ids[4] || got[1].ID != ids[5] {
		t.Errorf("after DeleteDelivered: %d entries left, want the 2 above the cursor", len(got))
	}
}

func TestOutboxStore_WorksInASchemaNeedingQuotes(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	schema := extraSchema(t, env, `Outbox "odd" Schema`)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{Schema: schema})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{Schema: schema})

	tx, err := env.Pool.Begin(ctx) // search_path is env.Schema, which has no outbox
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	a, b := outbox.NewID(), outbox.NewID()
	for _, id := range []outbox.ID{a, b} {
		if err := st.Enqueue(ctx, tx, id, "odd lane", []byte(`{"odd": "\"quoted\""}`)); err != nil {
			t.Fatalf("OutboxStore.Enqueue: %v", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := Enqueue(ctx, tx, outbox.NewID(), "l", []byte(`{}`)); !errors.Is(err, ErrSchemaMismatch) {
		t.Errorf("package Enqueue with the outbox outside the search_path: err = %v, want ErrSchemaMismatch", err)
	}

	es := awaitOutbox(t, ctx, st, outbox.Cursor{}, 2)
	first, second := es[0], es[1]
	if err := st.Settle(ctx, outbox.Settlement{To: second.Cursor(), Park: []outbox.Parked{{Entry: first, Reason: "odd"}}}); err != nil {
		t.Fatalf("Settle: %v", err)
	}
	if ds, err := st.ListDead(ctx, outbox.ListOptions{}); err != nil || len(ds) != 1 || ds[0].ID != first.ID {
		t.Fatalf("ListDead = %+v, %v", ds, err)
	}
	d, err := st.GetDead(ctx, first.ID)
	if err != nil || d.Error != "odd" || !bytes.Contains(d.Payload, []byte("quoted")) {
		t.Fatalf("GetDead = %+v, %v", d, err)
	}
	newID := outbox.NewID()
	if err := st.Requeue(ctx, first.ID, newID); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	if got := awaitOutbox(t, ctx, st, second.Cursor(), 1); got[0].ID != newID {
		t.Fatalf("after Requeue the walk has %s, want %s", got[0].ID, newID)
	}
	// The delivered entry and the parked one, which stayed below the cursor.
	if n, err := st.DeleteDelivered(ctx, second.Cursor(), 0, 10); err != nil || n != 2 {
		t.Errorf("DeleteDelivered = %d, %v; want 2", n, err)
	}
	if n, err := st.DeleteRequeued(ctx, 0, 10); err != nil || n != 1 {
		t.Errorf("DeleteRequeued = %d, %v; want 1", n, err)
	}
	state, err := st.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := outbox.CursorFromState(state); err != nil || c != second.Cursor() {
		t.Errorf("stored cursor %v, %v; want %v", c, err, second.Cursor())
	}
	if tables := tablesIn(t, ctx, env, env.Schema); len(tables) != 0 {
		t.Errorf("the search_path schema got tables %q; everything belongs in %q", tables, schema)
	}
}

// TestOutboxStore_WithoutTheTablesSaysToMigrate: that every call wraps
// ErrSchemaMismatch is the suite's (MissingTablesAreASchemaMismatch); the
// message's advice is this adapter's.
func TestOutboxStore_WithoutTheTablesSaysToMigrate(t *testing.T) {
	env := testenv.Postgres(t) // not migrated
	ctx := testContext(t)
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	_, scanErr := st.Scan(ctx, outbox.Cursor{}, 10)
	for what, err := range map[string]error{
		"Enqueue": Enqueue(ctx, tx, outbox.NewID(), "l", []byte(`{}`)),
		"Scan":    scanErr,
		"Settle":  st.Settle(ctx, outbox.Settlement{}),
	} {
		if !strings.Contains(fmt.Sprint(err), "Migrate") {
			t.Errorf("%s = %v, want an error that says to run Migrate", what, err)
		}
	}
}

// TestOutboxStore_RefusedSettlementsRollBackAndReturnTheirConnection: a
// settlement that loses its compare-and-set, or parks an entry that is not
// there, ends its transaction and gives a clean connection back to the pool,
// which keeps it.
func TestOutboxStore_RefusedSettlementsRollBackAndReturnTheirConnection(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	pool := newPool(t, env, func(c *pgxpool.Config) { c.MaxConns = 1 })
	st := mustOutboxStore(t, pool, OutboxStoreOptions{})
	var pid int32
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	moved := outbox.Cursor{XID: 7, ID: outbox.NewID()}
	if err := st.Settle(ctx, outbox.Settlement{To: moved}); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		what string
		s    outbox.Settlement
	}{
		{"a stale settlement", outbox.Settlement{To: outbox.Cursor{XID: 9}}},
		{"a settlement parking an unknown entry", outbox.Settlement{From: moved, To: outbox.Cursor{XID: 9},
			Park: []outbox.Parked{{Entry: outbox.Entry{XID: 8, ID: outbox.NewID()}, Reason: "ghost"}}}},
	}
	for _, r := range refused {
		if err := st.Settle(ctx, r.s); err == nil {
			t.Fatalf("%s succeeded", r.what)
		}
		if stat := pool.Stat(); stat.AcquiredConns() != 0 || stat.TotalConns() != 1 {
			t.Fatalf("after %s: %d connections acquired, %d in the pool; want 0 and the 1 kept", r.what, stat.AcquiredConns(), stat.TotalConns())
		}
		var state string
		if err := env.Pool.QueryRow(ctx, "SELECT state FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state); err != nil || state != "idle" {
			t.Fatalf("after %s the session is %q (%v), want idle", r.what, state, err)
		}
	}
	state, err := st.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := outbox.CursorFromState(state); err != nil || c != moved {
		t.Fatalf("the stored cursor is %v (%v), want %v", c, err, moved)
	}
}

func TestOutboxStore_TableRefusesLanesOutOfRange(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	insert := `INSERT INTO baton_outbox (id, lane, payload) VALUES (gen_random_uuid(), $1, '{}')`
	checkByteBound(t, ctx, env.Pool, "lane", insert, func(err error) error { return outboxError("enqueue", err) }, outbox.ErrInvalidEntry)
}

// A reason the database cannot store (SQLSTATE 22021) in a settlement's
// statement is a refused settlement, not a refused entry: the entry was
// written long before.
func TestOutboxStore_SettlementValuesTheDatabaseRefusesAreInvalidSettlements(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
	_, err := env.Pool.Exec(ctx, st.Statements().WriteState, []string{outbox.KeyLastError}, []string{"a\x00b"}, []string{})
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "22021" {
		t.Fatalf("writing a NUL byte into a state value: err = %v, want SQLSTATE 22021", err)
	}
	mapped := settleError("write state", err)
	if !errors.Is(mapped, outbox.ErrInvalidSettlement) || errors.Is(mapped, outbox.ErrInvalidEntry) {
		t.Errorf("settleError(%v) = %v, want one wrapping outbox.ErrInvalidSettlement and not outbox.ErrInvalidEntry", err, mapped)
	}
}

func TestNewOutboxStore_RejectsInvalidOptionsNamingTheField(t *testing.T) {
	env := testenv.Postgres(t)
	if _, err := NewOutboxStore(nil, OutboxStoreOptions{}); err == nil {
		t.Error("a nil pool was accepted")
	}
	for _, schema := range []string{"pg_outbox", strings.Repeat("s", 64), "a\x00b"} {
		_, err := NewOutboxStore(env.Pool, OutboxStoreOptions{Schema: schema})
		if !errors.Is(err, ErrInvalidSchemaName) || !strings.Contains(err.Error(), "OutboxStoreOptions.Schema") {
			t.Errorf("Schema %q: err = %v, want one wrapping ErrInvalidSchemaName naming OutboxStoreOptions.Schema", schema, err)
		}
	}
}

// TestOutboxStore_DeleteDeliveredLooksOnlyAtTheOldestLimitEntries pins the
// bound of one retention statement: it considers the limit's worth of
// oldest entries at or below the cursor, in walk order, and deletes those
// of them past the window; a younger entry among them is kept and does not
// make it read further.
func TestOutboxStore_DeleteDeliveredLooksOnlyAtTheOldestLimitEntries(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
	// Five entries of xids 1..5; the first is young, the others old.
	_, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload, created_at)
SELECT g::text::xid8, gen_random_uuid(), 'l', '{}', CASE WHEN g = 1 THEN now() ELSE now() - interval '2 hours' END
FROM generate_series(1, 5) AS g`)
	if err != nil {
		t.Fatal(err)
	}
	upTo := outbox.Cursor{XID: 4} // entries 1-3 are at or below it
	for i, want := range []int{1, 1, 0} {
		if n, err := st.DeleteDelivered(ctx, upTo, time.Hour, 2); err != nil || n != want {
			t.Fatalf("DeleteDelivered #%d (limit 2) = %d, %v; want %d", i+1, n, err, want)
		}
	}
	var left []string
	rows, _ := env.Pool.Query(ctx, "SELECT xid::text FROM baton_outbox ORDER BY xid")
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(left, []string{"1", "4", "5"}) {
		t.Fatalf("entries left: %q, %v; want the young one and the two above the cursor", left, err)
	}
}

func TestOutboxStore_ListDeadAfterAVanishedDeadLetterIsNotFound(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
	_, err := st.ListDead(ctx, outbox.ListOptions{Before: outbox.NewID()})
	if !errors.Is(err, outbox.ErrNotFound) || !strings.Contains(err.Error(), "Before") {
		t.Errorf("ListDead(Before: unknown) = %v, want one wrapping outbox.ErrNotFound naming Before", err)
	}
}

// TestOutboxStore_RequeueRefusesADeadLettersID covers the case the outbox's
// primary key cannot: the new id of a dead letter's own id, once retention
// deleted the parked entry from the outbox.
func TestOutboxStore_RequeueRefusesADeadLettersID(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
	_, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox_dead (id, xid, lane, payload, error)
VALUES ('00000000-0000-7000-8000-000000000001', '1', 'l', '{}', 'e'), ('00000000-0000-7000-8000-000000000002', '2', 'l', '{}', 'e')`)
	if err != nil {
		t.Fatal(err)
	}
	one, _ := outbox.ParseID("00000000-0000-7000-8000-000000000001")
	two, _ := outbox.ParseID("00000000-0000-7000-8000-000000000002")
	for _, newID := range []outbox.ID{one, two} {
		if err := st.Requeue(ctx, one, newID); err == nil || !strings.Contains(err.Error(), "dead letter's id") {
			t.Errorf("Requeue(%s as %s): err = %v, want it refused as a dead letter's id", one, newID, err)
		}
	}
	if n := countRows(t, ctx, env.Pool, "baton_outbox"); n != 0 {
		t.Errorf("refused requeues left %d entries", n)
	}
}

func TestVerifySchemaNamesOutboxIndexesRebuiltWithoutTheirPredicateOrDirection(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	for _, stmt := range []string{
		"DROP INDEX baton_outbox_dead_requeued",
		"CREATE INDEX baton_outbox_dead_requeued ON baton_outbox_dead (requeued_at)",
		"DROP INDEX baton_outbox_dead_parked",
		"CREATE INDEX baton_outbox_dead_parked ON baton_outbox_dead (parked_at, id)",
	} {
		if _, err := env.Pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	problems := schemaProblems(t, VerifySchema(ctx, env.Pool, VerifyOptions{}))
	want := []string{
		"index baton_outbox_dead_parked on baton_outbox_dead has columns (parked_at, id), want (parked_at DESC, id)",
		"index baton_outbox_dead_requeued on baton_outbox_dead covers every row, want only rows WHERE requeued_as IS NOT NULL",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems:\n got %q\nwant %q", problems, want)
	}
}

// planProblems lists what is wrong with a plan for a statement that must
// ride an index: a sequential scan, a sort, or one of the wanted indexes
// not used.
func planProblems(t *testing.T, raw []byte, wantIndexes ...string) []string {
	t.Helper()
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("cannot read the plan (%v): %s", err, raw)
	}
	var problems []string
	used := map[string]bool{}
	plans[0].Plan.walk(func(n planNode) {
		switch n.NodeType {
		case "Seq Scan":
			problems = append(problems, "a Seq Scan on "+n.RelationName)
		case "Sort", "Incremental Sort":
			problems = append(problems, "a "+n.NodeType)
		}
		if n.IndexName != "" {
			used[n.IndexName] = true
		}
	})
	for _, idx := range wantIndexes {
		if !used[idx] {
			problems = append(problems, "no scan of "+idx)
		}
	}
	return problems
}

// explainPrepared explains a statement the way pgx runs it: prepared once
// with the parameter types left to the server, then executed, under the
// given plan_cache_mode. args are SQL literals for EXECUTE.
func explainPrepared(t *testing.T, ctx context.Context, conn *pgxpool.Conn, name, args, mode string) []byte {
	t.Helper()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) EXECUTE "+name+" ("+args+")").Scan(&raw); err != nil {
		t.Fatalf("EXPLAIN EXECUTE %s (%s): %v", name, args, err)
	}
	return raw
}

// planSummary renders a plan's nodes on one line, children in brackets:
// "Limit [Index Scan baton_outbox_walk]".
func planSummary(raw []byte) string {
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
		return string(raw)
	}
	var render func(n planNode) string
	render = func(n planNode) string {
		s := n.NodeType
		if n.IndexName != "" {
			s += " " + n.IndexName
		} else if n.RelationName != "" {
			s += " on " + n.RelationName
		}
		var kids []string
		for _, c := range n.Plans {
			kids = append(kids, render(c))
		}
		if len(kids) > 0 {
			s += " [" + strings.Join(kids, ", ") + "]"
		}
		return s
	}
	return render(plans[0].Plan)
}

// indexConds collects the Index Cond of every index scan in a plan, by
// index name.
func indexConds(raw []byte) map[string]string {
	var plans []map[string]any
	conds := map[string]string{}
	if json.Unmarshal(raw, &plans) != nil || len(plans) != 1 {
		return conds
	}
	var visit func(n map[string]any)
	visit = func(n map[string]any) {
		if idx, ok := n["Index Name"].(string); ok {
			cond, _ := n["Index Cond"].(string)
			conds[idx] = cond
		}
		kids, _ := n["Plans"].([]any)
		for _, k := range kids {
			if m, ok := k.(map[string]any); ok {
				visit(m)
			}
		}
	}
	if root, ok := plans[0]["Plan"].(map[string]any); ok {
		visit(root)
	}
	return conds
}

// checkPlan fails unless the plan has no Seq Scan and no Sort and scans
// each index of want with an Index Cond that holds each of its strings (a
// bound of the scan, not a filter applied row by row).
func checkPlan(t *testing.T, what string, raw []byte, want map[string][]string) {
	t.Helper()
	conds := indexConds(raw)
	t.Logf("%s: %s %v", what, planSummary(raw), conds)
	problems := planProblems(t, raw, slices.Sorted(maps.Keys(want))...)
	for idx, parts := range want {
		for _, part := range parts {
			if cond, ok := conds[idx]; ok && !strings.Contains(cond, part) {
				problems = append(problems, fmt.Sprintf("the scan of %s is not bounded by %q (Index Cond: %s)", idx, part, cond))
			}
		}
	}
	reportPlan(t, what, raw, problems)
}

// TestOutboxStore_StatementsRideTheirIndexes guards the plans of the walk,
// of Enqueue and of the maintenance statements on tables of realistic size: 200 000
// delivered entries behind the cursor and 1 000 ahead of it, 100 000 dead
// letters of which a tenth were requeued. Each statement is prepared as
// pgx prepares it and explained both with a custom plan (for the given
// values) and with the generic plan the server may switch a prepared
// statement to: no Seq Scan, no Sort, and the index it is written for.
func TestOutboxStore_StatementsRideTheirIndexes(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})

	// Explicit xids, all below the horizon: 200 000 below the cursor xid
	// c, 1 000 from c up. Several entries share an xid, like the entries
	// of one transaction.
	horizon := horizonOf(t, ctx, env.Pool)
	c := horizon / 2
	_, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload, created_at)
SELECT (1 + (g - 1) * ($1::bigint - 1) / 200000)::text::xid8, gen_random_uuid(), 'plan.' || (g % 3),
       jsonb_build_object('n', g), now() - interval '30 days' + g * interval '1 second'
FROM generate_series(1, 200000) AS g`, int64(c))
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload)
SELECT ($1::bigint + (g - 1) * ($2::bigint - $1::bigint) / 1000)::text::xid8, gen_random_uuid(), 'plan.' || (g % 3), jsonb_build_object('n', g)
FROM generate_series(1, 1000) AS g`, int64(c), int64(horizon))
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Pool.Exec(ctx, `INSERT INTO baton_outbox_dead (id, xid, lane, payload, error, parked_at, requeued_as, requeued_at)
SELECT gen_random_uuid(), g::text::xid8, 'plan.dead', '{}', 'rejected', now() - g * interval '1 minute',
       CASE WHEN g % 10 = 0 THEN gen_random_uuid() END,
       CASE WHEN g % 10 = 0 THEN now() - g * interval '30 seconds' END
FROM generate_series(1, 100000) AS g`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, "ANALYZE baton_outbox; ANALYZE baton_outbox_dead"); err != nil {
		t.Fatal(err)
	}
	var someDead string
	if err := env.Pool.QueryRow(ctx, "SELECT id::text FROM baton_outbox_dead ORDER BY parked_at DESC, id OFFSET 500 LIMIT 1").Scan(&someDead); err != nil {
		t.Fatal(err)
	}

	// The walk does what the plan promises: the first batch after c.
	cursor := outbox.Cursor{XID: c}
	got, err := st.Scan(ctx, cursor, 100)
	if err != nil || len(got) != 100 || got[0].Cursor().Compare(cursor) <= 0 {
		t.Fatalf("Scan(after (%d, nil)) = %d entries, %v; want 100 from xid %d up", c, len(got), err, c)
	}

	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	defer conn.Exec(context.WithoutCancel(ctx), "RESET plan_cache_mode; DEALLOCATE ALL")
	nilID := "'" + outbox.NilID.String() + "'"
	statements := []struct {
		name, query, args string
		want              map[string][]string
	}{
		{"outbox_scan", st.Statements().Scan, fmt.Sprintf("'%d', %s, 100", c, nilID),
			map[string][]string{"baton_outbox_walk": {"ROW(xid, id) > ROW(", "xid < pg_snapshot_xmin(pg_current_snapshot())"}}},
		{"outbox_delete_delivered", st.Statements().DeleteDone, fmt.Sprintf("'%d', %s, '7 days', 1000", c, nilID),
			map[string][]string{"baton_outbox_walk": {"ROW(xid, id) <= ROW("}}},
		{"outbox_park", st.Statements().Park, fmt.Sprintf("ARRAY[%s::uuid, gen_random_uuid()], '{a,b}', '%d', %s, '%d', %s", nilID, c, nilID, horizon, nilID),
			map[string][]string{"baton_outbox_pkey": {"id = p.id"}}},
		{"outbox_list_dead", st.Statements().ListDead, "100",
			map[string][]string{"baton_outbox_dead_parked": nil}},
		{"outbox_list_dead_before", st.Statements().ListDeadBefore, "100, '" + someDead + "'",
			map[string][]string{"baton_outbox_dead_parked": {"parked_at <="}, "baton_outbox_dead_pkey": {"id ="}}},
		{"outbox_delete_requeued", st.Statements().DeleteRequeued, "'7 days', 1000",
			map[string][]string{"baton_outbox_dead_requeued": {"requeued_at < (now() -"}}},
		{"outbox_newest", st.Statements().Newest, fmt.Sprintf("'%d', %s", c, nilID),
			map[string][]string{"baton_outbox_walk": {"ROW(xid, id) > ROW("}}},
		{"outbox_gate", st.Statements().Gate, fmt.Sprintf("1, '%d', %s", c, nilID),
			map[string][]string{"baton_outbox_walk": {"ROW(xid, id) > ROW("}}},
		{"outbox_count_pending", st.Statements().CountPending, fmt.Sprintf("'%d', %s, 10000", c, nilID),
			map[string][]string{"baton_outbox_walk": {"ROW(xid, id) > ROW("}}},
		// The dead-letter check of every Enqueue, on 100 000 dead letters.
		{"outbox_enqueue", st.EnqueueSQL(), "gen_random_uuid(), 'lane', '{}', NULL",
			map[string][]string{"baton_outbox_dead_pkey": {"id ="}}},
	}
	for _, s := range statements {
		if _, err := conn.Exec(ctx, "PREPARE "+s.name+" AS "+s.query); err != nil {
			t.Fatalf("PREPARE %s: %v", s.name, err)
		}
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			checkPlan(t, s.name+" ("+mode+")", explainPrepared(t, ctx, conn, s.name, s.args, mode), s.want)
		}
	}

	// The check itself sees a Seq Scan and a Sort when there are some.
	if _, err := conn.Exec(ctx, "SET enable_indexscan = off; SET enable_bitmapscan = off"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "RESET enable_indexscan; RESET enable_bitmapscan")
	problems := planProblems(t, explainPrepared(t, ctx, conn, "outbox_scan", statements[0].args, "force_custom_plan"), "baton_outbox_walk")
	if !slices.Contains(problems, "a Seq Scan on "+OutboxTable) || !slices.Contains(problems, "no scan of baton_outbox_walk") {
		t.Errorf("with index scans disabled the plan check found only %q", problems)
	}
}

// TestOutboxStore_PreparedScanSettlesOnAGenericPlanThroughABacklog: over
// one connection, the walk's scan runs prepared (pgx's statement cache)
// through a backlog of 5 000 entries, and once PostgreSQL's five custom
// plans are done it keeps the generic one, so no later scan is planned
// afresh. With the cursor and the limit as plain parameters, the custom
// plan for each cursor was estimated cheaper than the generic one and
// every scan was planned again.
func TestOutboxStore_PreparedScanSettlesOnAGenericPlanThroughABacklog(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	const entries, batch, scans = 5000, 100, 12
	loadOutbox(t, ctx, env.Pool, 1, horizonOf(t, ctx, env.Pool), entries)
	// One connection: every scan runs on the one whose statements are read below.
	pool := newPool(t, env, func(c *pgxpool.Config) { c.MaxConns = 1 })
	st := mustOutboxStore(t, pool, OutboxStoreOptions{})
	var cursor outbox.Cursor
	for i := range scans {
		es, err := st.Scan(ctx, cursor, batch)
		if err != nil || len(es) != batch {
			t.Fatalf("scan %d = %d entries, %v; want %d", i+1, len(es), err, batch)
		}
		if es[0].Cursor().Compare(cursor) <= 0 {
			t.Fatalf("scan %d started at %v, not after the cursor %v", i+1, es[0].Cursor(), cursor)
		}
		cursor = es[len(es)-1].Cursor()
	}
	var generic, custom int64
	err := pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`, st.Statements().Scan).Scan(&generic, &custom)
	if err != nil {
		t.Fatalf("reading the prepared scan's plan counts: %v", err)
	}
	t.Logf("%d scans: %d generic plans, %d custom", scans, generic, custom)
	if custom > 5 || generic < scans-5 {
		t.Errorf("%d scans over one connection ran on %d custom plans and %d generic; want at most 5 custom (PostgreSQL's trial plans) and the rest generic", scans, custom, generic)
	}
}

// A settlement never fails on a conflict it can foresee: an entry written
// around Enqueue (or by an older version, before parking copied) may carry
// the id of a dead letter. Parking it replaces that dead letter instead of
// failing every settlement on the dead letters' primary key.
func TestOutboxStore_ParkingAnEntryWithADeadLettersIDReplacesItInsteadOfFailing(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})
	id := outbox.NewID()
	if _, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox_dead (id, xid, lane, payload, error) VALUES ($1, '1', 'old', '{"v": 1}', 'first')`, [16]byte(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox (id, lane, payload) VALUES ($1, 'new', '{"v": 2}')`, [16]byte(id)); err != nil {
		t.Fatal(err)
	}
	es := awaitOutbox(t, ctx, st, outbox.Cursor{}, 1)
	err := st.Settle(ctx, outbox.Settlement{To: es[0].Cursor(), Park: []outbox.Parked{{Entry: es[0], Reason: "second"}}})
	if err != nil {
		t.Fatalf("parking an entry whose id has a dead letter: %v; the settlement must not fail on it", err)
	}
	d, err := st.GetDead(ctx, id)
	if err != nil || d.Lane != "new" || !strings.HasPrefix(d.Error, "second (this replaced a dead letter") || !samePayloadJSON(d.Payload, `{"v": 2}`) {
		t.Fatalf("the dead letter is %+v, %v; want the newer entry, its error saying what it replaced", d, err)
	}
}

func samePayloadJSON(got []byte, want string) bool {
	var a, b any
	return json.Unmarshal(got, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && fmt.Sprint(a) == fmt.Sprint(b)
}

// The relay's hot path: a granted settlement without parked entries is one
// round trip, a refused one still says the cursor moved and writes
// nothing.
func TestOutboxStore_SettlementWithoutParkedEntriesIsOneRoundTrip(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	trips := &queryCounter{}
	pool := newPool(t, env, func(c *pgxpool.Config) { c.ConnConfig.Tracer = trips })
	st := mustOutboxStore(t, pool, OutboxStoreOptions{})
	for range 3 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Enqueue(ctx, tx, outbox.NewID(), "a", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Other tests' transactions on the server hold the horizon back a
	// while.
	var es []outbox.Entry
	eventually(t, 30*time.Second, "the three entries did not pass the horizon", func() bool {
		var err error
		es, err = st.Scan(ctx, outbox.Cursor{}, 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(es) == 3
	})
	// The first settlement stores the cursor keys.
	if err := st.Settle(ctx, outbox.Settlement{From: outbox.Cursor{}, To: es[0].Cursor()}); err != nil {
		t.Fatal(err)
	}
	trips.n.Store(0)
	if err := st.Settle(ctx, outbox.Settlement{From: es[0].Cursor(), To: es[1].Cursor(), State: map[string]*string{"k": new("v")}}); err != nil {
		t.Fatal(err)
	}
	if n := trips.n.Load(); n != 1 {
		t.Errorf("a settlement without parked entries took %d round trips; want 1", n)
	}
	err := st.Settle(ctx, outbox.Settlement{From: es[0].Cursor(), To: es[2].Cursor(), State: map[string]*string{"k": new("w")}})
	if !errors.Is(err, outbox.ErrCursorMoved) {
		t.Fatalf("a settlement from a cursor passed: err = %v, want one wrapping outbox.ErrCursorMoved", err)
	}
	state, err := st.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur, _ := outbox.CursorFromState(state); cur != es[1].Cursor() || state["k"] != "v" {
		t.Errorf("after the refused settlement: cursor %v, k=%q; want %v and v (nothing written)", cur, state["k"], es[1].Cursor())
	}
}

// A settlement sent at once locks the cursor's xid row before its id row,
// as the full settlement does: a transaction that holds the xid row and
// then takes the id row never deadlocks with it. Had it locked the id row
// first, PostgreSQL would end one of the two with a deadlock: the
// transaction's lock would fail, or the settlement would fall back to the
// full transaction (more than one round trip).
func TestOutboxStore_SettlementAtOnceLocksTheCursorRowsInTheFullOrder(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	trips := &queryCounter{}
	st := mustOutboxStore(t, newPool(t, env, func(c *pgxpool.Config) { c.ConnConfig.Tracer = trips }), OutboxStoreOptions{})
	from := outbox.Cursor{XID: 10, ID: outbox.NewID()}
	to := outbox.Cursor{XID: 11, ID: outbox.NewID()}
	if err := st.Settle(ctx, outbox.Settlement{From: outbox.Cursor{}, To: from}); err != nil {
		t.Fatal(err)
	}

	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	const lockKey = `SELECT 1 FROM baton_outbox_state WHERE key = $1 FOR UPDATE`
	if _, err := tx.Exec(ctx, lockKey, outbox.KeyLastScannedXID); err != nil {
		t.Fatal(err)
	}
	trips.n.Store(0)
	settled := make(chan error, 1)
	go func() { settled <- st.Settle(ctx, outbox.Settlement{From: from, To: to}) }()
	waitForLockWait(t, ctx, env.Pool, "WITH xid_moved AS", "the settlement")
	if _, err := tx.Exec(ctx, lockKey, outbox.KeyLastScannedID); err != nil {
		t.Fatalf("taking the id row after the xid row, beside a settlement: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if n := trips.n.Load(); n != 1 {
		t.Errorf("the settlement took %d round trips; want 1 (no deadlock, no fallback)", n)
	}
	state, err := st.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := outbox.CursorFromState(state); err != nil || c != to {
		t.Errorf("the stored cursor is %v (%v), want %v", c, err, to)
	}
}
