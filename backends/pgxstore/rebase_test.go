package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// TestRebase_RenumbersARestoredOutboxInWalkOrder plays a logical restore
// on the shared server: entries with xids far above its counter (another
// cluster's, as pg_restore would copy them) and a cursor among them, plus
// entries written here since. The real dump and restore between two
// clusters is in cmd/baton.
func TestRebase_RenumbersARestoredOutboxInWalkOrder(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	st := mustOutboxStore(t, env.Pool, OutboxStoreOptions{})

	const old = 5<<32 + 1000 // the old cluster's xids: epoch 5
	restore := func(xid uint64, n int) []outbox.ID {
		ids := make([]outbox.ID, n)
		for i := range ids {
			ids[i] = outbox.NewID()
			if _, err := env.Pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload) VALUES ($1::text::xid8, $2, 'l', '{}')`,
				fmt.Sprint(xid), [16]byte(ids[i])); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	a, b, c, d := restore(old, 3), restore(old+10, 2), restore(old+20, 1), restore(old+30, 2)
	// An entry the old cluster delivered long ago, whose xid lies below
	// this cluster's counter: it cannot be told from one written here.
	early := restore(5, 1)
	cursor := outbox.Cursor{XID: old + 10, ID: b[0]}
	if err := st.Settle(ctx, outbox.Settlement{To: cursor}); err != nil {
		t.Fatal(err)
	}
	var written [][]outbox.ID
	for _, n := range []int{2, 1} {
		tx, err := env.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]outbox.ID, n)
		for i := range ids {
			ids[i] = outbox.NewID()
			if err := Enqueue(ctx, tx, ids[i], "l", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		written = append(written, ids)
	}

	xids := func() map[outbox.ID]string {
		rows, err := env.Pool.Query(ctx, `SELECT id, xid::text FROM baton_outbox`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		m := map[outbox.ID]string{}
		for rows.Next() {
			var id [16]byte
			var x string
			if err := rows.Scan(&id, &x); err != nil {
				t.Fatal(err)
			}
			m[outbox.ID(id)] = x
		}
		return m
	}
	before, stateBefore := xids(), mustState(t, ctx, st)

	dry, err := st.Rebase(ctx, true)
	if err != nil {
		t.Fatalf("Rebase(dry run): %v", err)
	}
	if dry.Delivered != 4 || dry.Pending != 4 || dry.Written != 4 || dry.Transactions != 6 || dry.Cursor != cursor || !dry.DryRun {
		t.Fatalf("dry run = %+v; want 4 delivered (a, b0), 4 pending (b1, c, d), 4 written here (early and two transactions), 6 transactions", dry)
	}
	if !maps.Equal(xids(), before) || !maps.Equal(mustState(t, ctx, st), stateBefore) {
		t.Fatal("the dry run changed the outbox")
	}

	res, err := st.Rebase(ctx, false)
	if err != nil {
		t.Fatalf("Rebase: %v", err)
	}
	next, err := st.NextXID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.NewCursor.XID >= next {
		t.Fatalf("the new cursor %v is not below the counter %d", res.NewCursor, next)
	}
	if got, err := outbox.CursorFromState(mustState(t, ctx, st)); err != nil || got != res.NewCursor {
		t.Fatalf("the stored cursor is %v (%v), want %v", got, err, res.NewCursor)
	}
	sorted := func(ids []outbox.ID) []outbox.ID { return slices.SortedFunc(slices.Values(ids), outbox.ID.Compare) }
	want := slices.Concat(sorted(b[1:]), c, sorted(d), early, sorted(written[0]), written[1])
	walk := awaitOutbox(t, ctx, st, res.NewCursor, len(want))
	if got := entryIDs(walk); !slices.Equal(got, want) {
		t.Fatalf("the walk from the new cursor is %v; want the old cluster's pending entries, then those written here, each in order: %v", got, want)
	}
	below, err := st.Scan(ctx, outbox.Cursor{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if got := entryIDs(below[:4]); !slices.Equal(sorted(got), sorted(append(slices.Clone(a), b[0]))) {
		t.Fatalf("at or below the new cursor: %v; want the delivered %v", got, append(a, b[0]))
	}

	if _, err := st.Rebase(ctx, false); !errors.Is(err, ErrRebaseNotNeeded) {
		t.Fatalf("a second Rebase: err = %v, want ErrRebaseNotNeeded", err)
	}
}

func mustState(t *testing.T, ctx context.Context, st *OutboxStore) map[string]string {
	t.Helper()
	m, err := st.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func entryIDs(es []outbox.Entry) []outbox.ID {
	out := make([]outbox.ID, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// On a fresh cluster only a few hundred xids lie below the horizon; an
// outbox with more undelivered transactions than that cannot be renumbered
// in order, and the rebase refuses without changing anything.
func TestRebase_RefusesWhenTooFewXIDsLieBelowTheHorizon(t *testing.T) {
	c := testenv.StartPostgresServer(t)
	ctx := testContext(t)
	pool, err := pgxpool.New(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	mustMigrate(t, ctx, pool, MigrateOptions{})
	st := mustOutboxStore(t, pool, OutboxStoreOptions{})
	next, err := st.NextXID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One entry per restored transaction, more transactions than xids
	// below this cluster's counter.
	if _, err := pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload)
SELECT ((5::numeric * 4294967296) + g)::text::xid8, gen_random_uuid(), 'l', '{}' FROM generate_series(1, $1::int) AS g`, int(next)+100); err != nil {
		t.Fatal(err)
	}
	cursor := outbox.Cursor{XID: 5 << 32}
	if err := st.Settle(ctx, outbox.Settlement{To: cursor}); err != nil {
		t.Fatal(err)
	}
	var before string
	if err := pool.QueryRow(ctx, `SELECT string_agg(xid::text, ',' ORDER BY id) FROM baton_outbox`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	for _, dry := range []bool{true, false} {
		if _, err := st.Rebase(ctx, dry); !errors.Is(err, ErrRebaseNoRoom) {
			t.Fatalf("Rebase(dry run %v) of %d transactions with %d xids below the horizon: err = %v, want ErrRebaseNoRoom", dry, next+100, next, err)
		}
	}
	var after string
	if err := pool.QueryRow(ctx, `SELECT string_agg(xid::text, ',' ORDER BY id) FROM baton_outbox`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatal("a refused rebase renumbered entries")
	}
	if got, err := outbox.CursorFromState(mustState(t, ctx, st)); err != nil || got != cursor {
		t.Fatalf("a refused rebase moved the cursor to %v (%v)", got, err)
	}
}
