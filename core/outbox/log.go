package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The logical source: the same outbox table, read from the database's
// write-ahead log (PostgreSQL logical decoding) instead of walked in
// (xid, id) order. It delivers in commit order and is not held back by a
// transaction left open elsewhere in the cluster. Config.Log turns it on;
// docs/outbox.md ("Choosing a source") compares the two.
//
// The walk's position, Cursor{XID, ID}, is a property of a row, which the
// table can compare and index. A log position is a property of the log: a
// row does not carry the LSN of its commit. So the logical source has an
// interface of its own, LogStore, beside Store, rather than a Cursor that
// means one thing for one source and another for the other: every Store
// method taking a cursor would have half its inputs meaningless in each
// mode. Store stays what it is (its dead letters, state, admin API and
// retention statement serve both sources); LogStore adds reading the log,
// settling a log position and the marks retention needs.

var (
	// ErrLogLost is returned (wrapped, with the reason) by LogStore.Open
	// and LogReader.Read when the log can no longer be read from the
	// settled position: on PostgreSQL, the replication slot was
	// invalidated (max_slot_wal_keep_size) and the WAL it needed is gone.
	// Waiting cannot mend it: the driver stops reading, raises the stuck
	// notice at once, and an operator chooses between dropping the slot
	// (the driver then creates it again and re-synchronises through the
	// walk) and running the walk.
	ErrLogLost = errors.New("baton/outbox: the log can no longer be read from the settled position")

	// ErrReaderFenced is returned (wrapped) by a LogReader's Read and
	// Confirm once a reader of a later leadership term has opened the log:
	// a log has one reader at a time, and a deposed leader's reader can
	// neither read nor confirm any more. It is also LogStore.Open's answer
	// to a term whose fencing token is below that of the reader it would
	// have to end.
	ErrReaderFenced = errors.New("baton/outbox: a reader of a later leadership term has the log")

	// ErrLogMisconfigured is returned (wrapped, saying what to change) by
	// LogStore.Open when the database cannot serve the log as configured:
	// a server setting, a missing privilege, a pooler in between, no free
	// slot, a publication that was dropped. The driver records it as a
	// failing pass and tries again after ErrorDelay.
	ErrLogMisconfigured = errors.New("baton/outbox: the database cannot serve the log as configured")
)

// LogPosition is a place in the log's commit order. Entries of the
// transaction whose commit record starts at LSN c, written n of them,
// are at (c, 1) … (c, n-1), and its last one at (e, 0), where e is the
// end of that commit record: so a position (e, 0) means "that whole
// transaction and everything committed before it", and (c, k) "the first
// k entries of the transaction committing at c". The zero position is
// before everything. Positions compare by LSN, then Seq.
//
// Whatever a position's form, LSN is what the log may be told it may
// forget (LogReader.Confirm): a log resumed from LSN c replays the
// transaction committing at c, one resumed from e does not.
type LogPosition struct {
	LSN uint64
	Seq uint32
}

// Compare orders positions by LSN, then Seq: -1, 0 or +1.
func (p LogPosition) Compare(o LogPosition) int {
	switch {
	case p.LSN < o.LSN:
		return -1
	case p.LSN > o.LSN:
		return 1
	case p.Seq < o.Seq:
		return -1
	case p.Seq > o.Seq:
		return 1
	}
	return 0
}

// IsZero reports whether p is before everything.
func (p LogPosition) IsZero() bool { return p == LogPosition{} }

// String prints the LSN as PostgreSQL does (high/low hex), then the Seq.
func (p LogPosition) String() string {
	return fmt.Sprintf("%X/%X#%d", p.LSN>>32, uint32(p.LSN), p.Seq)
}

// LogEntry is an entry as the log delivers it: the row, and where it lies
// in the log.
type LogEntry struct {
	Entry
	Pos LogPosition
}

// LogBatch is one LogReader.Read.
type LogBatch struct {
	// Entries are in commit order, then in the order each transaction
	// wrote them, at strictly increasing positions.
	Entries []LogEntry
	// Reached is how far the read got: at least the last entry's
	// position, and further when the log showed it nothing more up to
	// there (transactions without entries, an idle database). No entry
	// the log will ever deliver lies at or below Reached, other than
	// those in Entries; so a pass that settles all of Entries settles at
	// Reached, and the log may forget what lies behind it.
	Reached LogPosition
}

// LogMark is a point in the log and the transaction counter read at one
// instant: every transaction whose xid is below XID had ended then, and
// every entry committed before then lies at or below
// LogPosition{LSN: LSN}.
// Retention uses it to know which rows are settled, since a row carries
// no log position: once the settled position has reached LSN, every row
// whose xid is below XID is settled (see LogStore.Mark).
type LogMark struct {
	LSN uint64
	XID uint64
}

// LogSettlement is everything one logical pass writes, in one
// transaction: LogStore.SettleLog. It is Settlement with log positions.
type LogSettlement struct {
	// From is the log position the pass started from; the settlement
	// applies only if the stored one still equals it (compare-and-set).
	From LogPosition
	// To is the new position: past every delivered and parked entry up to
	// the first retry, or the batch's Reached when all of it settled.
	To LogPosition
	// Park lists the entries to copy to the dead letters, as for the walk.
	Park []Parked
	// State holds state keys to upsert; a nil value removes the key. The
	// log position keys are written from To.
	State map[string]*string
}

// LogStore is the adapter side of the logical source: the log of the
// outbox table's inserts, read by one reader at a time, and the
// statements that settle a log position. The same tables serve it as
// Store (whose dead letters, state and admin API it shares).
//
// The rules a log store keeps are numbered R1 to R20 on the methods below
// and on LogReader; conformance.RunOutboxLog checks each one with a
// subtest of its own (docs/adapters.md lists which).
//
//   - R16 arguments: a Read limit below 1 or a negative wait is an error.
//   - R17 context: every method called with an ended context fails with
//     an error that wraps ctx.Err(), and writes nothing.
type LogStore interface {
	// Open starts this leadership term's reader, fencing the reader of
	// any earlier term (a paused, deposed leader may still be attached to
	// the log). token is the term's fencing token (lock.Lock.Token).
	//
	//   - R8 resume: a reader's Start is at the LSN last confirmed to the
	//     log (Seq 0; zero for a log never confirmed), and reading from it
	//     returns every entry committed after it.
	//   - R9 one reader: Open with a token at least that of the current
	//     reader ends that reader: its Read fails with ErrReaderFenced from
	//     then on, and its Confirm changes nothing. Open with a lower token
	//     fails with ErrReaderFenced and leaves the current reader working.
	//     A token of 0 (a lock that cannot fence) never ends another
	//     reader.
	//   - R15 lost: a log that can no longer be read fails Open, and the
	//     Read of a reader opened before, with an error wrapping
	//     ErrLogLost.
	Open(ctx context.Context, token uint64) (LogReader, error)

	// SettleLog applies a logical pass's outcome in one transaction: the
	// compare-and-set of the stored log position from s.From to s.To,
	// copying s.Park to the dead letters, and upserting s.State. It does
	// not tell the log: the driver confirms s.To to its reader after
	// SettleLog returned, so the log never forgets what is not settled.
	//
	//   - R10 compare-and-set: it applies only if the stored log position
	//     equals s.From, LSN and Seq; otherwise it returns ErrCursorMoved
	//     and writes nothing. Of concurrent settlements from one position,
	//     exactly one wins.
	//   - R11 forward: s.To before s.From is an error (ValidateLogSettlement)
	//     and writes nothing.
	//   - R12 park: each parked entry is copied to the dead letters with its
	//     xid, lane and payload and the reason, and stays in the outbox
	//     until retention; parking an entry the outbox does not hold is an
	//     error other than ErrCursorMoved, and writes nothing.
	//   - R13 state: s.State's values are upserted and a nil removes its
	//     key; the log position keys are written from s.To, and State
	//     reads them back (LogPositionFromState).
	//   - R20 id in use: parking an entry whose id already has a dead
	//     letter, by SettleLog or by Store.Settle, replaces that dead letter
	//     with the entry's xid, lane, payload and trace context, a reason
	//     that begins with the new one, a new ParkedAt and no RequeuedAs,
	//     and the settlement applies. Rows carry no log position, so the log
	//     cannot refuse a repeated park by its range as the walk does; and a
	//     driver taking the outbox back from the log walks again, and parks
	//     again, what the log parked after its last mark. Like every
	//     settlement, it never fails on a conflict it can foresee.
	SettleLog(ctx context.Context, s LogSettlement) error

	// Mark reads a LogMark: the log's current end and the oldest xid
	// still running, at one instant (PostgreSQL: pg_current_wal_insert_lsn()
	// and pg_snapshot_xmin(pg_current_snapshot()) in one statement).
	//
	//   - R14 mark: every transaction whose xid is below XID had ended when
	//     Mark returned (one still open has an xid at or above it), and
	//     every entry committed before Mark was called lies at or below
	//     LogPosition{LSN: LSN}.
	Mark(ctx context.Context) (LogMark, error)
}

// LogReader is one leadership term's reader of the log. It is used by one
// goroutine at a time.
type LogReader interface {
	// Start is the position the log resumed from when the reader opened:
	// the last confirmed one (R8).
	Start() LogPosition

	// Read returns up to limit entries after the position after, in commit
	// order, within the byte budget the walk's Scan keeps (MaxScanBytes),
	// and how far it got (LogBatch.Reached). It returns as soon as
	// it has entries and the log has nothing more ready at once; with
	// nothing to return it waits for entries up to wait, then returns an
	// empty batch. after never goes back between two Reads of one reader,
	// but may repeat: a pass that settled only part of a batch reads the
	// rest again.
	//
	//   - R1 commit order: transactions come in the order they committed,
	//     whatever order their xids were taken in.
	//   - R2 one transaction: the entries of one transaction come together,
	//     in the order they were written, at strictly increasing positions.
	//   - R3 rollback: the entries of a rolled-back transaction never
	//     appear.
	//   - R4 no pinning: a transaction that has written and is still open
	//     holds back nothing committed after it.
	//   - R5 after and limit: at most limit entries, each strictly after
	//     after; Reached is at least the last one's position and never
	//     before after.
	//   - R6 inside a transaction: reading after the position of one of a
	//     transaction's entries, even from a reader opened later, goes on
	//     with that transaction's next entry.
	//   - R7 reached: no entry committed later, nor any not returned, lies
	//     at or below a Reached the reader returned.
	//   - R18 trace context: an entry comes with the trace context it was
	//     enqueued with (WithTraceContext), exactly, or with none, and
	//     SettleLog's dead letter of it keeps it.
	//   - R19 byte budget: it stops after the entry that brings the
	//     payloads to MaxScanBytes or more (ScanHasRoom), whatever limit
	//     says, and returns at least one entry when one is ready. A Read so
	//     cut reaches no further than R7 lets it: the next Read after its
	//     Reached goes on with the first entry it did not return.
	Read(ctx context.Context, after LogPosition, limit int, wait time.Duration) (LogBatch, error)

	// Confirm tells the log that everything up to p is settled: it may
	// forget what lies behind p.LSN. The driver calls it only with a
	// position SettleLog has stored.
	Confirm(ctx context.Context, p LogPosition) error

	// Close detaches the reader from the log. It does not confirm
	// anything.
	Close(ctx context.Context) error
}

// The log source's state keys, beside the walk's (StateKeys).
const (
	// KeySource says which source the stored positions are the truth of:
	// SourceLogical once a logical driver has switched; absent or
	// SourceWalk for the walk.
	KeySource = "source"
	// KeyLogLSN and KeyLogSeq are the settled log position, decimal.
	KeyLogLSN = "log_lsn"
	KeyLogSeq = "log_seq"
	// KeyLogWalkedXID and KeyLogWalkedID are the walk's cursor when the
	// logical source took over: every entry at or below it was walked, so
	// the log skips those it meets again.
	KeyLogWalkedXID = "log_walked_xid"
	KeyLogWalkedID  = "log_walked_id"
	// KeyLogMarkLSN and KeyLogMarkXID are the last LogMark taken, not yet
	// passed by the settled position.
	KeyLogMarkLSN = "log_mark_lsn"
	KeyLogMarkXID = "log_mark_xid"
	// KeyLogSettledXID is the xid of the last mark the settled position
	// passed: every row whose xid is below it is settled.
	KeyLogSettledXID = "log_settled_xid"
	// KeyLogReaderToken is the fencing token of the term whose reader has
	// the log, which LogStore.Open compares before ending another reader.
	KeyLogReaderToken = "log_reader_token"
)

// The values of KeySource.
const (
	SourceWalk    = "walk"
	SourceLogical = "logical"
)

// LogStateKeys lists the log source's state keys, in display order.
var LogStateKeys = []string{
	KeySource, KeyLogLSN, KeyLogSeq, KeyLogWalkedXID, KeyLogWalkedID,
	KeyLogMarkLSN, KeyLogMarkXID, KeyLogSettledXID, KeyLogReaderToken,
}

// ValidateLogSettlement is the rule every LogStore's SettleLog applies
// before writing anything: the position never goes backwards, and every
// text is storable (ValidateSettlement's rule for reasons and state).
func ValidateLogSettlement(s LogSettlement) error {
	if s.To.Compare(s.From) < 0 {
		return fmt.Errorf("%w: the new log position %s is before the one the pass started from, %s; the position never goes backwards",
			ErrInvalidSettlement, s.To, s.From)
	}
	return ValidateSettlement(Settlement{Park: s.Park, State: s.State})
}

// LogPositionFromState reads the settled log position from state values;
// absent keys mean the zero position.
func LogPositionFromState(state map[string]string) (LogPosition, error) {
	var p LogPosition
	if v, ok := state[KeyLogLSN]; ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return LogPosition{}, fmt.Errorf("baton/outbox: state %s = %q is not an LSN: %w", KeyLogLSN, v, err)
		}
		p.LSN = n
	}
	if v, ok := state[KeyLogSeq]; ok {
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return LogPosition{}, fmt.Errorf("baton/outbox: state %s = %q is not a sequence number: %w", KeyLogSeq, v, err)
		}
		p.Seq = uint32(n)
	}
	return p, nil
}

// LogPositionState is the state values that encode p, so every adapter
// writes both keys the same way.
func LogPositionState(p LogPosition) (lsn, seq string) {
	return strconv.FormatUint(p.LSN, 10), strconv.FormatUint(uint64(p.Seq), 10)
}

// MaxID is the largest ID: Cursor{XID: x, ID: MaxID} is at or after every
// entry of transaction x.
var MaxID = ID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// SettledCursor is the walk position at or below which every entry is
// settled, whichever source settled it: the walk's cursor, or, once the
// logical source has passed a mark, every entry of a transaction whose xid
// is below that mark's. Retention deletes only at or below it, and a
// driver going back from the log to the walk resumes the walk from it.
func SettledCursor(state map[string]string) (Cursor, error) {
	cur, err := CursorFromState(state)
	if err != nil {
		return Cursor{}, err
	}
	v, ok := state[KeyLogSettledXID]
	if !ok {
		return cur, nil
	}
	x, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return Cursor{}, fmt.Errorf("baton/outbox: state %s = %q is not an xid: %w", KeyLogSettledXID, v, err)
	}
	if x == 0 {
		return cur, nil
	}
	if below := (Cursor{XID: x - 1, ID: MaxID}); below.Compare(cur) > 0 {
		return below, nil
	}
	return cur, nil
}

// ReadLogReaderToken reads KeyLogReaderToken; absent is 0.
func ReadLogReaderToken(state map[string]string) uint64 {
	n, _ := strconv.ParseUint(state[KeyLogReaderToken], 10, 64)
	return n
}
