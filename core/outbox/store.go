package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	// ErrCursorMoved is returned by Store.Settle when the stored cursor is
	// no longer the one the pass started from: another leader settled in
	// between. The pass is discarded; the cursor never goes backwards.
	ErrCursorMoved = errors.New("baton/outbox: the cursor moved since the pass began")

	// ErrNotFound is returned for a dead letter id that does not exist.
	ErrNotFound = errors.New("baton/outbox: no such dead letter")

	// ErrAlreadyRequeued is returned by Requeue for a dead letter that was
	// requeued before; its RequeuedAs names the entry it became.
	ErrAlreadyRequeued = errors.New("baton/outbox: dead letter already requeued")

	// ErrCursorAhead is why the driver refuses to walk when the stored
	// cursor is at or above the database's transaction counter
	// (Store.NextXID): impossible in a healthy database, it is what a
	// logical restore (pg_dump/pg_restore) into another cluster leaves
	// behind. Entries written since sort below the cursor and would never
	// be delivered. The driver records it as a failing pass and raises the
	// stuck notice at once; `baton outbox rebase` repairs it.
	ErrCursorAhead = errors.New("baton/outbox: the stored cursor is ahead of the database's transaction counter")

	// ErrInvalidSettlement is returned (wrapped, with the reason) by
	// ValidateSettlement and every adapter's Settle for a settlement that
	// must not be written; nothing is written. The driver never builds one:
	// it makes every reason storable first (StorableReason).
	ErrInvalidSettlement = errors.New("baton/outbox: invalid settlement")
)

// The state keys. Every fact the outbox keeps about itself is one row of
// baton_outbox_state (key, value); an absent key reads as its default, and
// every write is an upsert, so a new fact never needs a migration.
const (
	KeyLastScannedXID               = "last_scanned_xid" // the cursor's xid, decimal
	KeyLastScannedID                = "last_scanned_id"  // the cursor's id, canonical UUID
	KeyLastScanAt                   = "last_scan_at"
	KeyFailedAttempts               = "failed_attempts" // decimal, passes in the current failing streak
	KeyLastError                    = "last_error"
	KeyLastErrorAt                  = "last_error_at" // when the failing pass that wrote last_error settled
	KeyLastDeadLetterAt             = "last_dead_letter_at"
	KeyLastDeadLetterNotificationAt = "last_dead_letter_notification_at"
	KeyFirstStuckAt                 = "first_stuck_at"
	KeyLastStuckNotificationAt      = "last_stuck_notification_at"
)

// StateKeys lists every state key, in display order.
var StateKeys = []string{
	KeyLastScannedXID, KeyLastScannedID, KeyLastScanAt, KeyFailedAttempts, KeyLastError, KeyLastErrorAt,
	KeyLastDeadLetterAt, KeyLastDeadLetterNotificationAt, KeyFirstStuckAt, KeyLastStuckNotificationAt,
}

// Parked is an entry the pass parks in the dead letters, with its reason.
type Parked struct {
	Entry  Entry
	Reason string
}

// Settlement is everything one pass writes, in one transaction.
type Settlement struct {
	// From is the cursor the pass started from; the settlement applies
	// only if the stored cursor still equals it (compare-and-set).
	From Cursor
	// To is the new cursor: past every delivered and parked entry up to
	// the first retry. It may equal From.
	To Cursor
	// Park lists the entries to copy to the dead letters. Each stays in the
	// outbox below the cursor, like a delivered entry, until retention.
	Park []Parked
	// State holds state keys to upsert; a nil value removes the key (it
	// reads as its default again). The cursor keys are written from To.
	State map[string]*string
}

// DeadLetter is a parked entry.
type DeadLetter struct {
	ID      ID
	XID     uint64
	Lane    string
	Payload []byte // nil in listings
	Error   string
	// ParkedAt is the store's clock.
	ParkedAt time.Time
	// RequeuedAs is the id of the entry it was requeued as, or NilID.
	RequeuedAs ID
	// RequeuedAt is when it was requeued (store's clock), or zero.
	RequeuedAt time.Time
	// TraceContext is the parked entry's, which a requeue passes on to the
	// new entry.
	TraceContext TraceContext
}

// ListOptions page through dead letters, newest parked first.
type ListOptions struct {
	// Limit bounds the page; 0 means DefaultListLimit.
	Limit int
	// Before continues a listing: only dead letters parked before this
	// one (exclusive), as returned last on the previous page.
	Before ID
}

// DefaultListLimit and MaxListLimit bound ListOptions.Limit.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// PageLimit is the page size o asks for: Limit, or DefaultListLimit for 0.
// A Limit below 0 or above MaxListLimit is an error (rule O34), which
// ListDead and ListDeadMatching return as they are.
func (o ListOptions) PageLimit() (int, error) {
	switch {
	case o.Limit == 0:
		return DefaultListLimit, nil
	case o.Limit < 0 || o.Limit > MaxListLimit:
		return 0, fmt.Errorf("ListOptions.Limit is %d; it must be 0 (the default, %d) to %d", o.Limit, DefaultListLimit, MaxListLimit)
	}
	return o.Limit, nil
}

// MaxScanBytes bounds the payloads one Scan or one LogReader.Read returns,
// 8 MiB: a store stops adding entries once those it has taken total
// MaxScanBytes or more, counted as the payloads it returns (ScanHasRoom).
// A pass therefore holds less than MaxScanBytes plus one payload, however
// large BatchSize is and whichever source it reads, and always at least one
// entry when one is visible.
const MaxScanBytes = 8 << 20

// ScanHasRoom reports whether a scan whose entries so far hold taken
// payload bytes may take one more: the rule every adapter's Scan (O8) and
// LogReader.Read (R19) apply, entry by entry, as they read.
func ScanHasRoom(taken int) bool { return taken < MaxScanBytes }

// ScanBytes is the total size of the entries' payloads, as MaxScanBytes
// counts it.
func ScanBytes(entries []Entry) int {
	n := 0
	for _, e := range entries {
		n += len(e.Payload)
	}
	return n
}

// ConcurrentScanner is a Store that can run a Scan while a Settle runs,
// from another goroutine: one over a pool of connections, not over one
// connection or a caller's transaction. The driver reads ahead only from
// a store whose ScansConcurrently reports true.
type ConcurrentScanner interface {
	ScansConcurrently() bool
}

// Store is the adapter side of the outbox: the three tables and their
// statements. Each method is one short statement or transaction; none is
// held open across delivery. A store that can run a Scan while a Settle
// runs, from another goroutine, says so (ConcurrentScanner), and the
// driver then reads its next batch ahead (see "The walk, one pass" in
// the package doc).
//
// The rules a store keeps are numbered O1 to O36, O43 and O44, on the methods
// below and here; conformance.RunOutboxStore checks each one with a subtest of its
// own (docs/adapters.md lists which).
//
// The adapter's Enqueue, which writes an entry in the caller's own
// transaction (no method here: its transaction type is the adapter's), is
// part of the contract:
//
//   - O9 invalid entry: an entry failing ValidateEntry, or enqueued with a
//     context whose trace context ValidateTraceContext refuses
//     (TraceContextFrom), is an error wrapping ErrInvalidEntry; it writes
//     nothing and the transaction stays usable.
//   - O10 size: a payload of MaxPayloadBytes is written; one byte more is
//     refused the same way.
//   - O11 duplicate: the id of an entry in the outbox, or of one already
//     enqueued in the same transaction, is refused with ErrIDInUse.
//   - O12 open transactions: the id another open transaction has enqueued
//     is refused with ErrIDInUse, at once or once that transaction commits;
//     the two are never both written.
//   - O13 dead letter: the id of a dead letter is refused with ErrIDInUse,
//     and the transaction can still commit its other entries.
//   - O14 being parked: the id of an entry whose park is not yet committed
//     is refused with ErrIDInUse, whether the Enqueue runs before the
//     park's commit, waits for it, or runs after it.
//   - O15 done: after Commit or Rollback, Enqueue and Commit fail.
//   - O44 trace context: an entry enqueued with a context carrying a trace
//     context (WithTraceContext) scans with it, exactly, and one enqueued
//     without it with none; its dead letter keeps it (GetDead and ListDead),
//     and Requeue and RequeueBatch pass it on to the new entry.
//
// And every method:
//
//   - O34 arguments: a Scan or delete limit below 1, a negative retention
//     window, and a ListDead limit below 0 or above MaxListLimit, and a RequeueBatch
//     limit outside 1 to MaxRequeueBatch are errors.
//   - O35 context: every method called with an ended context fails with an
//     error that wraps ctx.Err(), and writes nothing.
//   - O36 schema: a store over a database without its tables fails every
//     call that uses them, Enqueue included (all but NextXID, which reads
//     only the transaction counter), with the adapter's schema-mismatch
//     error.
type Store interface {
	// Scan returns up to limit entries after the cursor, ordered by
	// (xid, id), only from transactions below the horizon: older than the
	// oldest transaction still in progress. An entry's xid is its
	// transaction's, taken at its first write.
	//
	//   - O1 horizon: while a transaction that has written is open, nothing
	//     a transaction that wrote after it committed appears; once it
	//     ends, both appear, its own entries first.
	//   - O2 one transaction: the entries of one transaction share its xid
	//     and walk in id order, whatever order they were written in.
	//   - O3 xid order: transactions walk in the order of their first
	//     writes, not of their commits.
	//   - O4 no write, no xid: a transaction that has begun and not written
	//     holds nothing back, and its first write places it after whatever
	//     committed meanwhile.
	//   - O5 rollback: the entries of a rolled-back transaction never
	//     appear.
	//   - O6 no gaps: with several transactions open at once, committing
	//     and rolling back concurrently, a walk that moves its cursor to the
	//     last entry of each scan meets every committed entry exactly once.
	//   - O7 cursor and limit: at most limit entries, each strictly after
	//     the cursor, the cursor compared as an (xid, id) pair.
	//   - O8 byte budget: it stops after the entry that brings the payloads
	//     to MaxScanBytes or more (ScanHasRoom), whatever limit says.
	Scan(ctx context.Context, after Cursor, limit int) ([]Entry, error)

	// Settle applies a pass's outcome in one transaction: the cursor
	// compare-and-set from s.From to s.To, copying s.Park to the dead
	// letters, and upserting s.State.
	//
	//   - O16 compare-and-set: it applies only if the stored cursor equals
	//     s.From, compared whole, xid and id (two entries of one
	//     transaction share an xid); otherwise it returns ErrCursorMoved
	//     and writes nothing.
	//   - O17 stale: a settlement from any cursor but the stored one,
	//     behind it or ahead of it, loses with ErrCursorMoved.
	//   - O18 forward: s.To before s.From is an error (ValidateSettlement)
	//     and writes nothing; s.To equal to s.From is a pass that made no
	//     progress, and applies.
	//   - O19 one winner: of concurrent settlements from one cursor, the
	//     absent state included, exactly one wins: the compare and the
	//     write are one atomic step.
	//   - O20 park: each parked entry is copied to the dead letters, with
	//     its xid, lane and payload, the reason, ParkedAt and no
	//     RequeuedAs. It stays in the outbox below the cursor until
	//     retention deletes it with the delivered ones, so its id is never
	//     free between the entry and its dead letter (O14).
	//   - O21 unknown: parking an entry the outbox does not hold between
	//     s.From and s.To (never there, or parked before) is an error other
	//     than ErrCursorMoved, and writes nothing.
	//   - O22 state: s.State's values are upserted, a nil removes its key,
	//     an empty string is a value; the cursor keys are written from s.To.
	//   - O23 unstorable text: a reason, state key or state value that is
	//     not valid UTF-8 or holds a NUL byte is refused with
	//     ErrInvalidSettlement (ValidateSettlement) and nothing is written.
	//   - O24 exact text: every storable reason and state value, up to
	//     MaxReasonLength bytes, is kept byte for byte.
	//
	// A dead letter that already has the id of an entry being parked is
	// replaced by it: a settlement never fails on a conflict it can
	// foresee. Rows written around Enqueue can cause one, and so can a
	// driver taking the outbox back from the log, which walks again what
	// the log parked after its last mark; RunOutboxStore cannot make one,
	// RunOutboxLog does (LogStore's R20).
	Settle(ctx context.Context, s Settlement) error

	// State returns every state key that has a value, in a map of the
	// caller's own (O22).
	State(ctx context.Context) (map[string]string, error)

	// NextXID returns the transaction counter: the xid the next
	// transaction to write will get (PostgreSQL: pg_snapshot_xmax of the
	// current snapshot). A stored cursor at or above it cannot come from
	// this database: it was restored logically from another cluster, and
	// the driver refuses to walk (ErrCursorAhead).
	//
	//   - O25 counter: it is above the xid of every entry committed before
	//     it was read, and never goes back.
	NextXID(ctx context.Context) (uint64, error)

	// ListDead lists dead letters without payloads.
	//
	//   - O26 listing: newest parked first and, parked at the same time, by
	//     id ascending; at most Limit (DefaultListLimit for 0); Before
	//     continues after the dead letter it names; no payloads.
	ListDead(ctx context.Context, opts ListOptions) ([]DeadLetter, error)
	// GetDead returns one dead letter with its payload.
	//
	//   - O27 unknown: GetDead, and Requeue, of an id that is no dead
	//     letter (an entry still in the outbox included) return an error
	//     wrapping ErrNotFound.
	GetDead(ctx context.Context, id ID) (DeadLetter, error)
	// Requeue, in one transaction, inserts the dead letter's lane and
	// payload as a new entry with id newID and records the requeue on the
	// dead letter.
	//
	//   - O28 requeue: the new entry goes to the end of the order, after
	//     everything committed before; the dead letter gets RequeuedAs
	//     newID and RequeuedAt the requeue time.
	//   - O29 once: a second Requeue of the same dead letter returns
	//     ErrAlreadyRequeued and leaves the first's RequeuedAs.
	//   - O30 new id: a newID that is the nil id, or the id of an entry, of
	//     the dead letter itself or of another dead letter, is refused and
	//     uses nothing up (a requeued entry that reused a dead letter's id
	//     could never be parked again).
	Requeue(ctx context.Context, id, newID ID) error

	// RequeueBatch requeues, in one transaction, up to b.Limit dead letters
	// after b.After that b.Filter matches (RequeueFilter.Matches), taken
	// in (xid, id) order. RequeueDead calls it batch by batch.
	//
	//   - O43 bulk requeue: each dead letter taken that was not requeued
	//     before becomes a new entry with a fresh id and records it as
	//     RequeuedAs; the new entries walk after everything committed
	//     before, in the (xid, id) order of their dead letters. One
	//     requeued before is refused and counted in AlreadyRequeued, and
	//     the rest of the batch still applies. Last is the last one taken;
	//     a dry run takes the same and writes nothing. A limit outside 1
	//     to MaxRequeueBatch is an error (CheckRequeueBatch).
	RequeueBatch(ctx context.Context, b RequeueBatch) (RequeueBatchResult, error)

	// DeleteDelivered deletes at most limit entries at or below upTo that
	// were created more than window ago, returning how many it deleted. It
	// may delete fewer than limit even when more are eligible (an adapter
	// may look only at the oldest limit entries); the next sweep takes the
	// rest.
	//
	//   - O31 bounds: it never deletes more than limit, nor an entry above
	//     upTo, and leaves no trace of the deleted ones.
	//   - O32 window: it deletes only entries created more than window ago,
	//     by the store's clock.
	DeleteDelivered(ctx context.Context, upTo Cursor, window time.Duration, limit int) (int, error)
	// DeleteRequeued deletes at most limit dead letters, returning how
	// many.
	//
	//   - O33 replayed only: it deletes only dead letters requeued more than
	//     window ago, by their requeue time (the record of a replay stays
	//     for the whole window); a dead letter never requeued is kept until
	//     an operator acts, and the entries requeued ones became are
	//     untouched.
	DeleteRequeued(ctx context.Context, window time.Duration, limit int) (int, error)
}

// ValidateSettlement is the rule every adapter's Settle applies before
// writing anything: the cursor never goes backwards (To before From), and
// every park reason and every state key and value is text that every store
// can keep, which is valid UTF-8 without a NUL byte (PostgreSQL's text
// cannot hold either). A refused settlement is an error wrapping
// ErrInvalidSettlement that names the offending part.
func ValidateSettlement(s Settlement) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSettlement, fmt.Sprintf(format, args...))
	}
	if s.To.Compare(s.From) < 0 {
		return bad("the new cursor (%d, %s) is before the one the pass started from (%d, %s); the cursor never goes backwards",
			s.To.XID, s.To.ID, s.From.XID, s.From.ID)
	}
	for _, p := range s.Park {
		if prob := textProblem(p.Reason); prob != "" {
			return bad("the reason parking entry %s %s", p.Entry.ID, prob)
		}
	}
	for k, v := range s.State {
		if prob := textProblem(k); prob != "" {
			return bad("a state key %s", prob)
		}
		if v != nil {
			if prob := textProblem(*v); prob != "" {
				return bad("the value of state key %q %s", k, prob)
			}
		}
	}
	return nil
}

// textProblem says why s cannot be stored as text, or returns "".
func textProblem(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains a NUL byte"
	}
	return ""
}

// CursorFromState reads the cursor from state values; absent keys mean the
// start of the walk.
func CursorFromState(state map[string]string) (Cursor, error) {
	var c Cursor
	if v, ok := state[KeyLastScannedXID]; ok {
		x, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return Cursor{}, fmt.Errorf("baton/outbox: state %s = %q is not an xid: %w", KeyLastScannedXID, v, err)
		}
		c.XID = x
	}
	if v, ok := state[KeyLastScannedID]; ok {
		id, err := ParseID(v)
		if err != nil {
			return Cursor{}, fmt.Errorf("baton/outbox: state %s: %w", KeyLastScannedID, err)
		}
		c.ID = id
	}
	return c, nil
}

// CursorState is the state values that encode c. Adapters use it so both
// cursor keys are always written the same way.
func CursorState(c Cursor) (xid, id string) {
	return strconv.FormatUint(c.XID, 10), c.ID.String()
}

// CheckRetention is the argument rule of DeleteDelivered and
// DeleteRequeued, which every adapter applies before touching anything: a
// window that is not negative and a limit of at least 1.
func CheckRetention(window time.Duration, limit int) error {
	switch {
	case window < 0:
		return fmt.Errorf("the window is %v; it must not be negative", window)
	case limit < 1:
		return fmt.Errorf("the limit is %d; it must be at least 1", limit)
	}
	return nil
}
