package pgsql

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/baton-go/baton/core/outbox"
)

// Defaults for OutboxLogOptions.
const (
	// DefaultSlot and DefaultPublication name the replication slot and the
	// publication of the outbox table.
	DefaultSlot        = "baton_outbox"
	DefaultPublication = "baton_outbox"
	// DefaultSlotCreateTimeout bounds the creation of the slot, which
	// waits for every transaction that holds an xid to end.
	DefaultSlotCreateTimeout = 30 * time.Second
	// DefaultStatusInterval is how often a reader that is waiting tells
	// the server it is alive (well inside wal_sender_timeout, 60s by
	// default).
	DefaultStatusInterval = 10 * time.Second
	// LogApplicationName is the application_name of the reader's
	// replication connection, as pg_stat_replication shows it.
	LogApplicationName = "baton-outbox-log"
)

// ErrLogLost and ErrLogMisconfigured are core's; the reader's errors wrap
// them.
var (
	errLogLost   = outbox.ErrLogLost
	errLogConfig = outbox.ErrLogMisconfigured
)

// OutboxLogOptions configure an OutboxLogStore, of either adapter.
type OutboxLogOptions struct {
	// Schema holds the outbox tables, as OutboxStoreOptions.Schema.
	Schema string
	// Logger receives the store's diagnostics. nil discards them.
	Logger *slog.Logger
	// ConnString reaches the database for the replication connection; the
	// store sets replication=database on it. It must be a direct
	// connection (or a pooler in session mode that passes replication
	// through): a transaction pooler cannot carry a replication stream.
	ConnString string
	// Slot is the logical replication slot (pgoutput) the leader reads;
	// DefaultSlot when empty. Deployments sharing a database need one each.
	Slot string
	// Publication is the publication of the outbox table, inserts only;
	// DefaultPublication when empty.
	Publication string
	// SlotCreateTimeout bounds creating the slot; DefaultSlotCreateTimeout
	// when zero.
	SlotCreateTimeout time.Duration
	// StatusInterval is how often a waiting reader reports to the server;
	// DefaultStatusInterval when zero.
	StatusInterval time.Duration
}

var slotNamePattern = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// withDefaults returns o with the defaults filled in.
func (o OutboxLogOptions) withDefaults() OutboxLogOptions {
	if o.Slot == "" {
		o.Slot = DefaultSlot
	}
	if o.Publication == "" {
		o.Publication = DefaultPublication
	}
	if o.SlotCreateTimeout == 0 {
		o.SlotCreateTimeout = DefaultSlotCreateTimeout
	}
	if o.StatusInterval == 0 {
		o.StatusInterval = DefaultStatusInterval
	}
	return o
}

// validate checks a filled-in copy.
func (o OutboxLogOptions) validate() error {
	switch {
	case o.ConnString == "":
		return errors.New("OutboxLogOptions.ConnString is empty; the log is read on a replication connection of its own")
	case !slotNamePattern.MatchString(o.Slot):
		return fmt.Errorf("OutboxLogOptions.Slot %q: a slot name is 1 to 63 lower-case letters, digits and underscores", o.Slot)
	case strings.IndexByte(o.Publication, 0) >= 0 || len(o.Publication) > 63:
		return fmt.Errorf("OutboxLogOptions.Publication %q: at most 63 bytes, without NUL", o.Publication)
	case o.SlotCreateTimeout < 0:
		return fmt.Errorf("OutboxLogOptions.SlotCreateTimeout is %v; it must be positive", o.SlotCreateTimeout)
	case o.StatusInterval < 0:
		return fmt.Errorf("OutboxLogOptions.StatusInterval is %v; it must be positive", o.StatusInterval)
	}
	if _, err := pgconn.ParseConfig(o.ConnString); err != nil {
		return fmt.Errorf("OutboxLogOptions.ConnString: %w", err)
	}
	return nil
}

// OutboxLogStore is the outbox.LogStore over the outbox tables and the
// database's write-ahead log: a publication of baton_outbox (inserts
// only) and a logical replication slot with the pgoutput plugin, read by
// the leader on a replication connection of its own. It settles in the
// same state table as the walk, under the log keys (outbox.LogStateKeys).
type OutboxLogStore struct {
	*OutboxStore
	opts    OutboxLogOptions
	schema  string
	repl    *pgconn.Config
	parkLog string
}

var _ outbox.LogStore = (*OutboxLogStore)(nil)

// NewOutboxLogStore returns the log store over db, which is also the
// outbox.Store of the same tables, or an error naming the first invalid
// option. It sends nothing.
func NewOutboxLogStore(db DB, a Adapter, opts OutboxLogOptions) (*OutboxLogStore, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, a.errorf("NewOutboxLogStore: %w", err)
	}
	st, err := NewOutboxStore(db, a, OutboxStoreOptions{Schema: opts.Schema, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	schema := opts.Schema
	cfg, _ := pgconn.ParseConfig(opts.ConnString)
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = LogApplicationName
	return &OutboxLogStore{OutboxStore: st, opts: opts, schema: schema, repl: cfg,
		parkLog: outboxParkLogSQL(qualified(schema, OutboxTable), qualified(schema, OutboxDeadTable))}, nil
}

// Options returns the store's options, defaults filled in.
func (s *OutboxLogStore) Options() OutboxLogOptions { return s.opts }

// table is the outbox table, qualified.
func (s *OutboxLogStore) table() string { return qualified(s.schema, OutboxTable) }

// tableRegclass is the outbox table as a regclass literal's text.
func (s *OutboxLogStore) tableRegclass() string { return s.table() }

// Statements of the log source.
const (
	logWalLevelSQL = `SELECT current_setting('wal_level')`
	logRoleSQL     = `SELECT rolreplication, rolsuper FROM pg_roles WHERE rolname = current_user`
	// logSlotSQL reads the slot: $1 its name.
	logSlotSQL = `SELECT plugin, slot_type, database = current_database(), active_pid, coalesce(wal_status, ''),
       coalesce(confirmed_flush_lsn::text, '')
FROM pg_replication_slots WHERE slot_name = $1`
	logFreeSlotSQL = `SELECT current_setting('max_replication_slots')::int - (SELECT count(*) FROM pg_replication_slots)`
	// logPublicationSQL reads the publication: $1 its name, $2 the table.
	logPublicationSQL = `SELECT p.pubinsert,
       p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_rel AS pr WHERE pr.prpubid = p.oid AND pr.prrelid = $2::regclass)
FROM pg_publication AS p WHERE p.pubname = $1`
	// logOwnerSQL: may this role create a publication of the table ($1)?
	logOwnerSQL = `SELECT pg_has_role(c.relowner, 'USAGE'), pg_get_userbyid(c.relowner) FROM pg_class AS c WHERE c.oid = $1::regclass`
	// logMarkSQL is LogStore.Mark in one statement.
	logMarkSQL = `SELECT pg_current_wal_insert_lsn()::text, pg_snapshot_xmin(pg_current_snapshot())::text`
	// logBlockersSQL lists the transactions a slot's creation waits for:
	// those holding an xid, oldest first. $1 the creating backend.
	logBlockersSQL = `SELECT a.pid, coalesce(a.usename, ''), coalesce(a.application_name, ''), coalesce(a.client_addr::text, 'local'),
       coalesce(a.state, ''), coalesce(a.xact_start::text, ''), a.backend_xid::text, left(coalesce(a.query, ''), 200)
FROM pg_stat_activity AS a
WHERE a.backend_xid IS NOT NULL AND a.pid <> $1
ORDER BY a.xact_start NULLS LAST
LIMIT 5`
	logPreparedSQL = `SELECT gid, transaction::text, coalesce(owner, ''), prepared::text FROM pg_prepared_xacts ORDER BY prepared LIMIT 5`
)

// logFenceSQL records the term's token as the reader's (only if no later
// term recorded one) and, when it did, ends the backend that still reads
// the slot, in one statement. Parameters: $1 the token, $2 the slot. It
// returns whether the token was recorded and the pid it ended (or null).
func logFenceSQL(st string) string {
	return `WITH won AS (
    INSERT INTO ` + st + ` AS s (key, value) VALUES ('` + outbox.KeyLogReaderToken + `', $1::text)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value
    WHERE s.value IS NULL OR s.value::numeric <= excluded.value::numeric
    RETURNING 1
), ended AS (
    SELECT r.active_pid, pg_terminate_backend(r.active_pid) AS ok
    FROM pg_replication_slots AS r
    WHERE r.slot_name = $2 AND r.active_pid IS NOT NULL AND r.active_pid <> pg_backend_pid()
      AND EXISTS (SELECT 1 FROM won)
)
SELECT EXISTS (SELECT 1 FROM won), (SELECT active_pid FROM ended)`
}

// outboxParkLogSQL copies parked entries of the quoted outbox table t to
// the dead letters d. Parameters: $1 ids, $2 reasons. Rows carry no log
// position, so unlike the walk's park it cannot check a range: it takes
// every entry the outbox holds, and the caller compares the row count with
// the entries it asked for. A dead letter with the id of one is replaced
// by it, as on the walk (parkSQL).
func outboxParkLogSQL(t, d string) string { return parkSQL(t, d, "") }

// SettleLog implements outbox.LogStore in one READ COMMITTED transaction,
// as Settle does for the walk: lock and compare the stored log position,
// park, write the state with the position from st.To.
func (s *OutboxLogStore) SettleLog(ctx context.Context, st outbox.LogSettlement) error {
	if err := outbox.ValidateLogSettlement(st); err != nil {
		return s.a.errorf("outbox settle log: %w", err)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return s.a.MapError(AreaSettle, "begin", err)
	}
	defer rollback(ctx, tx)
	stored, err := s.lockKeys(ctx, tx, outbox.KeyLogLSN, outbox.KeyLogSeq)
	if err != nil {
		return s.a.MapError(AreaSettle, "lock the log position", err)
	}
	cur, err := outbox.LogPositionFromState(stored)
	if err != nil {
		return s.a.errorf("outbox settle log: the stored log position is unreadable: %w", err)
	}
	if cur != st.From {
		return s.a.errorf("outbox settle log: the stored log position is %s, the pass started from %s: %w", cur, st.From, outbox.ErrCursorMoved)
	}
	if len(st.Park) > 0 {
		ids := make([][16]byte, len(st.Park))
		reasons := make([]string, len(st.Park))
		for i, p := range st.Park {
			ids[i], reasons[i] = [16]byte(p.Entry.ID), p.Reason
		}
		n, err := tx.Exec(ctx, s.parkLog, ids, reasons)
		if err != nil {
			return s.a.MapError(AreaSettle, "park", err)
		}
		if n != int64(len(ids)) {
			return s.a.errorf("outbox settle log: %d of the %d entries to park are in the outbox; nothing was written", n, len(ids))
		}
	}
	lsn, seq := outbox.LogPositionState(st.To)
	keys, values, remove := stateWrites(st.State, [][2]string{{outbox.KeyLogLSN, lsn}, {outbox.KeyLogSeq, seq}})
	if _, err := execCommit(ctx, tx, s.sql.WriteState, keys, values, remove); err != nil {
		return s.a.MapError(AreaSettle, "write state", err)
	}
	return nil
}

// lockKeys locks two state keys for the settling transaction and returns
// their latest committed values (absent ones inserted as "0", which the
// caller's roll back removes when it writes nothing; see
// outboxLockCursorSQL).
func (s *OutboxStore) lockKeys(ctx context.Context, tx Tx, k1, k2 string) (map[string]string, error) {
	rows, err := tx.Query(ctx, s.sql.LockCursor, k1, "0", k2, "0")
	stored := make(map[string]string, 2)
	err = each(rows, err, func(r Rows) error {
		var (
			key   string
			value pgtype.Text
		)
		if err := r.Scan(&key, &value); err != nil {
			return err
		}
		if value.Valid {
			stored[key] = value.String
		}
		return nil
	})
	return stored, err
}

// stateWrites splits state into keys to upsert (fixed first, which win
// over the same keys in state) and keys to remove.
func stateWrites(state map[string]*string, fixed [][2]string) (keys, values, remove []string) {
	remove = []string{}
	taken := map[string]bool{}
	for _, kv := range fixed {
		keys, values = append(keys, kv[0]), append(values, kv[1])
		taken[kv[0]] = true
	}
	for k, v := range state {
		switch {
		case taken[k]:
		case v == nil:
			remove = append(remove, k)
		default:
			keys, values = append(keys, k), append(values, *v)
		}
	}
	return keys, values, remove
}

// Mark implements outbox.LogStore in one statement.
func (s *OutboxLogStore) Mark(ctx context.Context) (outbox.LogMark, error) {
	var lsn, xid string
	if err := s.db.QueryRow(ctx, logMarkSQL).Scan(&lsn, &xid); err != nil {
		return outbox.LogMark{}, s.a.MapError(AreaOutbox, "log mark", err)
	}
	l, err := pglogrepl.ParseLSN(lsn)
	if err != nil {
		return outbox.LogMark{}, s.a.errorf("outbox log mark: %w", err)
	}
	x, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		return outbox.LogMark{}, s.a.errorf("outbox log mark: %w", err)
	}
	return outbox.LogMark{LSN: uint64(l), XID: x}, nil
}

// misconfigured is an error wrapping outbox.ErrLogMisconfigured.
func (s *OutboxLogStore) misconfigured(format string, args ...any) error {
	return s.a.errorf("outbox log: %w: %s", errLogConfig, fmt.Sprintf(format, args...))
}

// slotInfo is the slot as pg_replication_slots shows it.
type slotInfo struct {
	exists         bool
	plugin, kind   string
	sameDatabase   bool
	activePID      pgtype.Int4
	walStatus      string
	confirmedFlush string
}

func (s *OutboxLogStore) readSlot(ctx context.Context) (slotInfo, error) {
	var si slotInfo
	var plugin, kind pgtype.Text
	err := s.db.QueryRow(ctx, logSlotSQL, s.opts.Slot).Scan(&plugin, &kind, &si.sameDatabase, &si.activePID, &si.walStatus, &si.confirmedFlush)
	if errors.Is(err, errNoRows) {
		return slotInfo{}, nil
	}
	if err != nil {
		return slotInfo{}, s.a.MapError(AreaOutbox, "read the replication slot", err)
	}
	si.exists, si.plugin, si.kind = true, plugin.String, kind.String
	return si, nil
}

// lostAdvice is what an operator can do about an invalidated slot.
func (s *OutboxLogStore) lostAdvice() string {
	return fmt.Sprintf("drop it (`baton outbox slot drop --slot %s`) and the driver creates it again, walking the table from the settled cursor first (entries settled since it are delivered again), or run the driver without the log (the walk); see docs/outbox.md, \"Choosing a source\"", s.opts.Slot)
}

// check runs the boot checks of Open that need no replication
// connection, and returns the slot.
func (s *OutboxLogStore) check(ctx context.Context) (slotInfo, error) {
	var walLevel string
	if err := s.db.QueryRow(ctx, logWalLevelSQL).Scan(&walLevel); err != nil {
		return slotInfo{}, s.a.MapError(AreaOutbox, "read wal_level", err)
	}
	if walLevel != "logical" {
		return slotInfo{}, s.misconfigured("wal_level is %q; reading the outbox from the log needs wal_level = logical (ALTER SYSTEM SET wal_level = logical, then restart the server), or run the driver without the log", walLevel)
	}
	var replication, super bool
	if err := s.db.QueryRow(ctx, logRoleSQL).Scan(&replication, &super); err != nil {
		return slotInfo{}, s.a.MapError(AreaOutbox, "read the role's attributes", err)
	}
	if !replication && !super {
		return slotInfo{}, s.misconfigured("the role has no REPLICATION attribute, which the slot needs: ALTER ROLE current_user REPLICATION (as a superuser)")
	}
	si, err := s.readSlot(ctx)
	if err != nil {
		return slotInfo{}, err
	}
	switch {
	case si.exists && si.walStatus == "lost":
		return slotInfo{}, s.a.errorf("outbox log: %w: the replication slot %q was invalidated: it held more WAL than max_slot_wal_keep_size allows, and the WAL it needed is gone; %s",
			errLogLost, s.opts.Slot, s.lostAdvice())
	case si.exists && (si.plugin != "pgoutput" || si.kind != "logical" || !si.sameDatabase):
		return slotInfo{}, s.misconfigured("the replication slot %q exists but is not a logical pgoutput slot of this database (plugin %q, type %q); choose another OutboxLogOptions.Slot, or drop it", s.opts.Slot, si.plugin, si.kind)
	case !si.exists:
		var free int
		if err := s.db.QueryRow(ctx, logFreeSlotSQL).Scan(&free); err != nil {
			return slotInfo{}, s.a.MapError(AreaOutbox, "count replication slots", err)
		}
		if free < 1 {
			return slotInfo{}, s.misconfigured("no replication slot is free for %q: every one of max_replication_slots is in use; raise max_replication_slots (restart) or drop an unused slot", s.opts.Slot)
		}
	}
	if err := s.ensurePublication(ctx, si.exists); err != nil {
		return slotInfo{}, err
	}
	return si, nil
}

// ensurePublication checks the publication, and creates it when it and
// the slot are both missing: a publication dropped under an existing slot
// cannot be mended by creating it again (the slot decodes with the
// catalog as it was at each change).
func (s *OutboxLogStore) ensurePublication(ctx context.Context, slotExists bool) error {
	var inserts, hasTable bool
	err := s.db.QueryRow(ctx, logPublicationSQL, s.opts.Publication, s.tableRegclass()).Scan(&inserts, &hasTable)
	switch {
	case err == nil:
		if !inserts || !hasTable {
			return s.misconfigured("the publication %q does not publish the inserts of %s; ALTER PUBLICATION %s ADD TABLE %s, SET (publish = 'insert'), or choose another OutboxLogOptions.Publication",
				s.opts.Publication, s.table(), quote(s.opts.Publication), s.table())
		}
		return nil
	case !errors.Is(err, errNoRows):
		return s.a.MapError(AreaOutbox, "read the publication", err)
	case slotExists:
		return s.misconfigured("the publication %q is gone (dropped by hand?) while its slot %q exists: the slot cannot be read past the drop; drop the slot (`baton outbox slot drop --slot %s`) and the driver creates both again, walking the table from the settled cursor first",
			s.opts.Publication, s.opts.Slot, s.opts.Slot)
	}
	var owns bool
	var owner string
	if err := s.db.QueryRow(ctx, logOwnerSQL, s.tableRegclass()).Scan(&owns, &owner); err != nil {
		return s.a.MapError(AreaOutbox, "read the table's owner", err)
	}
	create := "CREATE PUBLICATION " + quote(s.opts.Publication) + " FOR TABLE " + s.table() + " WITH (publish = 'insert')"
	if !owns {
		return s.misconfigured("creating the publication %q needs the owner of %s (%s); have it run: %s", s.opts.Publication, s.table(), owner, create)
	}
	if _, err := s.db.Exec(ctx, create); err != nil && sqlState(err) != "42710" { // duplicate_object: created meanwhile
		return s.a.MapError(AreaOutbox, "create the publication", err)
	}
	return nil
}

// fence records token as the reader's and ends the slot's reader of an
// earlier term.
func (s *OutboxLogStore) fence(ctx context.Context, token uint64, si slotInfo) error {
	if token == 0 {
		if si.activePID.Valid {
			return s.a.errorf("outbox log: the slot %q is read by backend %d, and the leader lock gives no fencing token to end it safely; it is freed once wal_sender_timeout passes without an answer",
				s.opts.Slot, si.activePID.Int32)
		}
		return nil
	}
	var (
		won   bool
		ended pgtype.Int4
	)
	if err := s.db.QueryRow(ctx, logFenceSQL(s.stateTable()), strconv.FormatUint(token, 10), s.opts.Slot).Scan(&won, &ended); err != nil {
		return s.a.MapError(AreaOutbox, "fence the slot's reader", err)
	}
	if !won {
		return s.a.errorf("outbox log: a later leadership term (a token above %d) has opened the slot %q: %w", token, s.opts.Slot, outbox.ErrReaderFenced)
	}
	if ended.Valid {
		s.logger.WarnContext(ctx, "baton: outbox log: ended the slot's reader of an earlier term", "slot", s.opts.Slot, "pid", ended.Int32, "token", token)
	}
	return nil
}

func (s *OutboxLogStore) stateTable() string { return qualified(s.schema, OutboxStateTable) }

// Open implements outbox.LogStore: the boot checks, the publication, the
// fence, the replication connection, and the slot (created when missing,
// within SlotCreateTimeout). The stream starts with the first Read.
func (s *OutboxLogStore) Open(ctx context.Context, token uint64) (outbox.LogReader, error) {
	si, err := s.check(ctx)
	if err != nil {
		return nil, err
	}
	if si.exists {
		if err := s.fence(ctx, token, si); err != nil {
			return nil, err
		}
	}
	conn, err := pgconn.ConnectConfig(ctx, s.repl)
	if err != nil {
		return nil, s.connectError(err)
	}
	r := &logReader{s: s, conn: conn, token: token}
	if err := r.identify(ctx); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if !si.exists {
		start, err := s.createSlot(ctx, conn)
		if err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		r.start = outbox.LogPosition{LSN: start}
		if err := s.fence(ctx, token, slotInfo{}); err != nil {
			_ = conn.Close(context.WithoutCancel(ctx))
			return nil, err
		}
		return r, nil
	}
	l, err := pglogrepl.ParseLSN(si.confirmedFlush)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, s.a.errorf("outbox log: the slot's confirmed_flush_lsn %q: %w", si.confirmedFlush, err)
	}
	r.start = outbox.LogPosition{LSN: uint64(l)}
	return r, nil
}

// connectError explains a refused replication connection.
func (s *OutboxLogStore) connectError(err error) error {
	switch sqlState(err) {
	case "42501", "28000": // insufficient_privilege, invalid_authorization_specification
		return s.misconfigured("the replication connection was refused (%v): the role needs the REPLICATION attribute, and pg_hba.conf a line for the replication connection of this database", err)
	case "53300": // too_many_connections: max_wal_senders
		return s.misconfigured("the replication connection was refused (%v): every one of max_wal_senders is in use; raise max_wal_senders (restart)", err)
	}
	return s.a.errorf("outbox log: the replication connection: %w", err)
}

// createSlot creates the slot on conn within SlotCreateTimeout and returns
// its consistent point. Creation waits for every transaction that holds an
// xid to end; on timeout it is cancelled, and the error names the oldest of
// those transactions.
func (s *OutboxLogStore) createSlot(ctx context.Context, conn *pgconn.PgConn) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, s.opts.SlotCreateTimeout)
	defer cancel()
	res, err := pglogrepl.CreateReplicationSlot(cctx, conn, s.opts.Slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil && cctx.Err() != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		// Name who holds it up, then end the creating backend: a slot is
		// only kept once its creation completes.
		blockers := s.blockers(context.WithoutCancel(ctx), int32(conn.PID()))
		s.cancelBackend(context.WithoutCancel(ctx), int32(conn.PID()))
		return 0, s.misconfigured("creating the replication slot %q did not finish within %v (OutboxLogOptions.SlotCreateTimeout): it waits for every transaction that holds an xid to end; %s",
			s.opts.Slot, s.opts.SlotCreateTimeout, blockers)
	}
	c := struct {
		res pglogrepl.CreateReplicationSlotResult
		err error
	}{res, err}
	if c.err != nil {
		if sqlState(c.err) == "42710" { // duplicate_object: another node created it meanwhile
			si, err := s.readSlot(ctx)
			if err != nil || !si.exists {
				return 0, s.a.errorf("outbox log: create the replication slot: %w", c.err)
			}
			l, err := pglogrepl.ParseLSN(si.confirmedFlush)
			return uint64(l), err
		}
		if sqlState(c.err) == "53400" { // configuration_limit_exceeded
			return 0, s.misconfigured("no replication slot is free for %q (%v); raise max_replication_slots or drop an unused slot", s.opts.Slot, c.err)
		}
		return 0, s.a.errorf("outbox log: create the replication slot %q: %w", s.opts.Slot, c.err)
	}
	l, err := pglogrepl.ParseLSN(c.res.ConsistentPoint)
	if err != nil {
		return 0, s.a.errorf("outbox log: the new slot's consistent point %q: %w", c.res.ConsistentPoint, err)
	}
	s.logger.InfoContext(ctx, "baton: outbox log: created the replication slot", "slot", s.opts.Slot, "consistent_point", c.res.ConsistentPoint)
	return uint64(l), nil
}

// blockers describes the transactions a slot's creation waits for.
func (s *OutboxLogStore) blockers(ctx context.Context, self int32) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []string
	rows, err := s.db.Query(ctx, logBlockersSQL, self)
	err = each(rows, err, func(r Rows) error {
		var pid int32
		var user, app, client, state, start, xid, query string
		if err := r.Scan(&pid, &user, &app, &client, &state, &start, &xid, &query); err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("backend %d (user %q, application_name %q, client %s, %s since %s, xid %s, query %q)", pid, user, app, client, state, start, xid, query))
		return nil
	})
	if err != nil {
		return "the transactions it waits for could not be listed: " + err.Error()
	}
	rows, err = s.db.Query(ctx, logPreparedSQL)
	_ = each(rows, err, func(r Rows) error {
		var gid, xid, owner, at string
		if err := r.Scan(&gid, &xid, &owner, &at); err != nil {
			return err
		}
		out = append(out, fmt.Sprintf("prepared transaction %q (xid %s, owner %q, prepared at %s)", gid, xid, owner, at))
		return nil
	})
	if len(out) == 0 {
		return "no transaction holding an xid is running now; try again"
	}
	return "the oldest transactions holding an xid, which it waits for: " + strings.Join(out, "; ") + " (end them, or COMMIT/ROLLBACK PREPARED, and start again)"
}

// cancelBackend ends the backend creating the slot and waits until it has
// gone: pg_terminate_backend only signals it, and the half-made slot is
// dropped as the backend exits, so returning earlier would let the caller
// (or an operator's next look) still see it.
func (s *OutboxLogStore) cancelBackend(ctx context.Context, pid int32) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var ok bool
	if err := s.db.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		return
	}
	for ctx.Err() == nil {
		var alive bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1) OR EXISTS (SELECT 1 FROM pg_replication_slots WHERE active_pid = $1)`, pid).Scan(&alive); err != nil || !alive {
			return
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// SlotStatus is a replication slot as `baton outbox slot status` shows it.
type SlotStatus struct {
	Name, Plugin, Type string
	Active             bool
	ActivePID          *int32
	WALStatus          string // reserved, extended, unreserved or lost
	RestartLSN         string
	ConfirmedFlushLSN  string
	RetainedBytes      *int64 // WAL kept for the slot: from restart_lsn to the current position
	SafeWALSize        *int64 // bytes that may still be written before the slot is at risk (null without max_slot_wal_keep_size)
	MaxSlotWALKeepSize string
	PublicationExists  bool
	PublicationName    string
	ReaderToken        string
	SettledLogPosition string
}

const logSlotStatusSQL = `SELECT s.slot_name::text, coalesce(s.plugin::text, ''), s.slot_type, s.active, s.active_pid, coalesce(s.wal_status, ''),
       coalesce(s.restart_lsn::text, ''), coalesce(s.confirmed_flush_lsn::text, ''),
       pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::bigint, s.safe_wal_size,
       current_setting('max_slot_wal_keep_size')
FROM pg_replication_slots AS s WHERE s.slot_name = $1`

// SlotStatus reads the slot and the publication; ok is false when the
// slot does not exist.
func (s *OutboxLogStore) SlotStatus(ctx context.Context) (st SlotStatus, ok bool, err error) {
	var pid pgtype.Int4
	var retained, safe pgtype.Int8
	err = s.db.QueryRow(ctx, logSlotStatusSQL, s.opts.Slot).Scan(&st.Name, &st.Plugin, &st.Type, &st.Active, &pid, &st.WALStatus,
		&st.RestartLSN, &st.ConfirmedFlushLSN, &retained, &safe, &st.MaxSlotWALKeepSize)
	if errors.Is(err, errNoRows) {
		return SlotStatus{}, false, nil
	}
	if err != nil {
		return SlotStatus{}, false, s.a.MapError(AreaOutbox, "slot status", err)
	}
	if pid.Valid {
		st.ActivePID = &pid.Int32
	}
	if retained.Valid {
		st.RetainedBytes = &retained.Int64
	}
	if safe.Valid {
		st.SafeWALSize = &safe.Int64
	}
	st.PublicationName = s.opts.Publication
	var one int
	err = s.db.QueryRow(ctx, `SELECT 1 FROM pg_publication WHERE pubname = $1`, s.opts.Publication).Scan(&one)
	st.PublicationExists = err == nil
	if state, err := s.State(ctx); err == nil {
		st.ReaderToken = state[outbox.KeyLogReaderToken]
		if p, err := outbox.LogPositionFromState(state); err == nil && state[outbox.KeyLogLSN] != "" {
			st.SettledLogPosition = p.String()
		}
	}
	return st, true, nil
}

// DropSlot drops the slot. With force, a reader still attached is ended
// first; without, an active slot is refused.
func (s *OutboxLogStore) DropSlot(ctx context.Context, force bool) error {
	si, err := s.readSlot(ctx)
	if err != nil {
		return err
	}
	if !si.exists {
		return s.a.errorf("outbox log: there is no replication slot %q", s.opts.Slot)
	}
	if si.activePID.Valid {
		if !force {
			return s.a.errorf("outbox log: the slot %q is being read by backend %d (a leader); stop it first, or drop with --force, which ends that reader", s.opts.Slot, si.activePID.Int32)
		}
		s.cancelBackend(ctx, si.activePID.Int32)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, s.opts.Slot)
		if err == nil {
			return nil
		}
		if sqlState(err) != "55006" || time.Now().After(deadline) { // object_in_use: the ended reader is still exiting
			return s.a.errorf("outbox log: drop the slot %q: %w", s.opts.Slot, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
