package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/baton-go/baton/core/outbox"
)

// ErrRebaseNotNeeded is returned by Rebase when the stored cursor is below
// the database's transaction counter: the outbox was not restored
// logically, and its xids are this database's own.
var ErrRebaseNotNeeded = errors.New("baton/postgres: the outbox needs no rebase: its cursor is below the transaction counter")

// ErrRebaseNoRoom is returned by Rebase when the entries to renumber need
// more xid values than lie below the oldest running transaction.
var ErrRebaseNoRoom = errors.New("baton/postgres: too few xid values below the horizon to rebase the outbox")

// RebaseResult is what Rebase found and did, or would do with dryRun.
type RebaseResult struct {
	// Cursor is the stored cursor before the rebase; NewCursor after it.
	Cursor, NewCursor outbox.Cursor
	// NextXID is this database's transaction counter when it began.
	NextXID uint64
	// Delivered counts the restored entries at or below the cursor, which
	// the old cluster had delivered or parked: they stay below the new
	// cursor until retention deletes them.
	Delivered int
	// Pending counts the restored entries above the cursor, which the old
	// cluster had not delivered: they walk first, in their order.
	Pending int
	// Written counts the entries whose xid is below NextXID, written in
	// this database since the restore: they walk next, in their order.
	// Restored entries the old cluster had delivered whose xids happen to
	// lie below this database's counter are among them, and are delivered
	// again (delivery is at least once; the destination sees a repeat).
	Written int
	// Transactions is how many xid values the walkable entries needed.
	Transactions int
	// DryRun says nothing was written.
	DryRun bool
}

// outboxRebaseSQL classifies the entries of the quoted outbox table t for
// a rebase and either counts them per group (move false) or gives them
// their new xids (move true). Parameters: $1/$2 the stored cursor, $3 the
// transaction counter; with move, $4 the base xid.
//
// Groups: 0 restored and at or below the cursor (delivered), 1 restored
// and above it (pending), 2 below the counter (written here). Groups 1 and
// 2 take consecutive slots in (group, xid) order, one per distinct xid,
// so entries of one transaction keep sharing an xid and keep their id
// order; group 0 takes slot 0. An entry's new xid is base + slot, and the
// new cursor is (base, the largest id): everything delivered is at or
// below it, everything else above, in the order it had.
func outboxRebaseSQL(t string, move bool) string {
	classified := `WITH classified AS (
    SELECT ctid AS row, xid,
           CASE WHEN xid < $3::xid8 THEN 2
                WHEN (xid, id) <= ($1::xid8, $2::uuid) THEN 0
                ELSE 1 END AS grp
    FROM ` + t + `
), ranked AS (
    SELECT row, grp,
           CASE WHEN grp = 0 THEN 0 ELSE dense_rank() OVER (PARTITION BY grp = 0 ORDER BY grp, xid) END AS slot
    FROM classified
)`
	if !move {
		return classified + `
SELECT grp, count(*), max(slot) FROM ranked GROUP BY grp`
	}
	return classified + `
UPDATE ` + t + ` AS o SET xid = ($4::text::numeric + r.slot)::text::xid8
FROM ranked AS r WHERE o.ctid = r.row`
}

// Rebase repairs an outbox restored logically (pg_dump/pg_restore) into
// another cluster, whose stored cursor is therefore at or above this
// database's transaction counter (outbox.ErrCursorAhead): it gives every
// entry a new xid below the oldest running transaction, in the order the
// walk must take, and moves the cursor to match, in one transaction. The
// delivered entries go below the new cursor; the old cluster's undelivered
// ones follow, in their order; then those written here since, in theirs.
// Anything written after the rebase walks after all of them.
//
// With dryRun it computes and returns the same figures and writes nothing.
// A cursor below the counter is ErrRebaseNotNeeded, and nothing changes.
//
// It runs in REPEATABLE READ, so it counts and renumbers the same entries
// however producers commit meanwhile, and locks the cursor keys as a
// settlement does: a driver settling at the same time waits, then finds
// the cursor moved and reads it again. A concurrent change to the same rows
// (retention deleting some) aborts it with a serialization failure; run it
// again.
func (s *OutboxStore) Rebase(ctx context.Context, dryRun bool) (RebaseResult, error) {
	res := RebaseResult{DryRun: dryRun}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return res, outboxError("rebase: begin", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	zeroXID, zeroID := outbox.CursorState(outbox.Cursor{})
	locked, err := tx.Query(ctx, s.sql.lockCursor, outbox.KeyLastScannedXID, zeroXID, outbox.KeyLastScannedID, zeroID)
	if err != nil {
		return res, outboxError("rebase: lock the cursor", err)
	}
	stored := map[string]string{}
	var (
		key   string
		value pgtype.Text // NULL reads as absent, as in State
	)
	if _, err := pgx.ForEachRow(locked, []any{&key, &value}, func() error {
		if value.Valid {
			stored[key] = value.String
		}
		return nil
	}); err != nil {
		return res, outboxError("rebase: lock the cursor", err)
	}
	if res.Cursor, err = outbox.CursorFromState(stored); err != nil {
		return res, fmt.Errorf("baton/postgres: outbox rebase: the stored cursor is unreadable: %w", err)
	}

	// The transaction's snapshot: the counter and the oldest xid still
	// running when it was taken.
	var next, horizon string
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text, pg_snapshot_xmin(pg_current_snapshot())::text`).
		Scan(&next, &horizon); err != nil {
		return res, outboxError("rebase: read the transaction counter", err)
	}
	if res.NextXID, err = strconv.ParseUint(next, 10, 64); err != nil {
		return res, fmt.Errorf("baton/postgres: outbox rebase: the counter %q: %w", next, err)
	}
	xmin, err := strconv.ParseUint(horizon, 10, 64)
	if err != nil {
		return res, fmt.Errorf("baton/postgres: outbox rebase: the horizon %q: %w", horizon, err)
	}
	if res.Cursor.XID < res.NextXID {
		return res, fmt.Errorf("%w: the cursor is at xid %d, the next xid is %d", ErrRebaseNotNeeded, res.Cursor.XID, res.NextXID)
	}

	rows, err := tx.Query(ctx, s.sql.rebaseCount, res.Cursor.XID, [16]byte(res.Cursor.ID), res.NextXID)
	if err != nil {
		return res, outboxError("rebase: count the entries", err)
	}
	var (
		grp, count int
		maxSlot    uint64
		slots      uint64
	)
	if _, err := pgx.ForEachRow(rows, []any{&grp, &count, &maxSlot}, func() error {
		switch grp {
		case 0:
			res.Delivered = count
		case 1:
			res.Pending = count
		default:
			res.Written = count
		}
		slots = max(slots, maxSlot)
		return nil
	}); err != nil {
		return res, outboxError("rebase: count the entries", err)
	}
	res.Transactions = int(slots)
	// Slots 0..slots go to base..base+slots, all below the horizon, so no
	// transaction running now or later writes below one of them.
	if xmin < slots+2 {
		return res, fmt.Errorf("%w: the entries need %d xids below the oldest running transaction (%d); end older transactions, or run that many transactions first to move the counter on",
			ErrRebaseNoRoom, slots+1, xmin)
	}
	base := xmin - 1 - slots
	res.NewCursor = outbox.Cursor{XID: base}
	for i := range res.NewCursor.ID {
		res.NewCursor.ID[i] = 0xff
	}
	if dryRun {
		return res, nil
	}

	if _, err := tx.Exec(ctx, s.sql.rebaseMove, res.Cursor.XID, [16]byte(res.Cursor.ID), res.NextXID, strconv.FormatUint(base, 10)); err != nil {
		return res, outboxError("rebase: renumber the entries", err)
	}
	keys, values, remove := settlementState(outbox.Settlement{To: res.NewCursor})
	if _, err := tx.Exec(ctx, s.sql.writeState, keys, values, remove); err != nil {
		return res, outboxError("rebase: write the cursor", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return res, outboxError("rebase: commit", err)
	}
	return res, nil
}
