package pgsql

// Wake-ups: the signals producers send in their own transactions, and the
// listening sessions of the outbox driver and the work-row workers.
//
// A signal is a NOTIFY on a channel named for the table's oid, sent only
// while a listener is idle: PostgreSQL serialises the commits of every
// notifying transaction in the cluster on one lock, so producers under
// load must not notify. The idle gate is a session advisory lock on a key
// made of GateKeyPrefix and the table's oid:
//
//   - a listener that has nothing to do takes it exclusively
//     (pg_try_advisory_lock) and keeps it until a signal wakes it;
//   - a producer asks for it shared in its own transaction
//     (pg_try_advisory_xact_lock_shared): refused means a listener is
//     idle, and the producer notifies; granted, the producer holds it
//     shared until its transaction ends, and notifies nothing.
//
// So a listener that got the gate knows that every producer that did not
// notify has ended, committed or rolled back, and that every later one
// notifies; what committed before it asked, it reads after taking the gate
// (the outbox: the newest entry after the cursor; work rows: one more
// claim). A listener that finds the gate held shared answers busy: a
// producer is in flight, and its rows are about to be there. One that
// finds it held exclusively by another listener of the same table is idle
// as well: producers notify, and every listener of the channel hears it.
//
// Both try functions never wait, so the gate adds no lock waits to either
// side; a producer pays one lock-table entry per transaction.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-go/baton/core/outbox"
)

// GateKeyPrefix is the high half of every idle gate's advisory-lock key,
// "btng" in ASCII; the low half is the table's oid. It is fixed, so every
// baton version and both adapters meet on the same key.
const GateKeyPrefix = 0x62746e67

// The channel prefixes: a table's channel is the prefix and its oid, so
// two deployments sharing a database (two schemas) never wake each other,
// and the package-level Enqueue, which finds its table through the
// search_path, signals the channel the driver listens on.
const (
	OutboxChannelPrefix = "baton_outbox_"
	WorkChannelPrefix   = "baton_work_"
)

// GateKey is the idle gate's key of the table with the given oid.
func GateKey(oid uint32) int64 { return GateKeyPrefix<<32 | int64(oid) }

// gateKeySQL is GateKey in SQL, of an oid expression.
func gateKeySQL(oid string) string {
	return "((" + strconv.Itoa(GateKeyPrefix) + "::int8 << 32) | " + oid + "::int8)"
}

// signalling extends an outbox INSERT … SELECT … WHERE (outboxEnqueueSQL)
// into the quoted outbox table t with the signal: when a listener is idle
// (it holds the table's idle gate, so the shared lock is refused) the
// statement also notifies the outbox's channel with the transaction's
// xid. The signals of one transaction are identical, so PostgreSQL folds
// them into one, and sends it only if the transaction commits; a producer
// that takes the shared lock holds it to its commit, which tells a
// listener about to sleep that entries are in flight.
//
// The condition stays in the INSERT's WHERE, after the dead-letter check,
// rather than in a CTE reading the inserted row back: the table's oid is
// the constant t::regclass, resolved when the statement is planned (and
// again when the table or the search_path changes), so the gate key and
// the channel are constants of the plan, and no row is stored and read
// back. An id the dead-letter check refuses inserts nothing whichever
// condition the server evaluates first (a signal its transaction still
// commits wakes the leader for a pass that finds nothing); one refused by
// the primary key fails the statement, and the transaction with its
// signal.
func signalling(t, insert string) string {
	oid := regclassLiteral(t) + "::oid"
	return insert + `
  AND (pg_try_advisory_xact_lock_shared(` + gateKeySQL(oid) + `)
       OR (SELECT true FROM pg_notify('` + OutboxChannelPrefix + `' || ` + oid + `::text, pg_current_xact_id()::text)))`
}

// regclassLiteral is the quoted (and qualified) relation name t as a
// regclass constant. An escape string literal reads the same whatever
// standard_conforming_strings says.
func regclassLiteral(t string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(t) + "'::regclass"
}

// WorkSignalSQL signals the work table named by $1 (text, quoted and
// qualified as in a statement) when one of its listeners is idle; a table
// that does not exist is an error (42P01).
var WorkSignalSQL = `SELECT CASE WHEN pg_try_advisory_xact_lock_shared(` + gateKeySQL("t.oid") + `) THEN NULL
            ELSE pg_notify('` + WorkChannelPrefix + `' || t.oid::text, '') END
FROM (SELECT $1::text::regclass::oid AS oid) AS t`

// tableOIDSQL reads the oid of the table named by $1, as WorkSignalSQL
// does.
const tableOIDSQL = `SELECT $1::text::regclass::oid::int8`

// What gateSQL answers.
const (
	gateNotTried      = 0 // entries lie after the cursor: the gate was not asked for
	gateTaken         = 1 // this session now holds it
	gateBusy          = 2 // producers hold it shared: in flight
	gateHeldElsewhere = 3 // another listener of the table holds it
)

// gateCases takes the idle gate $1 if it is free, and otherwise says who
// holds it.
const gateCases = `WHEN pg_try_advisory_lock($1) THEN 1
            WHEN pg_try_advisory_lock_shared($1) THEN CASE WHEN pg_advisory_unlock_shared($1) THEN 2 ELSE 2 END
            ELSE 3 END`

// gateSQL is gateCases as a statement.
const gateSQL = `SELECT CASE ` + gateCases

// outboxGateSQL is gateSQL for the quoted outbox table t, asked only when
// no entry lies after the cursor $2/$3 (gateNotTried otherwise).
func outboxGateSQL(t string) string {
	// The newest entry, not EXISTS: its ORDER BY keeps the generic plan
	// on baton_outbox_walk, where EXISTS would let it scan the table.
	return `SELECT CASE WHEN (SELECT xid FROM ` + t + ` WHERE (xid, id) > ($2::xid8, $3::uuid)
                ORDER BY xid DESC, id DESC LIMIT 1) IS NOT NULL THEN 0
            ` + gateCases
}

// outboxNewestSQL reads the newest entry of the quoted outbox table t after
// the cursor $1/$2, committed whatever the horizon, along
// baton_outbox_walk backwards.
func outboxNewestSQL(t string) string {
	return `SELECT xid FROM ` + t + `
WHERE (xid, id) > ($1::xid8, $2::uuid)
ORDER BY xid DESC, id DESC
LIMIT 1`
}

// Listener is a listening session on a connection of its own: the
// outbox's (outbox.Listener, through OutboxListener) or a work table's
// (workrow.Listener). It is used by one goroutine at a time.
type Listener struct {
	a       Adapter
	area    Area
	conn    *pgx.Conn
	channel string
	key     int64
	newest  string // the outbox's newest-entry statement; "" for work rows
	gate    string // the outbox's gate statement
	held    bool   // this session holds the idle gate
	release func() // gives the connection back to the adapter, which closes it
}

// listen opens a session and makes it listen for the signals of table
// (quoted, qualified), the channel being prefix and the table's oid. The
// session's release, called by Close, ends the connection: a session that
// listened, or holds the gate, is never reused.
func (a Adapter) listen(ctx context.Context, ar Area, open Session, table, prefix string) (*Listener, error) {
	conn, release, err := open(ctx)
	if err != nil {
		return nil, a.errorf("%s listen: get a connection: %w", areaInfo[ar].name, err)
	}
	var oid int64
	if err := conn.QueryRow(ctx, tableOIDSQL, table).Scan(&oid); err != nil {
		release()
		return nil, a.MapError(ar, "listen: find the table", err)
	}
	l := &Listener{a: a, area: ar, conn: conn, channel: prefix + strconv.FormatInt(oid, 10), key: GateKey(uint32(oid)), release: release}
	if _, err := conn.Exec(ctx, "LISTEN "+quote(l.channel)); err != nil {
		release()
		return nil, a.MapError(ar, "listen", err)
	}
	return l, nil
}

// ListenOutbox listens for the commits into the outbox tables of s on a
// session of open's.
func (s *OutboxStore) ListenOutbox(ctx context.Context, open Session) (*OutboxListener, error) {
	l, err := s.a.listen(ctx, AreaOutbox, open, s.table, OutboxChannelPrefix)
	if err != nil {
		return nil, err
	}
	l.newest, l.gate = s.sql.Newest, s.sql.Gate
	return &OutboxListener{l}, nil
}

// ListenWork listens for the signals of s's table on a session of
// open's.
func (s *WorkRows[K, R]) ListenWork(ctx context.Context, open Session) (*Listener, error) {
	return s.c.Adapter.listen(ctx, AreaWorkRow, open, s.table, WorkChannelPrefix)
}

// Signal signals s's table in the caller's transaction q: the workers
// listening for it claim as soon as the transaction commits.
func (s *WorkRows[K, R]) Signal(ctx context.Context, q Querier) error {
	return s.c.Adapter.SignalWork(ctx, q, s.table)
}

// SignalWorkRows is the adapters' SignalWorkRows: it signals the work
// table table in schema ("" for the search_path) in the caller's
// transaction q, after checking both names.
func (a Adapter) SignalWorkRows(ctx context.Context, q Querier, schema, table string) error {
	if p := IdentifierProblem(table); p != "" {
		return a.errorf("SignalWorkRows: table %q: %s", table, p)
	}
	if schema != "" {
		if err := ValidateSchemaName("SignalWorkRows schema", schema); err != nil {
			return err
		}
	}
	return a.SignalWork(ctx, q, Qualified(schema, table))
}

// SignalWork signals the work table (quoted and qualified as in a
// statement, or found through the search_path) in the caller's
// transaction q.
func (a Adapter) SignalWork(ctx context.Context, q Querier, table string) error {
	if q == nil {
		return a.errorf("signal work rows: the transaction is nil; signal inside the transaction that inserts the rows")
	}
	if _, err := q.Exec(ctx, WorkSignalSQL, table); err != nil {
		return a.MapError(AreaWorkRow, "signal", err)
	}
	return nil
}

// Idle implements workrow.Listener: it takes the idle gate, unless
// producers are in flight (false).
func (l *Listener) Idle(ctx context.Context) (bool, error) {
	if l.held {
		return true, nil
	}
	var who int
	if err := l.conn.QueryRow(ctx, gateSQL, l.key).Scan(&who); err != nil {
		return false, l.fail(ctx, "take the idle gate", err)
	}
	l.held = who == gateTaken
	return who != gateBusy, nil
}

// Wait implements workrow.Listener.
func (l *Listener) Wait(ctx context.Context) error {
	_, err := l.wait(ctx)
	return err
}

// wait waits for a signal, takes those already received, gives the gate
// back (producers stop signalling while the woken caller works) and
// returns the largest xid among the signals.
func (l *Listener) wait(ctx context.Context) (uint64, error) {
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return 0, l.fail(ctx, "wait for a signal", err)
	}
	xid := signalXID(n)
	for {
		// Only what has been received already: doneCtx has ended, so
		// nothing more is read from the connection.
		n, err := l.conn.WaitForNotification(doneCtx)
		if err != nil {
			break
		}
		xid = max(xid, signalXID(n))
	}
	if err := l.Busy(ctx); err != nil {
		return 0, err
	}
	return xid, nil
}

// Busy implements workrow.Listener: it gives the gate back, if this
// session holds it, so producers stop signalling while the caller works.
func (l *Listener) Busy(ctx context.Context) error {
	if !l.held {
		return nil
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gateTimeout)
	defer cancel()
	if _, err := l.conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", l.key); err != nil {
		return l.fail(ctx, "give the idle gate back", err)
	}
	l.held = false
	return nil
}

// gateTimeout bounds giving the gate back.
const gateTimeout = 10 * time.Second

// signalXID is the xid an outbox signal carries; 0 for a work-row signal.
func signalXID(n *pgconn.Notification) uint64 {
	x, err := strconv.ParseUint(n.Payload, 10, 64)
	if err != nil {
		return 0
	}
	return x
}

// doneCtx is a context that has ended: WaitForNotification with it returns
// a notification already received, or an error at once.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (l *Listener) fail(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return l.a.errorf("%s: %s: %w", areaInfo[l.area].name, op, ctx.Err())
	}
	return l.a.MapError(l.area, op, err)
}

// Close implements workrow.Listener and outbox.Listener: it ends the
// session, its LISTEN and the gate with it.
func (l *Listener) Close() error {
	if l.release != nil {
		l.release()
		l.release = nil
	}
	return nil
}

// OutboxListener is the outbox.Listener of an OutboxStore.
type OutboxListener struct{ *Listener }

var _ outbox.Listener = (*OutboxListener)(nil)

// Idle implements outbox.Listener, in one round trip: one statement takes
// the gate only if no entry lies after the cursor (under load there is one,
// and the gate is not touched), the next, which starts after the first has
// ended, reads the newest entry after the cursor, for what committed before
// the gate was taken. Finding one, Idle gives the gate back: the caller
// walks first.
func (l *OutboxListener) Idle(ctx context.Context, after outbox.Cursor) (bool, uint64, error) {
	if l.held {
		xid, err := l.newestAfter(ctx, after)
		switch {
		case err != nil:
			return false, 0, err
		case xid != 0:
			return false, xid, l.Busy(ctx)
		}
		return true, 0, nil
	}
	b := &pgx.Batch{}
	b.Queue(l.gate, l.key, after.XID, [16]byte(after.ID))
	b.Queue(l.newest, after.XID, [16]byte(after.ID))
	res := l.conn.SendBatch(ctx, b)
	var (
		who int
		xid uint64
	)
	err := res.QueryRow().Scan(&who)
	if err == nil {
		if err = res.QueryRow().Scan(&xid); errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		// Whether the gate was taken is unknown: the session is closed
		// by the caller, and the gate with it.
		return false, 0, l.fail(ctx, "take the idle gate", err)
	}
	l.held = who == gateTaken
	switch {
	case xid != 0:
		return false, xid, l.Busy(ctx)
	case who == gateTaken, who == gateHeldElsewhere:
		return true, 0, nil
	}
	return false, 0, nil // producers in flight
}

// newestAfter is the xid of the newest entry after the cursor, 0 for none.
func (l *OutboxListener) newestAfter(ctx context.Context, after outbox.Cursor) (uint64, error) {
	var xid uint64
	err := l.conn.QueryRow(ctx, l.newest, after.XID, [16]byte(after.ID)).Scan(&xid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil
	case err != nil:
		return 0, l.fail(ctx, "read the newest entry", err)
	}
	return xid, nil
}

// Wait implements outbox.Listener.
func (l *OutboxListener) Wait(ctx context.Context) (uint64, error) { return l.wait(ctx) }

// String names the session, for logs.
func (l *Listener) String() string { return fmt.Sprintf("listener on %s", l.channel) }
