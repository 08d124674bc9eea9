package pgsql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/baton-go/baton/core/outbox"
)

// logQuiet is how long a Read that has entries waits for the next message
// before it returns them: the messages of a busy stream arrive back to
// back, so a gap this long means the stream has caught up.
const logQuiet = time.Millisecond

// logReader is one term's reader of the slot, on a replication connection
// of its own: the pgoutput stream (protocol 1, whole transactions after
// their commit) decoded into entries with their log positions.
//
// A decoded insert is held until the next message arrives: only that one
// tells whether it was its transaction's last (see outbox.LogPosition).
//
// The stream is read only while the buffer has room, by count (a Read's
// limit) and by bytes (outbox.ScanHasRoom, R19): the reader holds at most
// a batch within the byte budget, and the one insert held, however far
// ahead the server has decoded; the rest waits in the stream.
type logReader struct {
	s     *OutboxLogStore
	conn  *pgconn.PgConn
	token uint64
	start outbox.LogPosition

	streaming  bool
	types      *pgtype.Map
	relations  map[uint32]*logRelation
	inTx       bool
	commitLSN  uint64
	seq        uint32
	held       outbox.Entry // valid while holding
	holding    bool
	cols       []logColumn        // the last insert's columns, reused
	lane       string             // the last lane decoded, reused while it repeats
	deadline   time.Time          // the socket's read deadline, zero for none
	buf        []outbox.LogEntry  // positioned entries, not yet passed by a Read's after
	bufBytes   int                // the payload bytes of buf
	reached    outbox.LogPosition // no entry outside buf lies at or below it
	confirmed  uint64
	nextStatus time.Time
	broken     error
}

// logRelation maps a relation's columns to the entry's fields, by name:
// columns baton does not read are skipped, wherever they are.
type logRelation struct {
	ours                   bool
	xid, id, lane, payload int
	createdAt              int
	// traceContext is -1 when the table has no such column: a table
	// published before its migration still decodes, without one.
	traceContext int
	oids         []uint32
}

func (r *logReader) Start() outbox.LogPosition { return r.start }

// identify proves the connection is a walsender of this database: a
// transaction pooler, which cannot carry replication, would refuse.
func (r *logReader) identify(ctx context.Context) error {
	sys, err := pglogrepl.IdentifySystem(ctx, r.conn)
	if err != nil {
		return r.s.misconfigured("IDENTIFY_SYSTEM failed on the replication connection (%v): the log needs a direct connection to the server, or a pooler in session mode that passes replication through; a transaction pooler cannot carry it", err)
	}
	if sys.DBName == "" {
		return r.s.misconfigured("the replication connection is not bound to a database (replication=database was not honoured); connect directly to the server")
	}
	return nil
}

// startStream starts replication from lsn, which the server raises to
// the slot's confirmed position if it is below it. A slot whose reader of
// an earlier term is still exiting is tried again for a few seconds.
func (r *logReader) startStream(ctx context.Context, lsn uint64) error {
	args := []string{"proto_version '1'", "publication_names '" + strings.ReplaceAll(r.s.opts.Publication, "'", "''") + "'", "binary 'true'"}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := pglogrepl.StartReplication(ctx, r.conn, r.s.opts.Slot, pglogrepl.LSN(lsn),
			pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args})
		if err == nil {
			break
		}
		if sqlState(err) != "55006" || time.Now().After(deadline) { // object_in_use
			return r.streamError(ctx, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.streaming = true
	r.types = pgtype.NewMap()
	r.relations = map[uint32]*logRelation{}
	r.confirmed = lsn
	r.nextStatus = time.Now().Add(r.s.opts.StatusInterval)
	return nil
}

// streamError explains an error of the replication connection, and leaves
// the reader broken.
func (r *logReader) streamError(ctx context.Context, err error) error {
	var pgErr *pgconn.PgError
	msg := ""
	if errors.As(err, &pgErr) {
		msg = pgErr.Message + " " + pgErr.Detail
	}
	switch {
	case strings.Contains(msg, "invalidated") || strings.Contains(msg, "can no longer get changes"):
		err = r.s.a.errorf("outbox log: %w: the replication slot %q was invalidated (%v); %s", errLogLost, r.s.opts.Slot, err, r.s.lostAdvice())
	case sqlState(err) == "42704" && strings.Contains(msg, "publication"): // undefined_object
		err = r.s.misconfigured("the publication %q is gone (dropped by hand?) and the slot %q cannot be read past the drop (%v); drop the slot (`baton outbox slot drop --slot %s`) and the driver creates both again, walking the table from the settled cursor first",
			r.s.opts.Publication, r.s.opts.Slot, err, r.s.opts.Slot)
	case sqlState(err) == "57P01" || r.conn.IsClosed():
		// Ended from outside: by a later term's Open, when its token is
		// above ours.
		st, serr := r.s.State(context.WithoutCancel(ctx))
		if serr == nil && outbox.ReadLogReaderToken(st) > r.token {
			err = r.s.a.errorf("outbox log: the slot's reader was ended by a later leadership term (%v): %w", err, outbox.ErrReaderFenced)
		} else {
			err = r.s.a.errorf("outbox log: the replication connection ended: %w", err)
		}
	default:
		err = r.s.a.errorf("outbox log: the replication stream: %w", err)
	}
	r.broken = err
	return err
}

// Read implements outbox.LogReader.
func (r *logReader) Read(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
	switch {
	case limit < 1:
		return outbox.LogBatch{}, r.s.a.errorf("outbox read log: the limit is %d; it must be at least 1", limit)
	case wait < 0:
		return outbox.LogBatch{}, r.s.a.errorf("outbox read log: the wait is %v; it must not be negative", wait)
	case ctx.Err() != nil:
		return outbox.LogBatch{}, ctx.Err()
	case r.broken != nil:
		return outbox.LogBatch{}, r.broken
	}
	if !r.streaming {
		// A later term may have opened the log since this reader did,
		// before either streamed: then the slot is no longer this
		// reader's to take.
		if st, err := r.s.State(ctx); err != nil {
			return outbox.LogBatch{}, err
		} else if outbox.ReadLogReaderToken(st) > r.token {
			r.broken = r.s.a.errorf("outbox log: a later leadership term opened the slot %q: %w", r.s.opts.Slot, outbox.ErrReaderFenced)
			return outbox.LogBatch{}, r.broken
		}
		if err := r.startStream(ctx, after.LSN); err != nil {
			return outbox.LogBatch{}, err
		}
	}
	r.drop(after)
	if r.reached.Compare(after) < 0 {
		r.reached = after
	}
	// Between Reads the socket has no deadline (Confirm and Close write).
	defer func() { _ = r.readDeadline(time.Time{}) }()
	deadline := time.Now().Add(wait)
	for len(r.buf) < limit && outbox.ScanHasRoom(r.bufBytes) {
		until := deadline
		if len(r.buf) > 0 {
			until = time.Now().Add(logQuiet)
		}
		if err := r.statusIfDue(); err != nil {
			return outbox.LogBatch{}, r.streamError(ctx, err)
		}
		if r.nextStatus.Before(until) {
			until = r.nextStatus
		}
		msg, err := r.receive(ctx, until)
		if err != nil {
			if ctx.Err() != nil {
				return outbox.LogBatch{}, ctx.Err()
			}
			if isTimeout(err) {
				if len(r.buf) > 0 || !time.Now().Before(deadline) {
					break
				}
				continue
			}
			return outbox.LogBatch{}, r.streamError(ctx, err)
		}
		if err := r.handle(msg, after); err != nil {
			return outbox.LogBatch{}, err
		}
	}
	// The batch: up to limit entries, and no further than the entry that
	// fills the byte budget (R19). A buffer carried over from an earlier
	// Read is cut by the same rule.
	n, taken := 0, 0
	for n < min(limit, len(r.buf)) && outbox.ScanHasRoom(taken) {
		taken += len(r.buf[n].Payload)
		n++
	}
	b := outbox.LogBatch{Entries: make([]outbox.LogEntry, n), Reached: r.reached}
	copy(b.Entries, r.buf)
	if n < len(r.buf) {
		b.Reached = r.buf[n-1].Pos
	}
	return b, nil
}

// drop forgets buffered entries at or below after.
func (r *logReader) drop(after outbox.LogPosition) {
	i := 0
	for i < len(r.buf) && r.buf[i].Pos.Compare(after) <= 0 {
		r.bufBytes -= len(r.buf[i].Payload)
		r.buf[i] = outbox.LogEntry{} // its payload is garbage now
		i++
	}
	r.buf = r.buf[i:]
}

// receive waits for the next message until the deadline. A short wait
// (the quiet gap between the messages of a busy stream) is a read
// deadline on the socket, checked by no goroutine: the stream's hot path
// receives tens of thousands of messages a second. A longer one watches
// ctx, so that a leader that loses its lock stops waiting at once.
func (r *logReader) receive(ctx context.Context, until time.Time) (pgproto3.BackendMessage, error) {
	if time.Until(until) <= 10*logQuiet {
		if err := r.readDeadline(until); err != nil {
			return nil, err
		}
		return r.conn.ReceiveMessage(context.Background())
	}
	if err := r.readDeadline(time.Time{}); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	return r.conn.ReceiveMessage(rctx)
}

// readDeadline moves the socket's read deadline to t (zero: none). A
// deadline still ahead and at most logQuiet/4 before t is kept: moving it
// is a call into the runtime's timers, which a busy stream would make at
// every message, and a quiet gap cut a quarter short only ends a batch
// sooner.
func (r *logReader) readDeadline(t time.Time) error {
	switch {
	case t.IsZero() && r.deadline.IsZero():
		return nil
	case !t.IsZero() && !r.deadline.IsZero() && !r.deadline.After(t) && t.Sub(r.deadline) <= logQuiet/4 && time.Now().Before(r.deadline):
		return nil
	}
	r.deadline = t
	return r.conn.Conn().SetReadDeadline(t)
}

// isTimeout reports a receive that ended at its deadline, either way.
func isTimeout(err error) bool {
	if pgconn.Timeout(err) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// handle takes one message of the stream.
func (r *logReader) handle(msg pgproto3.BackendMessage, after outbox.LogPosition) error {
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		if len(m.Data) == 0 {
			return nil
		}
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
			if err != nil {
				return r.fail(err)
			}
			// Every transaction committed before the server's position
			// was sent before this message.
			if !r.inTx {
				if p := (outbox.LogPosition{LSN: uint64(ka.ServerWALEnd)}); p.Compare(r.reached) > 0 {
					r.reached = p
				}
			}
			if ka.ReplyRequested {
				r.nextStatus = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(m.Data[1:])
			if err != nil {
				return r.fail(err)
			}
			return r.logical(x.WALData, after)
		}
	case *pgproto3.ErrorResponse:
		return r.streamError(context.Background(), pgconn.ErrorResponseToPgError(m))
	case *pgproto3.CopyDone:
		return r.fail(errors.New("the server ended the stream"))
	}
	return nil
}

// logical takes one pgoutput message.
func (r *logReader) logical(data []byte, after outbox.LogPosition) error {
	if len(data) > 0 && data[0] == byte(pglogrepl.MessageTypeInsert) {
		return r.insert(data[1:], after)
	}
	m, err := pglogrepl.Parse(data)
	if err != nil {
		return r.fail(err)
	}
	switch m := m.(type) {
	case *pglogrepl.RelationMessage:
		r.relations[m.RelationID] = r.relation(m)
	case *pglogrepl.BeginMessage:
		r.inTx, r.commitLSN, r.seq, r.holding = true, uint64(m.FinalLSN), 0, false
	case *pglogrepl.CommitMessage:
		end := outbox.LogPosition{LSN: uint64(m.TransactionEndLSN)}
		if r.holding {
			r.place(r.held, end, after)
		}
		r.inTx, r.holding = false, false
		if end.Compare(r.reached) > 0 {
			r.reached = end
		}
	}
	return nil
}

// insert takes an Insert message (its kind byte taken off): an entry,
// when the row is the outbox's.
func (r *logReader) insert(msg []byte, after outbox.LogPosition) error {
	relID, cols, err := parseInsert(msg, r.cols[:0])
	r.cols = cols
	if err != nil {
		return r.fail(err)
	}
	rel := r.relations[relID]
	if rel == nil || !rel.ours {
		return nil
	}
	e, err := r.decode(rel, cols)
	if err != nil {
		return r.fail(err)
	}
	if r.holding {
		r.seq++
		r.place(r.held, outbox.LogPosition{LSN: r.commitLSN, Seq: r.seq}, after)
	}
	r.held, r.holding = e, true
	return nil
}

// place buffers a positioned entry, unless it lies at or below after.
func (r *logReader) place(e outbox.Entry, p outbox.LogPosition, after outbox.LogPosition) {
	if p.Compare(after) > 0 {
		r.buf = append(r.buf, outbox.LogEntry{Entry: e, Pos: p})
		r.bufBytes += len(e.Payload)
	}
	if p.Compare(r.reached) > 0 {
		r.reached = p
	}
}

// relation reads a Relation message: whether it is the outbox table, and
// where its columns are.
func (r *logReader) relation(m *pglogrepl.RelationMessage) *logRelation {
	rel := &logRelation{xid: -1, id: -1, lane: -1, payload: -1, createdAt: -1, traceContext: -1}
	if m.RelationName != OutboxTable || (r.s.schema != "" && m.Namespace != r.s.schema) {
		return rel
	}
	rel.ours = true
	for i, c := range m.Columns {
		rel.oids = append(rel.oids, c.DataType)
		switch c.Name {
		case "xid":
			rel.xid = i
		case "id":
			rel.id = i
		case "lane":
			rel.lane = i
		case "payload":
			rel.payload = i
		case "created_at":
			rel.createdAt = i
		case "trace_context":
			rel.traceContext = i
		}
	}
	return rel
}

// decode turns an inserted row into an entry. The stream is asked for
// binary values (pgoutput's binary option), which spares the server the
// text output functions of every column; text is read too.
func (r *logReader) decode(rel *logRelation, cols []logColumn) (outbox.Entry, error) {
	var e outbox.Entry
	if rel.xid < 0 || rel.id < 0 || rel.lane < 0 || rel.payload < 0 || rel.createdAt < 0 {
		return e, fmt.Errorf("%w: the published outbox table lacks a column baton reads (xid, id, lane, payload, created_at)", ErrSchemaMismatch)
	}
	if err := r.decodeColumn(rel, cols, rel.xid, &e.XID); err != nil {
		return e, fmt.Errorf("the xid of an inserted outbox row: %w", err)
	}
	if err := r.decodeColumn(rel, cols, rel.id, &e.ID); err != nil {
		return e, fmt.Errorf("the id of an inserted outbox row: %w", err)
	}
	if r.sameLane(rel, cols) {
		e.Lane = r.lane // no new string for a lane that repeats
	} else if err := r.decodeColumn(rel, cols, rel.lane, &e.Lane); err != nil {
		return e, fmt.Errorf("the lane of an inserted outbox row: %w", err)
	} else {
		r.lane = e.Lane
	}
	var payload []byte
	if err := r.decodeColumn(rel, cols, rel.payload, &payload); err != nil {
		return e, fmt.Errorf("the payload of an inserted outbox row: %w", err)
	}
	e.Payload = payload
	if err := r.decodeColumn(rel, cols, rel.createdAt, &e.CreatedAt); err != nil {
		return e, fmt.Errorf("the created_at of an inserted outbox row: %w", err)
	}
	// NULL, the common case, arrives as a column without a value.
	if i := rel.traceContext; i >= 0 && i < len(cols) && cols[i].kind != pglogrepl.TupleDataTypeNull {
		var tc pgtype.Text
		if err := r.decodeColumn(rel, cols, i, &tc); err != nil {
			return e, fmt.Errorf("the trace_context of an inserted outbox row: %w", err)
		}
		e.TraceContext = decodeTraceContext(tc)
	}
	return e, nil
}

// sameLane reports whether the row's lane is, in binary, the lane of the
// entry decoded before.
func (r *logReader) sameLane(rel *logRelation, cols []logColumn) bool {
	if r.lane == "" || rel.lane >= len(cols) || rel.oids[rel.lane] != oidText {
		return false
	}
	c := cols[rel.lane]
	return c.kind == pglogrepl.TupleDataTypeBinary && string(c.data) == r.lane
}

// fail leaves the reader broken with err.
func (r *logReader) fail(err error) error {
	r.broken = r.s.a.errorf("outbox log: the replication stream: %w", err)
	return r.broken
}

// statusIfDue tells the server the confirmed position when it is due.
func (r *logReader) statusIfDue() error {
	if time.Now().Before(r.nextStatus) {
		return nil
	}
	return r.status()
}

func (r *logReader) status() error {
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), r.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(r.confirmed),
	})
	r.nextStatus = time.Now().Add(r.s.opts.StatusInterval)
	return err
}

// Confirm implements outbox.LogReader: the server may forget WAL behind
// p.LSN, and moves the slot's confirmed_flush_lsn there.
func (r *logReader) Confirm(ctx context.Context, p outbox.LogPosition) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.broken != nil {
		return r.broken
	}
	if p.LSN <= r.confirmed {
		return nil
	}
	if !r.streaming {
		// Nothing read yet on this connection: the slot is told when the
		// stream starts (from the settled position).
		return nil
	}
	r.confirmed = p.LSN
	if err := r.status(); err != nil {
		return r.streamError(ctx, err)
	}
	return nil
}

// Close implements outbox.LogReader: the connection goes, and the slot is
// free for the next reader. A stream still healthy is ended properly, so
// that the server has taken the last confirmed position before the next
// reader opens.
func (r *logReader) Close(ctx context.Context) error {
	if r.broken == nil && r.streaming {
		if err := r.status(); err == nil {
			deadline := time.Now().Add(5 * time.Second)
			if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
				deadline = d
			}
			_ = r.conn.Conn().SetDeadline(deadline)
			_, _ = pglogrepl.SendStandbyCopyDone(ctx, r.conn)
		}
	}
	if r.broken == nil {
		r.broken = r.s.a.errorf("outbox log: the reader is closed")
	}
	return r.conn.Close(ctx)
}
