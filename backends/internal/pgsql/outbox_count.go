package pgsql

import (
	"context"

	"github.com/baton-go/baton/core/outbox"
)

var _ outbox.Counter = (*OutboxStore)(nil)

// outboxCountPendingSQL counts, at most $3, the entries of the quoted
// outbox table t after the cursor ($1, $2): the walk's index, from the
// cursor on, and no further than the limit. Every committed entry counts,
// below the horizon or not.
func outboxCountPendingSQL(t string) string {
	return `SELECT count(*) FROM (SELECT 1 FROM ` + t + `
WHERE (xid, id) > ($1::xid8, $2::uuid)
ORDER BY xid, id
LIMIT $3) AS pending`
}

// outboxCountDeadSQL counts, at most $1, the dead letters of the quoted
// table d that were not requeued. It is no hot path (a leader samples it
// at most every outbox.BacklogEvery) and the table holds what operators
// have not handled yet, so a bounded read of it needs no index of its own.
func outboxCountDeadSQL(d string) string {
	return `SELECT count(*) FROM (SELECT 1 FROM ` + d + `
WHERE requeued_as IS NULL
LIMIT $1) AS waiting`
}

// CountPending implements outbox.Counter in one statement.
func (s *OutboxStore) CountPending(ctx context.Context, after outbox.Cursor, limit int) (int, error) {
	if limit < 1 {
		return 0, s.a.errorf("outbox count pending: the limit is %d; it must be at least 1", limit)
	}
	var n int64
	if err := s.db.QueryRow(ctx, s.sql.CountPending, after.XID, [16]byte(after.ID), limit).Scan(&n); err != nil {
		return 0, s.a.MapError(AreaOutbox, "count pending entries", err)
	}
	return int(n), nil
}

// CountDead implements outbox.Counter in one statement.
func (s *OutboxStore) CountDead(ctx context.Context, limit int) (int, error) {
	if limit < 1 {
		return 0, s.a.errorf("outbox count dead letters: the limit is %d; it must be at least 1", limit)
	}
	var n int64
	if err := s.db.QueryRow(ctx, s.sql.CountDead, limit).Scan(&n); err != nil {
		return 0, s.a.MapError(AreaOutbox, "count dead letters", err)
	}
	return int(n), nil
}
