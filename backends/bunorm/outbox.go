package bunorm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/schema"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
)

// Enqueue writes one outbox entry with db, which should be the caller's own
// bun.Tx (or a bun.Conn inside a transaction): the entry then exists exactly
// when that transaction commits. On a *bun.DB it is a transaction of its
// own, committed at once, which is rarely what an outbox is for. The table
// is baton_outbox in db's search_path; OutboxStore.Enqueue writes into a
// configured schema.
//
// The id is the caller's (normally outbox.NewID(), a UUIDv7) and is the
// idempotency key the destination sees; the payload must be one JSON
// value (stored as jsonb, so it reads back equal as JSON, not byte for
// byte). Invalid input (outbox.ValidateEntry) is refused with an error
// wrapping outbox.ErrInvalidEntry before anything is sent, so the
// transaction stays usable; an id that an entry or a dead letter has, with
// one wrapping outbox.ErrIDInUse. Any other failure is an error of a statement
// inside the transaction, which PostgreSQL then refuses to continue: roll
// it back.
//
// The walk delivers entries in (xid, id) order: the order in which the
// producing transactions made their first write, not commit order. Make
// the entity's row write the transaction's first write and enqueue after
// it; the PostgreSQL adapter's Enqueue documents the order in full, and it
// holds here unchanged (the xid comes from the same column default).
func Enqueue(ctx context.Context, db bun.IDB, id outbox.ID, lane string, payload []byte) error {
	return enqueue(ctx, db, bun.Name(OutboxTable), bun.Name(OutboxDeadTable), id, lane, payload)
}

// enqueueSQL inserts an entry unless a dead letter has its id (it could
// never be parked): ?0 the outbox table, ?1 the dead letters, ?2 the id,
// ?3 the lane, ?4 the payload. xid and created_at take their defaults, so
// the entry carries the id of the transaction it is written in.
const enqueueSQL = `INSERT INTO ?0 (id, lane, payload)
SELECT ?2::uuid, ?3::text, ?4::jsonb
WHERE NOT EXISTS (SELECT 1 FROM ?1 WHERE id = ?2::uuid)`

func enqueue(ctx context.Context, db bun.IDB, table, dead schema.QueryAppender, id outbox.ID, lane string, payload []byte) error {
	if err := outbox.ValidateEntry(id, lane, payload); err != nil {
		return err
	}
	if db == nil {
		return errors.New("baton/bunorm: outbox enqueue: the database handle is nil; enqueue inside the transaction that makes the change")
	}
	res, err := db.NewRaw(enqueueSQL, table, dead, UUID(id), escapedText(lane), escapedText(payload)).Exec(ctx)
	if err != nil {
		return mapError(areaOutbox, "enqueue", err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("baton/bunorm: outbox enqueue %s: %w; use a fresh id (outbox.NewID)", id, outbox.ErrIDInUse)
	}
	return nil
}

// OutboxStoreOptions configure an OutboxStore. The zero value uses the
// defaults.
type OutboxStoreOptions struct {
	// Schema holds the outbox tables. "" uses the connection's search_path.
	Schema string
	// Logger receives the store's diagnostics. nil discards them.
	Logger *slog.Logger
}

func (o *OutboxStoreOptions) validate() error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Schema != "" {
		return validateSchemaName("OutboxStoreOptions.Schema", o.Schema)
	}
	return nil
}

// OutboxStore is the outbox.Store over baton_outbox, baton_outbox_state and
// baton_outbox_dead, on a bun.IDB. Create it with NewOutboxStore.
//
// Every method is one statement, or one short transaction (a savepoint on
// a bun.Tx), with the PostgreSQL adapter's statements: bun and pgx drivers
// can settle the same cursor, and one of each may hold the leader lock in
// turn. Scan reads only below the horizon, so a long transaction anywhere
// in the database pins the walk.
type OutboxStore struct {
	db   bun.IDB
	opts OutboxStoreOptions

	t, st, d schema.QueryAppender
}

var _ outbox.Store = (*OutboxStore)(nil)

// NewOutboxStore returns an OutboxStore over db (normally the *bun.DB), or
// an error naming the first invalid option. It asks the database one
// thing, standard_conforming_strings, and refuses a session without it
// (ErrNonStandardStrings); run CreateSchema first.
func NewOutboxStore(ctx context.Context, db bun.IDB, opts OutboxStoreOptions) (*OutboxStore, error) {
	if db == nil {
		return nil, errors.New("baton/bunorm: NewOutboxStore: the database handle is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if err := checkSession(ctx, db, "NewOutboxStore"); err != nil {
		return nil, err
	}
	return &OutboxStore{
		db: db, opts: opts,
		t:  tableName(opts.Schema, OutboxTable),
		st: tableName(opts.Schema, OutboxStateTable),
		d:  tableName(opts.Schema, OutboxDeadTable),
	}, nil
}

// Enqueue is the package-level Enqueue for this store's tables: it writes
// into baton_outbox of OutboxStoreOptions.Schema with db, the caller's
// transaction (the store's own handle is not used).
func (s *OutboxStore) Enqueue(ctx context.Context, db bun.IDB, id outbox.ID, lane string, payload []byte) error {
	return enqueue(ctx, db, s.t, s.d, id, lane, payload)
}

// outboxScanSQL is the walk's one bounded read; see the PostgreSQL
// adapter. ?0 the table, ?1 the cursor's xid (decimal text), ?2 its id, ?3
// the limit. The xid is read as text, which every driver returns whole.
//
// The xid is selected as text under its own name, so ORDER BY names the
// table's columns (o.xid, o.id), which the index holds; an unqualified
// "xid" would sort the text output column and read every entry after the
// cursor.
const outboxScanSQL = `SELECT o.xid::text AS xid, o.id, o.lane, o.payload, o.created_at FROM ?0 AS o
WHERE (o.xid, o.id) > (?1::xid8, ?2::uuid)
  AND o.xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY o.xid, o.id
LIMIT ?3`

// entryRow is one scanned entry.
type entryRow struct {
	XID       string    `bun:"xid"`
	ID        UUID      `bun:"id"`
	Lane      string    `bun:"lane"`
	Payload   []byte    `bun:"payload"`
	CreatedAt time.Time `bun:"created_at"`
}

// Scan implements outbox.Store in one statement.
func (s *OutboxStore) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if limit < 1 {
		return nil, fmt.Errorf("baton/bunorm: outbox scan: the limit is %d; it must be at least 1", limit)
	}
	xid, id := outbox.CursorState(after)
	// Row by row, so that reading stops once the payloads taken fill the
	// byte budget (outbox.ScanHasRoom); the driver discards the rest.
	rows, err := s.db.QueryContext(ctx, outboxScanSQL, s.t, xid, id, limit)
	if err != nil {
		return nil, mapError(areaOutbox, "scan", err)
	}
	defer rows.Close()
	var (
		entries []outbox.Entry
		taken   int
	)
	for outbox.ScanHasRoom(taken) && rows.Next() {
		var r entryRow
		if err := rows.Scan(&r.XID, &r.ID, &r.Lane, &r.Payload, &r.CreatedAt); err != nil {
			return nil, mapError(areaOutbox, "scan", err)
		}
		x, err := strconv.ParseUint(r.XID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("baton/bunorm: outbox scan: xid %q: %w", r.XID, err)
		}
		entries = append(entries, outbox.Entry{XID: x, ID: outbox.ID(r.ID), Lane: r.Lane, Payload: r.Payload, CreatedAt: r.CreatedAt})
		taken += len(r.Payload)
	}
	if err := rows.Close(); err != nil {
		return nil, mapError(areaOutbox, "scan", err)
	}
	if err := rows.Err(); err != nil {
		return nil, mapError(areaOutbox, "scan", err)
	}
	return entries, nil
}

// The settlement's statements; see the PostgreSQL adapter for why each is
// shaped as it is.
const (
	// outboxLockCursorSQL locks both cursor keys (inserting absent ones
	// with the zero cursor) and returns their latest committed values. ?0
	// the state table, ?1/?3 the keys, ?2/?4 the zero values.
	outboxLockCursorSQL = `INSERT INTO ?0 AS s (key, value) VALUES (?1, ?2), (?3, ?4)
ON CONFLICT (key) DO UPDATE SET value = s.value
RETURNING key, value`

	// outboxParkSQL copies parked entries to the dead letters; they stay
	// in the outbox below the cursor until retention, and a dead letter
	// with the same id is replaced (see the PostgreSQL adapter for why). ?0
	// the outbox, ?1 the dead letters, ?2 ids (uuid[]), ?3 reasons
	// (text[]), ?4/?5 the cursor the pass started from, ?6/?7 the one it
	// settles at.
	outboxParkSQL = `INSERT INTO ?1 AS dl (id, xid, lane, payload, error)
SELECT o.id, o.xid, o.lane, o.payload, p.error
FROM unnest(?2::uuid[], ?3::text[]) AS p (id, error)
JOIN ?0 AS o ON o.id = p.id
WHERE (o.xid, o.id) > (?4::xid8, ?5::uuid)
  AND (o.xid, o.id) <= (?6::xid8, ?7::uuid)
ON CONFLICT (id) DO UPDATE SET xid = excluded.xid, lane = excluded.lane, payload = excluded.payload,
    error = excluded.error || ' (this replaced a dead letter with the same id, parked at ' || dl.parked_at::text || ')',
    parked_at = now(), requeued_as = NULL, requeued_at = NULL`

	// outboxWriteStateSQL upserts ?1/?2 (keys and values, text[]) and
	// removes ?3 (keys, text[]) from the state table ?0.
	outboxWriteStateSQL = `WITH removed AS (
    DELETE FROM ?0 WHERE key = ANY (?3::text[])
)
INSERT INTO ?0 AS s (key, value)
SELECT u.key, u.value FROM unnest(?1::text[], ?2::text[]) AS u (key, value)
ON CONFLICT (key) DO UPDATE SET value = excluded.value
WHERE s.value IS DISTINCT FROM excluded.value`
)

// Settle implements outbox.Store in one READ COMMITTED transaction (bun's
// RunInTx): lock and read the stored cursor; when it is st.From, move
// st.Park to the dead letters and write the state; otherwise roll back and
// return an error wrapping outbox.ErrCursorMoved. The cursor keys are
// always written from st.To. Every parked entry must lie between st.From
// (exclusive) and st.To (inclusive), or nothing is written.
func (s *OutboxStore) Settle(ctx context.Context, st outbox.Settlement) error {
	if err := outbox.ValidateSettlement(st); err != nil {
		return fmt.Errorf("baton/bunorm: outbox settle: %w", err)
	}
	return s.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
		return s.settleIn(ctx, tx, st)
	})
}

// settleIn runs a validated settlement in tx, everything but its commit.
func (s *OutboxStore) settleIn(ctx context.Context, tx bun.Tx, st outbox.Settlement) error {
	keys, values, remove := settlementState(st)
	zeroXID, zeroID := outbox.CursorState(outbox.Cursor{})
	var locked []OutboxState
	if err := tx.NewRaw(outboxLockCursorSQL, s.st, outbox.KeyLastScannedXID, zeroXID, outbox.KeyLastScannedID, zeroID).
		Scan(ctx, &locked); err != nil {
		return mapError(areaSettle, "settle: lock the cursor", err)
	}
	stored := make(map[string]string, 2)
	for _, kv := range locked {
		if kv.Value != nil { // NULL reads as absent, as in State
			stored[kv.Key] = *kv.Value
		}
	}
	cur, err := outbox.CursorFromState(stored)
	if err != nil {
		return fmt.Errorf("baton/bunorm: outbox settle: the stored cursor is unreadable: %w", err)
	}
	if cur != st.From {
		s.opts.Logger.DebugContext(ctx, "baton: outbox settlement refused: the cursor moved",
			"stored_xid", cur.XID, "stored_id", cur.ID, "from_xid", st.From.XID, "from_id", st.From.ID)
		return fmt.Errorf("baton/bunorm: outbox settle: the stored cursor is (%d, %s), the pass started from (%d, %s): %w",
			cur.XID, cur.ID, st.From.XID, st.From.ID, outbox.ErrCursorMoved)
	}
	if len(st.Park) > 0 {
		ids := make([]string, len(st.Park))
		reasons := make([]string, len(st.Park))
		for i, p := range st.Park {
			ids[i], reasons[i] = p.Entry.ID.String(), p.Reason
		}
		fromXID, fromID := outbox.CursorState(st.From)
		toXID, toID := outbox.CursorState(st.To)
		res, err := tx.NewRaw(outboxParkSQL, s.t, s.d, pgdialect.Array(ids), pgdialect.Array(reasons),
			fromXID, fromID, toXID, toID).Exec(ctx)
		if err != nil {
			return mapError(areaSettle, "settle: park", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
			return fmt.Errorf("baton/bunorm: outbox settle: %d of the %d entries to park are in the outbox between the two cursors; a parked entry must be one the pass scanned, once; nothing was written",
				n, len(ids))
		}
	}
	if _, err := tx.NewRaw(outboxWriteStateSQL, s.st, pgdialect.Array(keys), pgdialect.Array(values), pgdialect.Array(remove)).
		Exec(ctx); err != nil {
		return mapError(areaSettle, "settle: write state", err)
	}
	return nil
}

// settlementState splits a settlement's state into the keys to upsert (the
// cursor from s.To first) and the keys to remove.
func settlementState(s outbox.Settlement) (keys, values, remove []string) {
	xid, id := outbox.CursorState(s.To)
	keys = append(make([]string, 0, len(s.State)+2), outbox.KeyLastScannedXID, outbox.KeyLastScannedID)
	values = append(make([]string, 0, len(s.State)+2), xid, id)
	remove = []string{}
	for k, v := range s.State {
		switch {
		case k == outbox.KeyLastScannedXID || k == outbox.KeyLastScannedID:
		case v == nil:
			remove = append(remove, k)
		default:
			keys = append(keys, k)
			values = append(values, *v)
		}
	}
	return keys, values, remove
}

// State implements outbox.Store in one statement, through bun's query
// builder.
func (s *OutboxStore) State(ctx context.Context) (map[string]string, error) {
	var rows []OutboxState
	q := s.db.NewSelect().Model(&rows).Where("value IS NOT NULL")
	if s.opts.Schema != "" {
		q = q.ModelTableExpr("? AS ?TableAlias", s.st)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, mapError(areaOutbox, "state", err)
	}
	state := make(map[string]string, len(rows))
	for _, r := range rows {
		state[r.Key] = *r.Value
	}
	return state, nil
}

// NextXID implements outbox.Store in one statement.
func (s *OutboxStore) NextXID(ctx context.Context) (uint64, error) {
	var next string
	if err := s.db.NewRaw(pgsql.NextXIDSQL).Scan(ctx, &next); err != nil {
		return 0, mapError(areaOutbox, "read the transaction counter", err)
	}
	return strconv.ParseUint(next, 10, 64)
}

// deadRow is one dead letter as read; Payload only when selected.
type deadRow struct {
	ID         UUID         `bun:"id"`
	XID        string       `bun:"xid"`
	Lane       string       `bun:"lane"`
	Error      string       `bun:"error"`
	ParkedAt   time.Time    `bun:"parked_at"`
	RequeuedAs UUID         `bun:"requeued_as"`
	RequeuedAt bun.NullTime `bun:"requeued_at"`
	Payload    []byte       `bun:"payload"`
}

func (r deadRow) deadLetter() (outbox.DeadLetter, error) {
	x, err := strconv.ParseUint(r.XID, 10, 64)
	if err != nil {
		return outbox.DeadLetter{}, fmt.Errorf("baton/bunorm: outbox dead letter %s: xid %q: %w", r.ID, r.XID, err)
	}
	return outbox.DeadLetter{ID: outbox.ID(r.ID), XID: x, Lane: r.Lane, Payload: r.Payload, Error: r.Error,
		ParkedAt: r.ParkedAt, RequeuedAs: outbox.ID(r.RequeuedAs), RequeuedAt: r.RequeuedAt.Time}, nil
}

const deadColumns = `id, xid::text AS xid, lane, error, parked_at, requeued_as, requeued_at`

// ListDead implements outbox.Store in one statement, along
// baton_outbox_dead_parked: newest parked first and, parked together, by
// id. A page that comes back empty after opts.Before checks that Before
// still exists: when retention removed it, the error wraps
// outbox.ErrNotFound instead of pretending the listing ended.
func (s *OutboxStore) ListDead(ctx context.Context, opts outbox.ListOptions) ([]outbox.DeadLetter, error) {
	limit := opts.Limit
	switch {
	case limit == 0:
		limit = outbox.DefaultListLimit
	case limit < 0 || limit > outbox.MaxListLimit:
		return nil, fmt.Errorf("baton/bunorm: outbox list dead letters: ListOptions.Limit is %d; it must be 0 (the default, %d) to %d",
			opts.Limit, outbox.DefaultListLimit, outbox.MaxListLimit)
	}
	var rows []deadRow
	var q *bun.RawQuery
	if opts.Before.IsNil() {
		q = s.db.NewRaw(`SELECT `+deadColumns+` FROM ?0 ORDER BY parked_at DESC, id LIMIT ?1`, s.d, limit)
	} else {
		q = s.db.NewRaw(`SELECT `+deadColumns+` FROM ?0
WHERE parked_at <= (SELECT b.parked_at FROM ?0 AS b WHERE b.id = ?2)
  AND (parked_at < (SELECT b.parked_at FROM ?0 AS b WHERE b.id = ?2) OR id > ?2)
ORDER BY parked_at DESC, id
LIMIT ?1`, s.d, limit, opts.Before.String())
	}
	if err := q.Scan(ctx, &rows); err != nil {
		return nil, mapError(areaOutbox, "list dead letters", err)
	}
	if len(rows) == 0 && !opts.Before.IsNil() {
		var exists bool
		if err := s.db.NewRaw(`SELECT EXISTS (SELECT 1 FROM ?0 WHERE id = ?1)`, s.d, opts.Before.String()).Scan(ctx, &exists); err != nil {
			return nil, mapError(areaOutbox, "list dead letters", err)
		}
		if !exists {
			return nil, fmt.Errorf("baton/bunorm: outbox list dead letters: ListOptions.Before %s: %w", opts.Before, outbox.ErrNotFound)
		}
	}
	out := make([]outbox.DeadLetter, len(rows))
	for i, r := range rows {
		d, err := r.deadLetter()
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// GetDead implements outbox.Store in one statement.
func (s *OutboxStore) GetDead(ctx context.Context, id outbox.ID) (outbox.DeadLetter, error) {
	var r deadRow
	if err := s.db.NewRaw(`SELECT `+deadColumns+`, payload FROM ?0 WHERE id = ?1`, s.d, id.String()).Scan(ctx, &r); err != nil {
		return outbox.DeadLetter{}, mapError(areaOutbox, "get dead letter "+id.String(), err)
	}
	return r.deadLetter()
}

// Requeue implements outbox.Store in one transaction: lock the dead letter,
// check it was not requeued before and newID is no dead letter's id, then
// insert the new entry and record requeued_as in one statement. The new
// entry's xid is this transaction's, so it goes after everything enqueued
// before.
func (s *OutboxStore) Requeue(ctx context.Context, id, newID outbox.ID) error {
	op := "requeue " + id.String()
	if newID.IsNil() {
		return fmt.Errorf("baton/bunorm: outbox %s: %w: the new id is the nil UUID; use outbox.NewID()", op, outbox.ErrInvalidEntry)
	}
	return s.db.RunInTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, func(ctx context.Context, tx bun.Tx) error {
		var locked struct {
			RequeuedAs UUID `bun:"requeued_as"`
			DeadID     bool `bun:"dead_id"`
		}
		if err := tx.NewRaw(`SELECT dl.requeued_as, EXISTS (SELECT 1 FROM ?0 AS used WHERE used.id = ?2) AS dead_id
FROM ?0 AS dl WHERE dl.id = ?1 FOR UPDATE OF dl`, s.d, id.String(), newID.String()).Scan(ctx, &locked); err != nil {
			return mapError(areaOutbox, op, err)
		}
		if !locked.RequeuedAs.IsZero() {
			return fmt.Errorf("baton/bunorm: outbox %s: requeued before as %s: %w", op, locked.RequeuedAs, outbox.ErrAlreadyRequeued)
		}
		if locked.DeadID {
			return fmt.Errorf("baton/bunorm: outbox %s: the new id %s is a dead letter's id; use a fresh outbox.NewID()", op, newID)
		}
		res, err := tx.NewRaw(`WITH requeued AS (
    INSERT INTO ?0 (id, lane, payload)
    SELECT ?3, dl.lane, dl.payload FROM ?1 AS dl WHERE dl.id = ?2
    RETURNING id
)
UPDATE ?1 AS dl SET requeued_as = r.id, requeued_at = now()
FROM requeued AS r
WHERE dl.id = ?2`, s.t, s.d, id.String(), newID.String()).Exec(ctx)
		if err != nil {
			return mapError(areaOutbox, op, err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 { // cannot happen: the row is locked
			return fmt.Errorf("baton/bunorm: outbox %s: the locked dead letter was not updated", op)
		}
		return nil
	})
}

// DeleteDelivered implements outbox.Store in one statement: it looks at no
// more than the limit oldest entries at or below the cursor, in walk order,
// and deletes those created more than the window ago.
func (s *OutboxStore) DeleteDelivered(ctx context.Context, upTo outbox.Cursor, window time.Duration, limit int) (int, error) {
	if err := checkRetention("delete delivered entries", window, limit); err != nil {
		return 0, err
	}
	xid, id := outbox.CursorState(upTo)
	res, err := s.db.NewRaw(`DELETE FROM ?0
WHERE ctid = ANY (ARRAY(
    SELECT head.ctid FROM (
        SELECT ctid, created_at FROM ?0
        WHERE (xid, id) <= (?1::xid8, ?2::uuid)
        ORDER BY xid, id
        LIMIT ?4
    ) AS head
    WHERE head.created_at < now() - ?3 * interval '1 microsecond'))`, s.t, xid, id, window.Microseconds(), limit).Exec(ctx)
	if err != nil {
		return 0, mapError(areaOutbox, "delete delivered entries", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// DeleteRequeued implements outbox.Store in one statement, oldest requeue
// first, along baton_outbox_dead_requeued.
func (s *OutboxStore) DeleteRequeued(ctx context.Context, window time.Duration, limit int) (int, error) {
	if err := checkRetention("delete requeued dead letters", window, limit); err != nil {
		return 0, err
	}
	res, err := s.db.NewRaw(`DELETE FROM ?0
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ?0
    WHERE requeued_as IS NOT NULL AND requeued_at < now() - ?1 * interval '1 microsecond'
    ORDER BY requeued_at
    LIMIT ?2))`, s.d, window.Microseconds(), limit).Exec(ctx)
	if err != nil {
		return 0, mapError(areaOutbox, "delete requeued dead letters", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

func checkRetention(op string, window time.Duration, limit int) error {
	switch {
	case window < 0:
		return fmt.Errorf("baton/bunorm: outbox %s: the window is %v; it must not be negative", op, window)
	case limit < 1:
		return fmt.Errorf("baton/bunorm: outbox %s: the limit is %d; it must be at least 1", op, limit)
	}
	return nil
}
