package pgsql

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/baton-go/baton/core/outbox"
)

// OutboxStoreOptions configure an OutboxStore, of either adapter. The zero
// value uses the defaults.
type OutboxStoreOptions struct {
	// Schema holds the outbox tables. "" uses the connection's search_path;
	// otherwise every statement names the tables in this schema.
	Schema string
	// Logger receives the store's diagnostics. nil discards them.
	Logger *slog.Logger
	// SignalDisabled makes the store's Enqueue a plain INSERT that never
	// signals a listening driver: its entries wait for the driver's next
	// poll (IdleDelay). The package-level Enqueue always signals; use a
	// store's Enqueue (Schema "" for the search_path) to turn it off.
	SignalDisabled bool
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c OutboxStoreOptions) withDefaults() OutboxStoreOptions {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks options that have their defaults.
func (c OutboxStoreOptions) validate() error {
	if c.Schema != "" {
		return ValidateSchemaName("OutboxStoreOptions.Schema", c.Schema)
	}
	return nil
}

// OutboxStore is the outbox.Store over baton_outbox, baton_outbox_state and
// baton_outbox_dead.
//
// Every method is one statement, or one short transaction; none holds a
// transaction across delivery. Scan reads only below the horizon (xids
// older than the oldest transaction still running anywhere in the
// database), so a long transaction pins the walk.
type OutboxStore struct {
	db     DB
	a      Adapter
	logger *slog.Logger
	sql    OutboxStatements
	table  string // the outbox table, quoted and qualified as the statements name it
}

var _ outbox.Store = (*OutboxStore)(nil)

// NewOutboxStore returns an OutboxStore over db, or an error naming the
// first invalid option. It sends nothing.
func NewOutboxStore(db DB, a Adapter, c OutboxStoreOptions) (*OutboxStore, error) {
	c = c.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	st := &OutboxStore{db: db, a: a, logger: c.Logger, sql: newOutboxStatements(c.Schema), table: qualified(c.Schema, OutboxTable)}
	if !c.SignalDisabled {
		st.sql.Enqueue = signalling(st.table, st.sql.Enqueue)
	}
	return st, nil
}

// EnqueueSQL is Enqueue's statement over the tables found through the
// search_path: it signals a listening driver (signalling).
var EnqueueSQL = signalling(quote(OutboxTable), outboxEnqueueSQL(quote(OutboxTable), quote(OutboxDeadTable)))

// Enqueue writes one outbox entry with the caller's q, normally its
// transaction, using query (EnqueueSQL, or a store's EnqueueSQL): the
// entry exists exactly when that transaction commits. The trace context
// ctx carries (outbox.WithTraceContext) is stored with it, NULL when there
// is none. Invalid input, the trace context included, is refused with an
// error wrapping outbox.ErrInvalidEntry before anything is sent, so the
// transaction stays usable; an id that an entry or a dead letter has, with
// one wrapping outbox.ErrIDInUse. A nil q is refused.
func (a Adapter) Enqueue(ctx context.Context, q Querier, query string, id outbox.ID, lane string, payload []byte) error {
	if err := outbox.ValidateEntry(id, lane, payload); err != nil {
		return err
	}
	tc, err := outbox.TraceContextFrom(ctx)
	if err != nil {
		return err
	}
	if q == nil {
		return a.errorf("outbox enqueue: the transaction is nil; enqueue inside the transaction that makes the change")
	}
	n, err := q.Exec(ctx, query, [16]byte(id), lane, payload, traceContextParam(tc))
	if err != nil {
		return a.MapError(AreaOutbox, "enqueue", err)
	}
	if n == 0 {
		return a.errorf("outbox enqueue %s: %w; use a fresh id (outbox.NewID)", id, outbox.ErrIDInUse)
	}
	return nil
}

// EnqueueSQL is Enqueue's statement over this store's tables.
func (s *OutboxStore) EnqueueSQL() string { return s.sql.Enqueue }

// traceContextParam is the trace_context parameter of tc: its text, or
// NULL for none (the common case, which costs the row nothing but its null
// bitmap).
func traceContextParam(tc outbox.TraceContext) any {
	if tc.IsZero() {
		return nil
	}
	return tc.Encode()
}

// decodeTraceContext reads a trace_context column; NULL (and so "") is
// none.
func decodeTraceContext(v pgtype.Text) outbox.TraceContext {
	return outbox.DecodeTraceContext(v.String)
}

// OutboxStatements are an OutboxStore's statements over its (quoted)
// tables; exported for the adapters' plan tests.
type OutboxStatements struct {
	Enqueue    string
	Scan       string
	LockCursor string
	Park       string
	WriteState string
	// SettleAtOnce is a settlement without parked entries in one
	// statement (Settle on an Autocommitter).
	SettleAtOnce   string
	State          string
	ListDead       string
	ListDeadBefore string
	DeadExists     string
	GetDead        string
	LockDead       string
	Requeue        string
	// RequeueLock and RequeueMany are RequeueBatch's two statements.
	RequeueLock, RequeueMany string
	DeleteDone               string
	DeleteRequeued           string
	RebaseCount              string
	RebaseMove               string
	// Newest is what an idle listener reads: the newest entry after a
	// cursor, whatever the horizon; Gate takes its idle gate when there
	// is none.
	Newest, Gate string
	CountPending string
	CountDead    string
}

// Statements returns the store's statements.
func (s *OutboxStore) Statements() OutboxStatements { return s.sql }

// deadColumns are a dead letter's columns but its payload, as
// scanDeadLetter reads them.
const deadColumns = `id, xid, lane, error, parked_at, requeued_as, requeued_at, trace_context`

func newOutboxStatements(schema string) OutboxStatements {
	t, st, d := qualified(schema, OutboxTable), qualified(schema, OutboxStateTable), qualified(schema, OutboxDeadTable)
	return OutboxStatements{
		Enqueue:        outboxEnqueueSQL(t, d),
		Scan:           outboxScanSQL(t),
		LockCursor:     outboxLockCursorSQL(st),
		Park:           outboxParkSQL(t, d),
		WriteState:     outboxWriteStateSQL(st),
		SettleAtOnce:   outboxSettleAtOnceSQL(st),
		State:          `SELECT key, value FROM ` + st + ` WHERE value IS NOT NULL`,
		ListDead:       outboxListDeadSQL(d, false),
		ListDeadBefore: outboxListDeadSQL(d, true),
		DeadExists:     `SELECT EXISTS (SELECT 1 FROM ` + d + ` WHERE id = $1)`,
		GetDead:        `SELECT ` + deadColumns + `, payload FROM ` + d + ` WHERE id = $1`,
		LockDead: `SELECT dl.requeued_as, EXISTS (SELECT 1 FROM ` + d + ` AS used WHERE used.id = $2)
FROM ` + d + ` AS dl WHERE dl.id = $1 FOR UPDATE OF dl`,
		Requeue:        outboxRequeueSQL(t, d),
		RequeueLock:    outboxRequeueLockSQL(d),
		RequeueMany:    outboxRequeueManySQL(t, d),
		DeleteDone:     outboxDeleteDeliveredSQL(t),
		DeleteRequeued: outboxDeleteRequeuedSQL(d),
		RebaseCount:    outboxRebaseSQL(t, false),
		RebaseMove:     outboxRebaseSQL(t, true),
		Newest:         outboxNewestSQL(t),
		Gate:           outboxGateSQL(t),
		CountPending:   outboxCountPendingSQL(t),
		CountDead:      outboxCountDeadSQL(d),
	}
}

// outboxEnqueueSQL inserts one entry into the quoted outbox table t.
// Parameters: $1 id, $2 lane, $3 payload (JSON), $4 trace context (text,
// NULL for none). It ends in its WHERE clause, which signalling extends.
func outboxEnqueueSQL(t, d string) string {
	// Refused (no row) when a dead letter has the id: it could never be
	// parked. The check is one probe of the dead letters' primary key.
	return `INSERT INTO ` + t + ` (id, lane, payload, trace_context)
SELECT $1::uuid, $2::text, $3::jsonb, $4::text
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
	// The cursor and the limit are read through one-row subqueries, which
	// the planner cannot see into, so a custom plan is the generic plan and
	// a prepared scan keeps the generic one after PostgreSQL's five trial
	// plans. Seeing the values, the planner found each cursor's custom plan
	// cheaper than the generic one (which assumes a tenth of the table for
	// a limit it cannot see) and planned every scan of a backlog again:
	// about 15 % of the scans' execution time in the relay bench. Both are
	// the same index range scan, on an empty, never analyzed table too.
	return `SELECT xid, id, lane, payload, created_at, trace_context FROM ` + t + `
WHERE (xid, id) > (SELECT $1::xid8, $2::uuid)
  AND xid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY xid, id
LIMIT (SELECT $3::bigint)`
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
func outboxParkSQL(t, d string) string {
	return parkSQL(t, d, `
WHERE (o.xid, o.id) > ($3::xid8, $4::uuid)
  AND (o.xid, o.id) <= ($5::xid8, $6::uuid)`)
}

// parkSQL is the park of both sources (outboxParkSQL, outboxParkLogSQL):
// the parked entries $1 of the quoted outbox table t that where admits,
// copied to the dead letters d with their reasons $2.
//
// A dead letter that already has the id (possible only for rows written
// around Enqueue, or by a version before parking copied) is replaced by
// the newer entry rather than failing every settlement on the primary
// key; the error says so. A replaced row counts as one, so the caller's
// row count still tells only whether every entry was there.
func parkSQL(t, d, where string) string {
	return `INSERT INTO ` + d + ` AS dl (id, xid, lane, payload, trace_context, error)
SELECT o.id, o.xid, o.lane, o.payload, o.trace_context, p.error
FROM unnest($1::uuid[], $2::text[]) AS p (id, error)
JOIN ` + t + ` AS o ON o.id = p.id` + where + `
ON CONFLICT (id) DO UPDATE SET xid = excluded.xid, lane = excluded.lane, payload = excluded.payload,
    trace_context = excluded.trace_context,
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

// outboxSettleAtOnceSQL is a settlement without parked entries as one
// statement over the quoted state table st, committing on its own
// (settleAtOnce). It moves each cursor row only where the row still holds
// the value the settlement started from (an UPDATE in READ COMMITTED
// checks a row again once it holds the row's lock, so the compare sees
// the latest committed value, and nobody can change it before the
// statement commits), and writes the other state keys. Unless both
// cursor rows moved, its result divides by zero (division_by_zero,
// 22012), so the statement fails and writes nothing: the cursor moved,
// or its keys were never stored. Parameters: $1 keys and $2 values to
// write and $3 keys to remove, the cursor keys among none of them; $4 and
// $5 the cursor keys, $6 and $7 their expected values, $8 and $9 their
// new ones.
//
// The id row's update waits for the xid row's (its condition reads
// whether that one moved), so the two rows are locked in the full
// settlement's order (outboxLockCursorSQL), and a settlement sent at once
// and a full one never deadlock. The result counts both rows, so the
// guard holds without that ordering too.
func outboxSettleAtOnceSQL(st string) string {
	return `WITH xid_moved AS (
    UPDATE ` + st + ` SET value = $8::text WHERE key = $4::text AND value = $6::text
    RETURNING key
), id_moved AS (
    UPDATE ` + st + ` SET value = $9::text
    WHERE key = $5::text AND value = $7::text AND EXISTS (SELECT FROM xid_moved)
    RETURNING key
), removed AS (
    DELETE FROM ` + st + ` WHERE key = ANY ($3::text[])
), written AS (
    INSERT INTO ` + st + ` AS s (key, value)
    SELECT u.key, u.value FROM unnest($1::text[], $2::text[]) AS u (key, value)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
    WHERE s.value IS DISTINCT FROM excluded.value
)
SELECT 1 / ((SELECT count(*) FROM xid_moved) + count(*) = 2)::int FROM id_moved`
}

// settleAtOnceRefused is the SQLSTATE outboxSettleAtOnceSQL fails with
// when the cursor rows did not both hold the expected values.
const settleAtOnceRefused = "22012"

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
	if !before {
		return `SELECT ` + deadColumns + ` FROM ` + d + `
ORDER BY parked_at DESC, id
LIMIT $1`
	}
	return `SELECT ` + deadColumns + ` FROM ` + d + `
WHERE parked_at <= (SELECT b.parked_at FROM ` + d + ` AS b WHERE b.id = $2)
  AND (parked_at < (SELECT b.parked_at FROM ` + d + ` AS b WHERE b.id = $2) OR id > $2)
ORDER BY parked_at DESC, id
LIMIT $1`
}

// outboxRequeueSQL inserts the dead letter $1 of the quoted table d as a
// new entry $2 of the quoted outbox table t, with its trace context, and
// records requeued_as, in one statement. Its xid is the requeuing
// transaction's, so the new entry goes after everything already enqueued.
func outboxRequeueSQL(t, d string) string {
	return `WITH requeued AS (
    INSERT INTO ` + t + ` (id, lane, payload, trace_context)
    SELECT $2, dl.lane, dl.payload, dl.trace_context FROM ` + d + ` AS dl WHERE dl.id = $1
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

// scanPrealloc bounds the room a scan makes for entries at its first row:
// a batch up to it is read without growing its slice, a larger one grows
// from there, and a scan that finds nothing allocates nothing.
const scanPrealloc = 256

// Scan implements outbox.Store in one statement. Rows are decoded one at a
// time as they arrive, and reading stops once the payloads taken fill the
// byte budget (outbox.ScanHasRoom); the rows after that are discarded as
// they are read, never held. Asking the server for the budget instead
// would cost every scan a second conversion of each payload to text.
func (s *OutboxStore) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if limit < 1 {
		return nil, s.a.errorf("outbox scan: the limit is %d; it must be at least 1", limit)
	}
	rows, err := s.db.Query(ctx, s.sql.Scan, after.XID, [16]byte(after.ID), limit)
	if err != nil {
		return nil, s.a.MapError(AreaOutbox, "scan", err)
	}
	defer rows.Close()
	var (
		entries []outbox.Entry
		taken   int
		// One set of targets for every row: passed to Scan as pointers,
		// they escape to the heap, once per scan rather than per row.
		e       outbox.Entry
		id      pgtype.UUID
		tc      pgtype.Text
		payload []byte
		dest    = []any{&e.XID, &id, &e.Lane, &payload, &e.CreatedAt, &tc}
	)
	for outbox.ScanHasRoom(taken) && rows.Next() {
		// xid8 arrives as the full unsigned 64 bits (epoch and xid), so
		// values above 2^63 arrive intact. The payload is scanned as bytes
		// (each row's its own): jsonb holds only valid JSON, and scanning
		// into a json.RawMessage would make pgx validate every payload
		// again.
		if err := rows.Scan(dest...); err != nil {
			return nil, s.a.MapError(AreaOutbox, "scan", err)
		}
		e.ID, e.Payload, e.TraceContext = outbox.ID(id.Bytes), payload, decodeTraceContext(tc)
		if entries == nil {
			entries = make([]outbox.Entry, 0, min(limit, scanPrealloc))
		}
		entries = append(entries, e)
		taken += len(e.Payload)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, s.a.MapError(AreaOutbox, "scan", err)
	}
	return entries, nil
}

// Settle implements outbox.Store in one READ COMMITTED transaction: lock
// and read the stored cursor; when it is st.From, copy st.Park to the dead
// letters (outboxParkSQL says why they stay in the outbox below the
// cursor) and write the state, then commit. When it is not, roll back and
// return ErrCursorMoved; nothing was written.
//
// The cursor keys are always written from st.To; cursor keys in st.State
// are ignored. Every entry of st.Park must still be in the outbox between
// st.From (exclusive) and st.To (inclusive); otherwise nothing is written
// and the error says how many were found.
//
// Over a pool (pgx, or bun over a *bun.DB) a settlement without parked
// entries is one statement (settleAtOnce) when it is granted; a refused
// one, one with parked entries, or one over a caller's transaction runs
// the transaction above: on pgx two round trips, BEGIN with the cursor
// lock and the state write with COMMIT, and one more to park.
func (s *OutboxStore) Settle(ctx context.Context, st outbox.Settlement) error {
	if err := outbox.ValidateSettlement(st); err != nil {
		return s.a.errorf("outbox settle: %w", err)
	}
	if len(st.Park) == 0 {
		if done, err := s.settleAtOnce(ctx, st); err != nil || done {
			return err
		}
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return s.a.MapError(AreaSettle, "begin", err)
	}
	defer rollback(ctx, tx)
	return s.settle(ctx, tx, st, true)
}

// ScansConcurrently implements outbox.ConcurrentScanner: a store over a
// pool (Autocommitter) can scan while it settles; one over a single
// connection or a caller's transaction cannot.
func (s *OutboxStore) ScansConcurrently() bool {
	_, ok := s.db.(Autocommitter)
	return ok
}

// settleAtOnce writes a settlement without parked entries as one
// statement, in one round trip, where the handle's statements commit on
// their own (Autocommitter): outboxSettleAtOnceSQL. It reports false when
// it wrote nothing: the cursor moved, or its keys were never stored, or
// the statement met a concurrent settlement. Settle's full transaction then
// gives the answer, and the error that names the stored cursor, so only a
// refused settlement (rare: a deposed leader) or the very first one pays
// twice. (Each refusal is an ERROR line in the server's log.)
func (s *OutboxStore) settleAtOnce(ctx context.Context, st outbox.Settlement) (bool, error) {
	if _, ok := s.db.(Autocommitter); !ok {
		return false, nil
	}
	keys, values, remove := settlementState(st)
	fromXID, fromID := outbox.CursorState(st.From)
	// settlementState puts the cursor's two keys first. Whatever the
	// session's isolation: under REPEATABLE READ or SERIALIZABLE a
	// concurrent settlement fails the statement (40001) instead of being
	// seen, and the full transaction, in READ COMMITTED, answers.
	_, err := s.db.Exec(ctx, s.sql.SettleAtOnce,
		keys[2:], values[2:], remove,
		outbox.KeyLastScannedXID, outbox.KeyLastScannedID, fromXID, fromID, values[0], values[1])
	switch {
	case err == nil:
		return true, nil
	case sqlState(err) == settleAtOnceRefused, isConflict(err):
		return false, nil
	}
	return false, s.a.MapError(AreaSettle, "write state", err)
}

// SettleIn runs a validated settlement in tx, everything but the commit,
// leaving every lock it took held: the conformance suites' HoldSettle.
func (s *OutboxStore) SettleIn(ctx context.Context, tx Tx, st outbox.Settlement) error {
	return s.settle(ctx, tx, st, false)
}

func (s *OutboxStore) settle(ctx context.Context, tx Tx, st outbox.Settlement, commit bool) error {
	// Read committed: each statement sees what committed before it
	// started, so the cursor read under the lock is the latest.
	cur, err := s.lockCursor(ctx, tx)
	if err != nil {
		return s.a.MapError(AreaSettle, "lock the cursor", err)
	}
	if cur != st.From {
		s.logger.DebugContext(ctx, "baton: outbox settlement refused: the cursor moved",
			"stored_xid", cur.XID, "stored_id", cur.ID, "from_xid", st.From.XID, "from_id", st.From.ID)
		return s.a.errorf("outbox settle: the stored cursor is (%d, %s), the pass started from (%d, %s): %w",
			cur.XID, cur.ID, st.From.XID, st.From.ID, outbox.ErrCursorMoved)
	}
	if len(st.Park) > 0 {
		ids := make([][16]byte, len(st.Park))
		reasons := make([]string, len(st.Park))
		for i, p := range st.Park {
			ids[i], reasons[i] = [16]byte(p.Entry.ID), p.Reason
		}
		n, err := tx.Exec(ctx, s.sql.Park, ids, reasons, st.From.XID, [16]byte(st.From.ID), st.To.XID, [16]byte(st.To.ID))
		if err != nil {
			return s.a.MapError(AreaSettle, "park", err)
		}
		if n != int64(len(ids)) {
			return s.a.errorf("outbox settle: %d of the %d entries to park are in the outbox between the two cursors; a parked entry must be one the pass scanned, once; nothing was written",
				n, len(ids))
		}
	}
	keys, values, remove := settlementState(st)
	if commit {
		_, err = execCommit(ctx, tx, s.sql.WriteState, keys, values, remove)
	} else {
		_, err = tx.Exec(ctx, s.sql.WriteState, keys, values, remove)
	}
	if err != nil {
		return s.a.MapError(AreaSettle, "write state", err)
	}
	return nil
}

// lockCursor locks the two cursor keys and reads the cursor they hold.
func (s *OutboxStore) lockCursor(ctx context.Context, tx Tx) (outbox.Cursor, error) {
	zeroXID, zeroID := outbox.CursorState(outbox.Cursor{})
	rows, err := tx.Query(ctx, s.sql.LockCursor, outbox.KeyLastScannedXID, zeroXID, outbox.KeyLastScannedID, zeroID)
	stored := make(map[string]string, 2)
	err = each(rows, err, func(r Rows) error {
		var (
			key   string
			value pgtype.Text // NULL reads as absent, as in State
		)
		if err := r.Scan(&key, &value); err != nil {
			return err
		}
		if value.Valid {
			stored[key] = value.String
		}
		return nil
	})
	if err != nil {
		return outbox.Cursor{}, err
	}
	cur, err := outbox.CursorFromState(stored)
	if err != nil {
		return outbox.Cursor{}, fmt.Errorf("the stored cursor is unreadable: %w", err)
	}
	return cur, nil
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
	rows, err := s.db.Query(ctx, s.sql.State)
	state := map[string]string{}
	err = each(rows, err, func(r Rows) error {
		var key, value string
		err := r.Scan(&key, &value)
		state[key] = value
		return err
	})
	if err != nil {
		return nil, s.a.MapError(AreaOutbox, "state", err)
	}
	return state, nil
}

// NextXID implements outbox.Store in one statement.
func (s *OutboxStore) NextXID(ctx context.Context) (uint64, error) {
	var next string
	if err := s.db.QueryRow(ctx, NextXIDSQL).Scan(&next); err != nil {
		return 0, s.a.MapError(AreaOutbox, "read the transaction counter", err)
	}
	return strconv.ParseUint(next, 10, 64)
}

// ListDead implements outbox.Store in one statement. A page that comes back
// empty after opts.Before takes a second one, to tell the end of the
// listing from a Before that no longer exists (retention removed it between
// the pages): the latter is an error wrapping outbox.ErrNotFound, rather
// than an empty page that pretends the listing ended.
func (s *OutboxStore) ListDead(ctx context.Context, opts outbox.ListOptions) ([]outbox.DeadLetter, error) {
	limit, err := opts.PageLimit()
	if err != nil {
		return nil, s.a.errorf("outbox list dead letters: %w", err)
	}
	var rows Rows
	if opts.Before.IsNil() {
		rows, err = s.db.Query(ctx, s.sql.ListDead, limit)
	} else {
		rows, err = s.db.Query(ctx, s.sql.ListDeadBefore, limit, [16]byte(opts.Before))
	}
	dead, err := collect(rows, err, func(r Rows) (outbox.DeadLetter, error) { return scanDeadLetter(r, false) })
	if err != nil {
		return nil, s.a.MapError(AreaOutbox, "list dead letters", err)
	}
	if len(dead) == 0 && !opts.Before.IsNil() {
		var exists bool
		if err := s.db.QueryRow(ctx, s.sql.DeadExists, [16]byte(opts.Before)).Scan(&exists); err != nil {
			return nil, s.a.MapError(AreaOutbox, "list dead letters", err)
		}
		if !exists {
			return nil, s.a.errorf("outbox list dead letters: ListOptions.Before %s: %w", opts.Before, outbox.ErrNotFound)
		}
	}
	return dead, nil
}

// scanDeadLetter decodes deadColumns and, with payload, the payload.
func scanDeadLetter(row Row, payload bool) (outbox.DeadLetter, error) {
	var (
		d            outbox.DeadLetter
		id, requeued pgtype.UUID
		requeuedAt   pgtype.Timestamptz
		tc           pgtype.Text
	)
	dest := []any{&id, &d.XID, &d.Lane, &d.Error, &d.ParkedAt, &requeued, &requeuedAt, &tc}
	if payload {
		dest = append(dest, &d.Payload)
	}
	if err := row.Scan(dest...); err != nil {
		return outbox.DeadLetter{}, err
	}
	d.ID, d.TraceContext = outbox.ID(id.Bytes), decodeTraceContext(tc)
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
	d, err := scanDeadLetter(s.db.QueryRow(ctx, s.sql.GetDead, [16]byte(id)), true)
	if err != nil {
		return outbox.DeadLetter{}, s.a.MapError(AreaOutbox, "get dead letter "+id.String(), err)
	}
	return d, nil
}

// Requeue implements outbox.Store in one READ COMMITTED transaction: lock
// the dead letter, check it was not requeued before and newID is no dead
// letter's id, then insert the new entry and record requeued_as in one
// statement (an entry already under newID fails it). The new entry's xid
// is this transaction's, taken when the dead letter is locked, so it goes
// after everything enqueued before.
func (s *OutboxStore) Requeue(ctx context.Context, id, newID outbox.ID) error {
	op := "requeue " + id.String()
	if newID.IsNil() {
		return s.a.errorf("outbox %s: %w: the new id is the nil UUID; use outbox.NewID()", op, outbox.ErrInvalidEntry)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return s.a.MapError(AreaOutbox, op+": begin", err)
	}
	defer rollback(ctx, tx)
	var (
		requeued pgtype.UUID
		deadID   bool
	)
	if err := tx.QueryRow(ctx, s.sql.LockDead, [16]byte(id), [16]byte(newID)).Scan(&requeued, &deadID); err != nil {
		return s.a.MapError(AreaOutbox, op, err)
	}
	if requeued.Valid {
		return s.a.errorf("outbox %s: requeued before as %s: %w", op, outbox.ID(requeued.Bytes), outbox.ErrAlreadyRequeued)
	}
	if deadID {
		// The outbox's primary key cannot see it once retention deleted the
		// parked entry. An entry under a dead letter's id would be taken
		// for a repeat of it.
		return s.a.errorf("outbox %s: the new id %s is a dead letter's id; use a fresh outbox.NewID()", op, newID)
	}
	n, err := execCommit(ctx, tx, s.sql.Requeue, [16]byte(id), [16]byte(newID))
	if err != nil {
		return s.a.MapError(AreaOutbox, op, err)
	}
	if n != 1 { // cannot happen: the row is locked
		return s.a.errorf("outbox %s: the locked dead letter was not updated", op)
	}
	return nil
}

// outboxRequeueLockSQL locks, in (xid, id) order, the dead letters of the
// quoted table d one bulk requeue batch takes (outbox.RequeueFilter.Matches).
// Parameters: $1, $2 the position after which to start, $3 the lane (”
// for any), $4 waiting only, $5 parked since and $6 parked before (NULL
// for no bound), $7 the limit. No hot path: an operator runs it in an
// incident, so it walks the table rather than keep an index for it.
func outboxRequeueLockSQL(d string) string {
	return `SELECT id, xid, requeued_as IS NOT NULL FROM ` + d + `
WHERE (xid, id) > ($1::xid8, $2::uuid)
  AND ($3::text = '' OR lane = $3::text)
  AND (NOT $4::boolean OR requeued_as IS NULL)
  AND ($5::timestamptz IS NULL OR parked_at >= $5::timestamptz)
  AND ($6::timestamptz IS NULL OR parked_at < $6::timestamptz)
ORDER BY xid, id
LIMIT $7
FOR UPDATE`
}

// outboxRequeueManySQL inserts the dead letters $1 of the quoted table d
// (comma-separated ids, in order) as new entries $2 (their new ids, in the
// same order) of the quoted outbox table t and records requeued_as, in one
// statement. The ids travel as text so every driver binds them alike.
func outboxRequeueManySQL(t, d string) string {
	return `WITH src AS (
    SELECT u.dead_id, u.new_id, u.n
    FROM unnest(string_to_array($1::text, ',')::uuid[], string_to_array($2::text, ',')::uuid[]) WITH ORDINALITY AS u(dead_id, new_id, n)
), requeued AS (
    INSERT INTO ` + t + ` (id, lane, payload, trace_context)
    SELECT s.new_id, dl.lane, dl.payload, dl.trace_context FROM src AS s JOIN ` + d + ` AS dl ON dl.id = s.dead_id
    ORDER BY s.n
    RETURNING id
)
UPDATE ` + d + ` AS dl SET requeued_as = s.new_id, requeued_at = now()
FROM src AS s
WHERE dl.id = s.dead_id AND dl.requeued_as IS NULL`
}

// RequeueBatch implements outbox.Store in one READ COMMITTED transaction:
// lock the dead letters the batch takes, then insert the waiting ones as
// new entries and record requeued_as in one statement. The new entries
// share this transaction's xid and take ascending fresh ids in the order
// of their dead letters, so they walk in that order. A dry run rolls back
// after the lock.
func (s *OutboxStore) RequeueBatch(ctx context.Context, b outbox.RequeueBatch) (outbox.RequeueBatchResult, error) {
	const op = "requeue batch"
	var res outbox.RequeueBatchResult
	if err := outbox.CheckRequeueBatch(b); err != nil {
		return res, s.a.errorf("outbox %s: %w", op, err)
	}
	bound := func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return res, s.a.MapError(AreaOutbox, op+": begin", err)
	}
	defer rollback(ctx, tx)
	f := b.Filter
	rows, err := tx.Query(ctx, s.sql.RequeueLock, b.After.XID, [16]byte(b.After.ID), f.Lane, f.WaitingOnly,
		bound(f.ParkedSince), bound(f.ParkedBefore), b.Limit)
	if err != nil {
		return res, s.a.MapError(AreaOutbox, op, err)
	}
	var deadIDs, newIDs []string
	for rows.Next() {
		var (
			r      outbox.Requeued
			id     pgtype.UUID
			before bool
		)
		if err := rows.Scan(&id, &r.XID, &before); err != nil {
			rows.Close()
			return res, s.a.MapError(AreaOutbox, op, err)
		}
		r.ID = outbox.ID(id.Bytes)
		res.Taken++
		res.Last = outbox.Cursor{XID: r.XID, ID: r.ID}
		if before {
			res.AlreadyRequeued++
			continue
		}
		if !b.DryRun {
			r.RequeuedAs = outbox.NewID()
			deadIDs, newIDs = append(deadIDs, r.ID.String()), append(newIDs, r.RequeuedAs.String())
		}
		res.Requeued = append(res.Requeued, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return outbox.RequeueBatchResult{}, s.a.MapError(AreaOutbox, op, err)
	}
	if len(deadIDs) == 0 {
		return res, nil // a dry run, or nothing waiting: the deferred rollback ends it
	}
	n, err := execCommit(ctx, tx, s.sql.RequeueMany, strings.Join(deadIDs, ","), strings.Join(newIDs, ","))
	if err != nil {
		return outbox.RequeueBatchResult{}, s.a.MapError(AreaOutbox, op, err)
	}
	if int(n) != len(deadIDs) { // cannot happen: the rows are locked
		return outbox.RequeueBatchResult{}, s.a.errorf("outbox %s: %d of the %d locked dead letters were updated", op, n, len(deadIDs))
	}
	return res, nil
}

// DeleteDelivered implements outbox.Store in one statement; see
// outboxDeleteDeliveredSQL for which entries one call looks at.
func (s *OutboxStore) DeleteDelivered(ctx context.Context, upTo outbox.Cursor, window time.Duration, limit int) (int, error) {
	if err := s.checkRetention("delete delivered entries", window, limit); err != nil {
		return 0, err
	}
	n, err := s.db.Exec(ctx, s.sql.DeleteDone, upTo.XID, [16]byte(upTo.ID), window, limit)
	if err != nil {
		return 0, s.a.MapError(AreaOutbox, "delete delivered entries", err)
	}
	return int(n), nil
}

// DeleteRequeued implements outbox.Store in one statement.
func (s *OutboxStore) DeleteRequeued(ctx context.Context, window time.Duration, limit int) (int, error) {
	if err := s.checkRetention("delete requeued dead letters", window, limit); err != nil {
		return 0, err
	}
	n, err := s.db.Exec(ctx, s.sql.DeleteRequeued, window, limit)
	if err != nil {
		return 0, s.a.MapError(AreaOutbox, "delete requeued dead letters", err)
	}
	return int(n), nil
}

func (s *OutboxStore) checkRetention(op string, window time.Duration, limit int) error {
	if err := outbox.CheckRetention(window, limit); err != nil {
		return s.a.errorf("outbox %s: %w", op, err)
	}
	return nil
}
