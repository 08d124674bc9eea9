package pgsql

import (
	"context"
	"fmt"
	"strconv"

	"github.com/baton-go/baton/core/outbox"
)

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
// a rebase and either counts them (move false) or gives them their new xids
// (move true). Parameter: $1/$2 the stored cursor. Both answer one row:
// how many entries are in groups 0, 1 and 2, how many slots groups 1 and 2
// take, and the statement's horizon (decimal text).
//
// Everything is judged against the statement's own snapshot: the counter
// (pg_snapshot_xmax) splits entries written here (group 2, xids below it)
// from restored ones, which the cursor splits into delivered (group 0) and
// pending (group 1); and the horizon (pg_snapshot_xmin, the oldest xid
// still running) bounds the new xids, so no transaction running now or
// later can write below one. Groups 1 and 2 take consecutive slots in
// (group, xid) order, one per distinct xid, so the entries of one
// transaction keep sharing an xid and keep their id order; group 0 takes
// slot 0. An entry's new xid is base + slot with base = horizon - 1 - slots:
// the new cursor (base, the largest id) has everything delivered at or
// below it and everything else above it, in the order it had. Where there
// is no room (base below 1) the move changes nothing and answers zeros.
func outboxRebaseSQL(t string, move bool) string {
	q := `WITH snap AS (
    SELECT pg_snapshot_xmax(pg_current_snapshot()) AS next,
           pg_snapshot_xmin(pg_current_snapshot())::text::numeric AS horizon
), classified AS (
    SELECT o.ctid AS row, o.xid,
           CASE WHEN o.xid < snap.next THEN 2
                WHEN (o.xid, o.id) <= ($1::xid8, $2::uuid) THEN 0
                ELSE 1 END AS grp
    FROM ` + t + ` AS o, snap
), ranked AS (
    SELECT row, grp,
           CASE WHEN grp = 0 THEN 0 ELSE dense_rank() OVER (PARTITION BY grp = 0 ORDER BY grp, xid) END AS slot
    FROM classified
), sized AS (
    SELECT row, grp, slot, max(slot) OVER () AS slots FROM ranked
)`
	from := "sized"
	if move {
		q += `, moved AS (
    UPDATE ` + t + ` AS o SET xid = (snap.horizon - 1 - s.slots + s.slot)::text::xid8
    FROM sized AS s, snap
    WHERE o.ctid = s.row AND snap.horizon - 1 - s.slots >= 1
    RETURNING s.grp, s.slot, s.slots
)`
		from = "moved"
	}
	return q + `
SELECT count(*) FILTER (WHERE grp = 0), count(*) FILTER (WHERE grp = 1), count(*) FILTER (WHERE grp = 2),
       coalesce(max(slots), 0), (SELECT horizon FROM snap)::text
FROM ` + from
}

// rebaseStep runs the count or the move and fills res from its answer:
// the groups, the slots, and the new cursor below the horizon.
func (s *OutboxStore) rebaseStep(ctx context.Context, tx Tx, query string, res *RebaseResult) error {
	var (
		slots   uint64
		horizon string
	)
	if err := tx.QueryRow(ctx, query, res.Cursor.XID, [16]byte(res.Cursor.ID)).
		Scan(&res.Delivered, &res.Pending, &res.Written, &slots, &horizon); err != nil {
		return s.a.MapError(AreaOutbox, "rebase: renumber the entries", err)
	}
	xmin, err := strconv.ParseUint(horizon, 10, 64)
	if err != nil {
		return s.a.errorf("outbox rebase: the horizon %q: %w", horizon, err)
	}
	res.Transactions = int(slots)
	if xmin < slots+2 {
		return fmt.Errorf("%w: the entries need %d xids below the oldest running transaction (%d); end older transactions, or run that many transactions first to move the counter on",
			ErrRebaseNoRoom, slots+1, xmin)
	}
	res.NewCursor = outbox.Cursor{XID: xmin - 1 - slots}
	for i := range res.NewCursor.ID {
		res.NewCursor.ID[i] = 0xff
	}
	return nil
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
// It locks the cursor keys first, as a settlement does: a driver settling
// at the same time waits, then finds the cursor moved and reads it again.
// The renumbering is one statement, judged against its own snapshot, so
// producers committing meanwhile are renumbered or walk after, never lost.
func (s *OutboxStore) Rebase(ctx context.Context, dryRun bool) (RebaseResult, error) {
	res := RebaseResult{DryRun: dryRun}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return res, s.a.MapError(AreaOutbox, "rebase: begin", err)
	}
	defer rollback(ctx, tx)
	if res.Cursor, err = s.lockCursor(ctx, tx); err != nil {
		return res, s.a.MapError(AreaOutbox, "rebase: lock the cursor", err)
	}
	var next string
	if err := tx.QueryRow(ctx, NextXIDSQL).Scan(&next); err != nil {
		return res, s.a.MapError(AreaOutbox, "rebase: read the transaction counter", err)
	}
	if res.NextXID, err = strconv.ParseUint(next, 10, 64); err != nil {
		return res, s.a.errorf("outbox rebase: the counter %q: %w", next, err)
	}
	if res.Cursor.XID < res.NextXID {
		return res, fmt.Errorf("%w: the cursor is at xid %d, the next xid is %d", ErrRebaseNotNeeded, res.Cursor.XID, res.NextXID)
	}

	// Count first: the dry run's answer, and the check that there is room.
	if err := s.rebaseStep(ctx, tx, s.sql.RebaseCount, &res); err != nil {
		return res, err
	}
	if dryRun {
		return res, nil
	}
	counted := res.Delivered + res.Pending + res.Written
	// The move judges against a snapshot of its own, so it may find more
	// entries (producers committed meanwhile); its figures are the ones
	// that hold. With no room left it moves nothing.
	if err := s.rebaseStep(ctx, tx, s.sql.RebaseMove, &res); err != nil {
		return res, err
	}
	if counted > 0 && res.Delivered+res.Pending+res.Written == 0 {
		return res, fmt.Errorf("%w: entries committed since the count need more xids than lie below the oldest running transaction; run it again",
			ErrRebaseNoRoom)
	}
	keys, values, remove := settlementState(outbox.Settlement{To: res.NewCursor})
	if _, err := execCommit(ctx, tx, s.sql.WriteState, keys, values, remove); err != nil {
		return res, s.a.MapError(AreaOutbox, "rebase: write the cursor and commit", err)
	}
	return res, nil
}
