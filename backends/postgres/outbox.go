package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/pgrules"
)

// The outbox tables, created by the 0003_outbox migration.
const (
	// OutboxTable holds the entries not yet deleted by retention.
	OutboxTable = "baton_outbox"
	// OutboxStateTable holds the outbox's state keys (outbox.StateKeys).
	OutboxStateTable = "baton_outbox_state"
	// OutboxDeadTable holds the parked entries (dead letters).
	OutboxDeadTable = "baton_outbox_dead"
)

// enqueueSQL is Enqueue's statement over the table found through the
// search_path. xid and created_at come from the column defaults, so the
// entry carries the transaction id of the transaction it is written in.
var enqueueSQL = outboxEnqueueSQL(pgx.Identifier{OutboxTable}.Sanitize(), pgx.Identifier{OutboxDeadTable}.Sanitize())

// Enqueue writes one outbox entry inside the caller's transaction tx, into
// baton_outbox found through tx's search_path (use OutboxStore.Enqueue for
// tables in a configured schema). The entry exists exactly when tx commits:
// if tx rolls back, it was never there.
//
// The id is the caller's: normally outbox.NewID(), a UUIDv7. It is the
// idempotency key the destination sees. The payload must be one JSON value;
// it is stored as jsonb, which normalizes it (white space, key order,
// duplicate keys), so it is read back equal as JSON, not byte for byte.
// A nil id, an invalid lane or a payload that is not JSON is refused with
// an error wrapping outbox.ErrInvalidEntry before anything is sent, so tx
// is still usable afterwards. An id that an entry or a dead letter has is
// refused with an error wrapping outbox.ErrIDInUse (a dead letter's id
// leaves tx usable; an entry's fails the statement on the primary key).
// Any other failure is an error of a statement inside tx, which PostgreSQL
// then refuses to continue: roll tx back.
//
// # Order
//
// The walk delivers entries in (xid, id) order, where xid is the id of the
// transaction that enqueued them (the column default pg_current_xact_id()).
// PostgreSQL assigns that id at a transaction's first write, not at BEGIN
// and not at COMMIT, so the order is the order in which the producing
// transactions made their first writes: xid-assignment order. It is not
// the order in which they committed; a transaction that wrote early and
// commits late is delivered before one that wrote later and committed
// first, and the walk waits for it (nothing is read above the oldest
// transaction still running).
//
// To keep the changes of one entity in order, make the write of the
// entity's row the transaction's first write, and enqueue after it:
//
//	BEGIN
//	UPDATE profiles SET ... WHERE id = $1   -- first write: takes the xid and the row lock
//	postgres.Enqueue(ctx, tx, outbox.NewID(), lane, payload)
//	COMMIT
//
// A second transaction changing the same row then waits for the row lock
// until the first ends, and its entry follows the first's. If anything
// else writes first (the enqueue itself, or an unrelated row), a
// transaction can hold a smaller xid than one that changed the entity
// before it, and its later change is delivered as if it were earlier.
// Strictly, an UPDATE or DELETE takes the xid when it starts, before it
// may wait for the row lock, whereas SELECT ... FOR UPDATE takes it only
// once the lock is granted. So two UPDATEs reaching the row at practically
// the same instant can get their xids in the opposite order of their
// changes, and so can a transaction that locked the row with
// SELECT ... FOR UPDATE and an UPDATE queued behind it. Where that matters,
// make SELECT ... FROM profiles WHERE id = $1 FOR UPDATE the first
// statement of every transaction that changes the entity: each then takes
// its xid only after the previous one has ended.
//
// The entries of one transaction are delivered in id order: UUIDv7 ids
// made in different milliseconds sort in the order they were made, those
// made within one millisecond in random order.
func Enqueue(ctx context.Context, tx pgx.Tx, id outbox.ID, lane string, payload []byte) error {
	return enqueue(ctx, tx, enqueueSQL, id, lane, payload)
}

func enqueue(ctx context.Context, tx pgx.Tx, query string, id outbox.ID, lane string, payload []byte) error {
	if err := outbox.ValidateEntry(id, lane, payload); err != nil {
		return err
	}
	if tx == nil {
		return errors.New("baton/postgres: outbox enqueue: the transaction is nil; enqueue inside the transaction that makes the change")
	}
	tag, err := tx.Exec(ctx, query, [16]byte(id), lane, payload)
	if err != nil {
		return outboxError("enqueue", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("baton/postgres: outbox enqueue %s: %w; use a fresh id (outbox.NewID)", id, outbox.ErrIDInUse)
	}
	return nil
}

// OutboxStoreOptions configure an OutboxStore. The zero value uses the
// defaults.
type OutboxStoreOptions struct {
	// Schema holds the outbox tables. "" uses the connection's search_path;
	// otherwise every statement names the tables in this schema.
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
// baton_outbox_dead. Create it with NewOutboxStore.
//
// Every method is one statement, or one short transaction, on a connection
// of the pool; none holds a transaction across delivery. Scan reads only
// below the horizon (xids older than the oldest transaction still running
// anywhere in the database), so a long transaction pins the walk; see
// Enqueue for what the order means.
type OutboxStore struct {
	pool *pgxpool.Pool
	opts OutboxStoreOptions
	sql  outboxStatements
}

var _ outbox.Store = (*OutboxStore)(nil)

// NewOutboxStore returns an OutboxStore over pool, or an error naming the
// first invalid option. It sends nothing to the database; run Migrate (or
// the migrations) first.
func NewOutboxStore(pool *pgxpool.Pool, opts OutboxStoreOptions) (*OutboxStore, error) {
	if pool == nil {
		return nil, errors.New("baton/postgres: NewOutboxStore: the pool is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &OutboxStore{pool: pool, opts: opts, sql: newOutboxStatements(opts.Schema)}, nil
}

// Enqueue is the package-level Enqueue for this store's tables: it writes
// into baton_outbox of OutboxStoreOptions.Schema (or of tx's search_path
// when that is empty). tx is the caller's transaction and may come from any
// pool or connection to the same database; the store's own pool is not used.
func (s *OutboxStore) Enqueue(ctx context.Context, tx pgx.Tx, id outbox.ID, lane string, payload []byte) error {
	return enqueue(ctx, tx, s.sql.enqueue, id, lane, payload)
}

// outboxStatements are the store's statements over its (quoted) tables.
type outboxStatements struct {
	enqueue        string
	scan           string
	lockCursor     string
	park           string
	writeState     string
	state          string
	listDead       string
	listDeadBefore string
	deadExists     string
	getDead        string
	lockDead       string
	requeue        string
	deleteDone     string
	deleteRequeued string
	rebaseCount    string
	rebaseMove     string
}

func newOutboxStatements(schema string) outboxStatements {
	name := func(table string) string {
		if schema == "" {
			return pgx.Identifier{table}.Sanitize()
		}
		return pgx.Identifier{schema, table}.Sanitize()
	}
	t, st, d := name(OutboxTable), name(OutboxStateTable), name(OutboxDeadTable)
	return outboxStatements{
		enqueue:        outboxEnqueueSQL(t, d),
		scan:           outboxScanSQL(t),
		lockCursor:     outboxLockCursorSQL(st),
		park:           outboxParkSQL(t, d),
		writeState:     outboxWriteStateSQL(st),
		state:          `SELECT key, value FROM ` + st + ` WHERE value IS NOT NULL`,
		listDead:       outboxListDeadSQL(d, false),
		listDeadBefore: outboxListDeadSQL(d, true),
		deadExists:     `SELECT EXISTS (SELECT 1 FROM ` + d + ` WHERE id = $1)`,
		getDead:        `SELECT id, xid, lane, error, parked_at, requeued_as, requeued_at, payload FROM ` + d + ` WHERE id = $1`,
		lockDead: `SELECT dl.requeued_as, EXISTS (SELECT 1 FROM ` + d + ` AS used WHERE used.id = $2)
FROM ` + d + ` AS dl WHERE dl.id = $1 FOR UPDATE OF dl`,
		requeue:        outboxRequeueSQL(t, d),
		deleteDone:     outboxDeleteDeliveredSQL(t),
		deleteRequeued: outboxDeleteRequeuedSQL(d),
		rebaseCount:    outboxRebaseSQL(t, false),
		rebaseMove:     outboxRebaseSQL(t, true),
	}
}

// outboxEnqueueSQL inserts one entry into the quoted outbox table t.
// Parameters: $1 id, $2 lane, $3 payload (JSON).
func outboxEnqueueSQL(t, d string) string {
	// Refused (no row) when a dead letter has the id: it could never be
	// parked. The check is one probe of the dead letters' primary key.
	return `INSERT INTO ` + t + ` (id, lane, payload)
SELECT $1::uuid, $2::text, $3::jsonb
WHERE NOT EXISTS (SELECT 1 FROM ` + d + ` WHERE id = $1::uuid)`
}

// outboxScanSQL is the walk's one bounded read. Parameters: $1 the cursor's
// xid (xid8), $2 its id, $3 the limit.
//
// The row comparison and the ORDER BY both follow baton_outbox_walk
// (xid, id), so the scan starts at the cursor and stops after $3 entries,
// however many delivered entries lie behind the cursor. The horizon
// pg_snapshot_xmin(pg_current_snapshot()) is the oldest xid still running
// when the statement starts: every xid below it has committed or rolled
// back, so nothing can appear later below it, and the entries of rolled
// back transactions are not visible. The columns are selected under their
// own names, so ORDER BY sorts the columns the index holds.
func outboxScanSQL(t string) string {
	return `SELECT xid, id, lane, payload, created_at FROM ` + t + `
WHERE (xid, id) > ($1::xid8, $2::uuid)
  AND xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY xid, id
LIMIT $3`
}

// outboxLockCursorSQL locks the two cursor keys of the quoted state table
// st for the settling transaction and returns their latest committed
// values. Parameters: $1 and $3 the keys, $2 and $4 the zero cursor's
// values.
//
// An absent key is inserted with its zero value, so there is always a row
// to lock, even for the first settlement of all: of two settlements from
// the zero cursor at once, the second waits on the first's inserted row
// and then reads what the first wrote. ON CONFLICT DO UPDATE locks an
// existing row and returns its latest committed version (not the
// statement's snapshot), which is what the compare-and-set must compare
// with. Both rows are locked in one order, so concurrent settlements
// cannot deadlock on them. A lost compare-and-set rolls back, and the
// inserted zero values with it.
func outboxLockCursorSQL(st string) string {
	return `INSERT INTO ` + st + ` AS s (key, value) VALUES ($1, $2), ($3, $4)
ON CONFLICT (key) DO UPDATE SET value = s.value
RETURNING key, value`
}

// outboxParkSQL copies parked entries from the quoted outbox table t to
// the dead letters d in one statement. Parameters: $1 ids (uuid[]), $2
// reasons (text[]), $3/$4 the cursor the pass started from, $5/$6 the
// cursor it settles at. Only entries between the two cursors are copied,
// as the pass saw them; the caller compares the row count with the entries
// it asked for.
//
// The entry stays in t, below the cursor like a delivered one, until
// retention deletes it: its id is held by a committed row of t at every
// moment until its dead letter is committed. An Enqueue of the same id
// therefore meets the primary key of t (ErrIDInUse at once) or, later, the
// dead letter, under any interleaving; had the park deleted the entry, an
// Enqueue racing the uncommitted park would pass the dead-letter check,
// wait on the primary key, and succeed when the park committed, leaving
// the id in both tables.
//
// A dead letter that already has the id (possible only for rows written
// around Enqueue, or by a version before parking copied) is replaced by
// the newer entry rather than failing every settlement on the primary
// key; the error says so.
func outboxParkSQL(t, d string) string {
	return `INSERT INTO ` + d + ` AS dl (id, xid, lane, payload, error)
SELECT o.id, o.xid, o.lane, o.payload, p.error
FROM unnest($1::uuid[], $2::text[]) AS p (id, error)
JOIN ` + t + ` AS o ON o.id = p.id
WHERE (o.xid, o.id) > ($3::xid8, $4::uuid)
  AND (o.xid, o.id) <= ($5::xid8, $6::uuid)
ON CONFLICT (id) DO UPDATE SET xid = excluded.xid, lane = excluded.lane, payload = excluded.payload,
    error = excluded.error || ' (this replaced a dead letter with the same id, parked at ' || dl.parked_at::text || ')',
    parked_at = now(), requeued_as = NULL, requeued_at = NULL`
}

// outboxWriteStateSQL upserts and removes state keys of the quoted state
// table st in one statement. Parameters: $1 keys and $2 values to write
// (text[]), $3 keys to remove (text[]); the two lists never share a key.
// A value that did not change is not rewritten.
func outboxWriteStateSQL(st string) string {
	return `WITH removed AS (
    DELETE FROM ` + st + ` WHERE key = ANY ($3::text[])
)
INSERT INTO ` + st + ` AS s (key, value)
SELECT u.key, u.value FROM unnest($1::text[], $2::text[]) AS u (key, value)
ON CONFLICT (key) DO UPDATE SET value = excluded.value
WHERE s.value IS DISTINCT FROM excluded.value`
}

// outboxListDeadSQL lists dead letters of the quoted table d without
// payloads: newest parked first and, parked together (one settlement), by
// id. Parameters: $1 the limit; with before, $2 the id of the last dead
// letter of the previous page.
//
// Both follow baton_outbox_dead_parked (parked_at DESC, id) forwards. The
// previous page's last parked_at comes from an uncorrelated subquery by the
// primary key, evaluated once, so "parked_at <= it" bounds the index scan;
// the rest of the condition only skips the dead letters parked together
// with the previous page's last one and listed on it already.
func outboxListDeadSQL(d string, before bool) string {
	const columns = `id, xid, lane, error, parked_at, requeued_as, requeued_at`
	if !before {
		return `SELECT ` + columns + ` FROM ` + d + `
ORDER BY parked_at DESC, id
LIMIT $1`
	}
	return `SELECT ` + columns + ` FROM ` + d + `
WHERE parked_at <= (SELECT b.parked_at FROM ` + d + ` AS b WHERE b.id = $2)
  AND (parked_at < (SELECT b.parked_at FROM ` + d + ` AS b WHERE b.id = $2) OR id > $2)
ORDER BY parked_at DESC, id
LIMIT $1`
}

// outboxRequeueSQL inserts the dead letter $1 of the quoted table d as a
// new entry $2 of the quoted outbox table t and records requeued_as, in one
// statement. Its xid is the requeuing transaction's, so the new entry goes
// after everything already enqueued.
func outboxRequeueSQL(t, d string) string {
	return `WITH requeued AS (
    INSERT INTO ` + t + ` (id, lane, payload)
    SELECT $2, dl.lane, dl.payload FROM ` + d + ` AS dl WHERE dl.id = $1
    RETURNING id
)
UPDATE ` + d + ` AS dl SET requeued_as = r.id, requeued_at = now()
FROM requeued AS r
WHERE dl.id = $1`
}

// outboxDeleteDeliveredSQL deletes delivered entries of the quoted outbox
// table t. Parameters: $1/$2 the cursor (nothing above it is touched), $3
// the retention window (interval), $4 the limit.
//
// It looks at no more than the $4 oldest entries at or below the cursor,
// in walk order along baton_outbox_walk, and deletes those among them
// created more than the window ago. Filtering the whole range up to the
// cursor instead would read every entry kept for the window on every sweep
// that finds nothing old enough, which is the usual sweep. Creation order
// follows walk order closely but not exactly (a transaction may start long
// before its first write), so a sweep may delete fewer than it could; the
// rest go in a later sweep. The rows are picked and deleted by their tuple
// ids in one statement (same snapshot), so the delete itself is a TID scan.
func outboxDeleteDeliveredSQL(t string) string {
	return `DELETE FROM ` + t + `
WHERE ctid = ANY (ARRAY(
    SELECT head.ctid FROM (
        SELECT ctid, created_at FROM ` + t + `
        WHERE (xid, id) <= ($1::xid8, $2::uuid)
        ORDER BY xid, id
        LIMIT $4
    ) AS head
    WHERE head.created_at < now() - $3::interval))`
}

// outboxDeleteRequeuedSQL deletes dead letters of the quoted table d
// requeued more than the window ago. Parameters: $1 the window (interval),
// $2 the limit. The oldest go first, along the partial index
// baton_outbox_dead_requeued, which holds requeued dead letters only: the
// ones never requeued, kept for an operator, are not even read.
func outboxDeleteRequeuedSQL(d string) string {
	return `DELETE FROM ` + d + `
WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM ` + d + `
    WHERE requeued_as IS NOT NULL AND requeued_at < now() - $1::interval
    ORDER BY requeued_at
    LIMIT $2))`
}

// Scan implements outbox.Store in one statement. Rows are decoded one at a
// time as they arrive, and reading stops once the payloads taken fill the
// byte budget (outbox.ScanHasRoom); the rows after that are discarded as
// they are read, never held. Asking the server for the budget instead
// would cost every scan a second conversion of each payload to text.
func (s *OutboxStore) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if limit < 1 {
		return nil, fmt.Errorf("baton/postgres: outbox scan: the limit is %d; it must be at least 1", limit)
	}
	rows, err := s.pool.Query(ctx, s.sql.scan, after.XID, [16]byte(after.ID), limit)
	if err != nil {
		return nil, outboxError("scan", err)
	}
	defer rows.Close()
	var (
		entries []outbox.Entry
		taken   int
	)
	for outbox.ScanHasRoom(taken) && rows.Next() {
		e, err := scanOutboxEntry(rows)
		if err != nil {
			return nil, outboxError("scan", err)
		}
		entries = append(entries, e)
		taken += len(e.Payload)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, outboxError("scan", err)
	}
	return entries, nil
}

// scanOutboxEntry decodes one row of xid, id, lane, payload, created_at.
// pgx decodes xid8 as the full unsigned 64 bits (epoch and xid), so values
// above 2^63 arrive intact.
func scanOutboxEntry(row pgx.CollectableRow) (outbox.Entry, error) {
	var (
		e       outbox.Entry
		payload []byte
	)
	if err := row.Scan(&e.XID, (*[16]byte)(&e.ID), &e.Lane, &payload, &e.CreatedAt); err != nil {
		return outbox.Entry{}, err
	}
	e.Payload = payload
	return e, nil
}

// Settle implements outbox.Store in one transaction: lock and read the
// stored cursor; when it is s.From, copy s.Park to the dead letters
// (outboxParkSQL says why they stay in the outbox below the cursor) and
// write the state, then commit. When it is not, roll back and return
// ErrCursorMoved; nothing was written.
//
// The cursor keys are always written from s.To; cursor keys in s.State
// are ignored. Every entry of s.Park must still be in the outbox between
// s.From (exclusive) and s.To (inclusive); otherwise nothing is written and
// the error says how many were found.
//
// A settlement without parked entries takes two round trips: BEGIN with
// the cursor lock in one pipeline, the state write with COMMIT in another.
// Parking adds one.
func (s *OutboxStore) Settle(ctx context.Context, st outbox.Settlement) error {
	if err := outbox.ValidateSettlement(st); err != nil {
		return fmt.Errorf("baton/postgres: outbox settle: %w", err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return settleError("get a connection", err)
	}
	// The pool closes a connection released inside a transaction rather
	// than reuse it; the rollback below is the ordinary way out.
	defer conn.Release()
	committed := false
	defer func() {
		if !committed && conn.Conn().PgConn().TxStatus() != 'I' {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
				s.opts.Logger.DebugContext(ctx, "baton: outbox settle: rollback failed; the connection is discarded", "err", err)
			}
		}
	}()
	if err := s.settle(ctx, conn.Conn(), st, true); err != nil {
		return err
	}
	committed = true
	return nil
}

// settle runs a validated settlement on conn, from BEGIN to the state
// write, and with commit the COMMIT in the same round trip as that write.
// Without commit the transaction is left open, every lock it took held:
// the conformance suite's HoldSettle.
func (s *OutboxStore) settle(ctx context.Context, conn *pgx.Conn, st outbox.Settlement, commit bool) error {
	keys, values, remove := settlementState(st)
	// Read committed: each statement sees what committed before it
	// started, so the cursor read under the lock is the latest.
	zeroXID, zeroID := outbox.CursorState(outbox.Cursor{})
	batch := &pgx.Batch{}
	batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	batch.Queue(s.sql.lockCursor, outbox.KeyLastScannedXID, zeroXID, outbox.KeyLastScannedID, zeroID)
	cur, err := readLockedCursor(conn.SendBatch(ctx, batch))
	if err != nil {
		return err
	}
	if cur != st.From {
		s.opts.Logger.DebugContext(ctx, "baton: outbox settlement refused: the cursor moved",
			"stored_xid", cur.XID, "stored_id", cur.ID, "from_xid", st.From.XID, "from_id", st.From.ID)
		return fmt.Errorf("baton/postgres: outbox settle: the stored cursor is (%d, %s), the pass started from (%d, %s): %w",
			cur.XID, cur.ID, st.From.XID, st.From.ID, outbox.ErrCursorMoved)
	}

	if len(st.Park) > 0 {
		ids := make([][16]byte, len(st.Park))
		reasons := make([]string, len(st.Park))
		for i, p := range st.Park {
			ids[i], reasons[i] = [16]byte(p.Entry.ID), p.Reason
		}
		tag, err := conn.Exec(ctx, s.sql.park, ids, reasons,
			st.From.XID, [16]byte(st.From.ID), st.To.XID, [16]byte(st.To.ID))
		if err != nil {
			return settleError("park", err)
		}
		if n := tag.RowsAffected(); n != int64(len(ids)) {
			return fmt.Errorf("baton/postgres: outbox settle: %d of the %d entries to park are in the outbox between the two cursors; a parked entry must be one the pass scanned, once; nothing was written",
				n, len(ids))
		}
	}

	batch = &pgx.Batch{}
	batch.Queue(s.sql.writeState, keys, values, remove)
	if commit {
		batch.Queue("COMMIT")
	}
	return writeAndCommit(conn.SendBatch(ctx, batch), commit)
}

// readLockedCursor reads the results of BEGIN and the cursor lock.
func readLockedCursor(res pgx.BatchResults) (outbox.Cursor, error) {
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return outbox.Cursor{}, settleError("begin", err)
	}
	rows, err := res.Query()
	if err != nil {
		return outbox.Cursor{}, settleError("lock the cursor", err)
	}
	stored := make(map[string]string, 2)
	var (
		key   string
		value pgtype.Text // NULL reads as absent, as in State
	)
	if _, err := pgx.ForEachRow(rows, []any{&key, &value}, func() error {
		if value.Valid {
			stored[key] = value.String
		}
		return nil
	}); err != nil {
		return outbox.Cursor{}, settleError("lock the cursor", err)
	}
	if err := res.Close(); err != nil {
		return outbox.Cursor{}, settleError("lock the cursor", err)
	}
	cur, err := outbox.CursorFromState(stored)
	if err != nil {
		return outbox.Cursor{}, fmt.Errorf("baton/postgres: outbox settle: the stored cursor is unreadable: %w", err)
	}
	return cur, nil
}

// writeAndCommit reads the results of the state write and, with commit,
// COMMIT.
func writeAndCommit(res pgx.BatchResults, commit bool) error {
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return settleError("write state", err)
	}
	if !commit {
		return res.Close()
	}
	tag, err := res.Exec()
	if err != nil {
		return settleError("commit", err)
	}
	if tag.String() != "COMMIT" { // PostgreSQL answers ROLLBACK to the COMMIT of a failed transaction
		return fmt.Errorf("baton/postgres: outbox settle: commit: the transaction was rolled back (%s)", tag)
	}
	if err := res.Close(); err != nil {
		return settleError("commit", err)
	}
	return nil
}

// settlementState splits a settlement's state into the keys to upsert
// (the cursor from s.To first) and the keys to remove.
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

// State implements outbox.Store in one statement.
func (s *OutboxStore) State(ctx context.Context) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, s.sql.state)
	if err != nil {
		return nil, outboxError("state", err)
	}
	state := map[string]string{}
	var key, value string
	if _, err := pgx.ForEachRow(rows, []any{&key, &value}, func() error {
		state[key] = value
		return nil
	}); err != nil {
		return nil, outboxError("state", err)
	}
	return state, nil
}

// NextXID implements outbox.Store in one statement.
func (s *OutboxStore) NextXID(ctx context.Context) (uint64, error) {
	var next string
	if err := s.pool.QueryRow(ctx, pgrules.NextXIDSQL).Scan(&next); err != nil {
		return 0, outboxError("read the transaction counter", err)
	}
	return strconv.ParseUint(next, 10, 64)
}

// ListDead implements outbox.Store in one statement. A page that comes back
// empty after opts.Before takes a second one, to tell the end of the
// listing from a Before that no longer exists (retention removed it between
// the pages): the latter is an error wrapping outbox.ErrNotFound, rather
// than an empty page that pretends the listing ended.
func (s *OutboxStore) ListDead(ctx context.Context, opts outbox.ListOptions) ([]outbox.DeadLetter, error) {
	limit := opts.Limit
	switch {
	case limit == 0:
		limit = outbox.DefaultListLimit
	case limit < 0 || limit > outbox.MaxListLimit:
		return nil, fmt.Errorf("baton/postgres: outbox list dead letters: ListOptions.Limit is %d; it must be 0 (the default, %d) to %d",
			opts.Limit, outbox.DefaultListLimit, outbox.MaxListLimit)
	}
	var (
		rows pgx.Rows
		err  error
	)
	if opts.Before.IsNil() {
		rows, err = s.pool.Query(ctx, s.sql.listDead, limit)
	} else {
		rows, err = s.pool.Query(ctx, s.sql.listDeadBefore, limit, [16]byte(opts.Before))
	}
	if err != nil {
		return nil, outboxError("list dead letters", err)
	}
	dead, err := pgx.CollectRows(rows, scanDeadLetter)
	if err != nil {
		return nil, outboxError("list dead letters", err)
	}
	if len(dead) == 0 && !opts.Before.IsNil() {
		var exists bool
		if err := s.pool.QueryRow(ctx, s.sql.deadExists, [16]byte(opts.Before)).Scan(&exists); err != nil {
			return nil, outboxError("list dead letters", err)
		}
		if !exists {
			return nil, fmt.Errorf("baton/postgres: outbox list dead letters: ListOptions.Before %s: %w", opts.Before, outbox.ErrNotFound)
		}
	}
	return dead, nil
}

// scanDeadLetter decodes id, xid, lane, error, parked_at, requeued_as,
// requeued_at and, when the row has an eighth column, the payload.
func scanDeadLetter(row pgx.CollectableRow) (outbox.DeadLetter, error) {
	var (
		d          outbox.DeadLetter
		requeued   pgtype.UUID
		requeuedAt pgtype.Timestamptz
	)
	dest := []any{(*[16]byte)(&d.ID), &d.XID, &d.Lane, &d.Error, &d.ParkedAt, &requeued, &requeuedAt}
	if len(row.FieldDescriptions()) > len(dest) {
		dest = append(dest, &d.Payload)
	}
	if err := row.Scan(dest...); err != nil {
		return outbox.DeadLetter{}, err
	}
	if requeued.Valid {
		d.RequeuedAs = outbox.ID(requeued.Bytes)
	}
	if requeuedAt.Valid {
		d.RequeuedAt = requeuedAt.Time
	}
	return d, nil
}

// GetDead implements outbox.Store in one statement.
func (s *OutboxStore) GetDead(ctx context.Context, id outbox.ID) (outbox.DeadLetter, error) {
	rows, err := s.pool.Query(ctx, s.sql.getDead, [16]byte(id))
	if err != nil {
		return outbox.DeadLetter{}, outboxError("get dead letter "+id.String(), err)
	}
	d, err := pgx.CollectExactlyOneRow(rows, scanDeadLetter)
	if err != nil {
		return outbox.DeadLetter{}, outboxError("get dead letter "+id.String(), err)
	}
	return d, nil
}

// Requeue implements outbox.Store in one transaction: lock the dead letter,
// check it was not requeued before and newID is no dead letter's id, then
// insert the new entry and record requeued_as in one statement (an entry
// already under newID fails it). The new entry's xid is this transaction's,
// taken when the dead letter is locked, so it goes after everything
// enqueued before.
func (s *OutboxStore) Requeue(ctx context.Context, id, newID outbox.ID) error {
	op := "requeue " + id.String()
	if newID.IsNil() {
		return fmt.Errorf("baton/postgres: outbox %s: %w: the new id is the nil UUID; use outbox.NewID()", op, outbox.ErrInvalidEntry)
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return outboxError(op+": begin", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit

	var (
		requeued pgtype.UUID
		deadID   bool
	)
	if err := tx.QueryRow(ctx, s.sql.lockDead, [16]byte(id), [16]byte(newID)).Scan(&requeued, &deadID); err != nil {
		return outboxError(op, err)
	}
	if requeued.Valid {
		return fmt.Errorf("baton/postgres: outbox %s: requeued before as %s: %w", op, outbox.ID(requeued.Bytes), outbox.ErrAlreadyRequeued)
	}
	if deadID {
		// The outbox's primary key cannot see it once retention deleted the
		// parked entry. An entry under a dead letter's id would be taken
		// for a repeat of it.
		return fmt.Errorf("baton/postgres: outbox %s: the new id %s is a dead letter's id; use a fresh outbox.NewID()", op, newID)
	}
	tag, err := tx.Exec(ctx, s.sql.requeue, [16]byte(id), [16]byte(newID))
	if err != nil {
		return outboxError(op, err)
	}
	if tag.RowsAffected() != 1 { // cannot happen: the row is locked
		return fmt.Errorf("baton/postgres: outbox %s: the locked dead letter was not updated", op)
	}
	if err := tx.Commit(ctx); err != nil {
		return outboxError(op+": commit", err)
	}
	return nil
}

// DeleteDelivered implements outbox.Store in one statement; see
// outboxDeleteDeliveredSQL for which entries one call looks at.
func (s *OutboxStore) DeleteDelivered(ctx context.Context, upTo outbox.Cursor, window time.Duration, limit int) (int, error) {
	if err := checkRetention("delete delivered entries", window, limit); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, s.sql.deleteDone, upTo.XID, [16]byte(upTo.ID), window, limit)
	if err != nil {
		return 0, outboxError("delete delivered entries", err)
	}
	return int(tag.RowsAffected()), nil
}

// DeleteRequeued implements outbox.Store in one statement.
func (s *OutboxStore) DeleteRequeued(ctx context.Context, window time.Duration, limit int) (int, error) {
	if err := checkRetention("delete requeued dead letters", window, limit); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, s.sql.deleteRequeued, window, limit)
	if err != nil {
		return 0, outboxError("delete requeued dead letters", err)
	}
	return int(tag.RowsAffected()), nil
}

func checkRetention(op string, window time.Duration, limit int) error {
	if err := outbox.CheckRetention(window, limit); err != nil {
		return fmt.Errorf("baton/postgres: outbox %s: %w", op, err)
	}
	return nil
}

// outboxError is the one place where the outbox's driver errors are
// mapped: a missing table or column wraps ErrSchemaMismatch, no row wraps
// outbox.ErrNotFound, a value the database refuses wraps
// outbox.ErrInvalidEntry, and context errors stay recognizable with
// errors.Is.
func outboxError(op string, err error) error { return mapOutboxError(op, err, outbox.ErrInvalidEntry) }

// settleError is outboxError for the statements of a settlement, where a
// value the database refuses is a reason or a state value, never an entry:
// it wraps outbox.ErrInvalidSettlement.
func settleError(op string, err error) error {
	return mapOutboxError("settle: "+op, err, outbox.ErrInvalidSettlement)
}

// mapOutboxError maps err; refused is the sentinel of a refused value.
func mapOutboxError(op string, err error, refused error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("baton/postgres: outbox %s: %w", op, outbox.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "42703": // undefined_table, undefined_column
			return fmt.Errorf("baton/postgres: outbox %s: %w: the outbox tables (%s, %s, %s) are missing or out of date (run postgres.Migrate, or check OutboxStoreOptions.Schema and the search_path): %w",
				op, ErrSchemaMismatch, OutboxTable, OutboxStateTable, OutboxDeadTable, err)
		case "23514", "22P02", "22P05", "22021":
			// check_violation (the lane's length), invalid_text_representation
			// (not JSON), untranslatable_character (\u0000 in jsonb),
			// character_not_in_repertoire (not UTF-8, or a NUL byte).
			return fmt.Errorf("baton/postgres: outbox %s: %w: the database refused it: %w", op, refused, err)
		case "23505": // unique_violation: an entry has the id already
			return fmt.Errorf("baton/postgres: outbox %s: %w: an entry has it already: %w", op, outbox.ErrIDInUse, err)
		}
	}
	return fmt.Errorf("baton/postgres: outbox %s: %w", op, err)
}
