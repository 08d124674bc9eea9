package pgxstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
)

// The outbox tables, created by the 0003_outbox migration.
const (
	// OutboxTable holds the entries not yet deleted by retention.
	OutboxTable = pgsql.OutboxTable
	// OutboxStateTable holds the outbox's state keys (outbox.StateKeys).
	OutboxStateTable = pgsql.OutboxStateTable
	// OutboxDeadTable holds the parked entries (dead letters).
	OutboxDeadTable = pgsql.OutboxDeadTable
)

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
// The trace context ctx carries (outbox.WithTraceContext, or
// otelbaton.Inject from the request's span) is stored with the entry, NULL
// without one; one outbox.ValidateTraceContext refuses is refused as an
// invalid entry, before anything is sent.
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
//	pgxstore.Enqueue(ctx, tx, outbox.NewID(), lane, payload)
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
	return enqueue(ctx, tx, pgsql.EnqueueSQL, id, lane, payload)
}

func enqueue(ctx context.Context, tx pgx.Tx, query string, id outbox.ID, lane string, payload []byte) error {
	var q pgsql.Querier
	if tx != nil {
		q = querier{tx}
	}
	return adapter.Enqueue(ctx, q, query, id, lane, payload)
}

// OutboxStoreOptions configure an OutboxStore: Schema (the schema of the
// outbox tables, "" for the search_path) and Logger (nil discards). The
// bun adapter takes the same type.
type OutboxStoreOptions = pgsql.OutboxStoreOptions

// OutboxStore is the outbox.Store over baton_outbox, baton_outbox_state and
// baton_outbox_dead, and their Rebase. Create it with NewOutboxStore.
//
// Every method is one statement, or one short READ COMMITTED transaction,
// on a connection of the pool; none holds a transaction across delivery.
// Scan reads only below the horizon (xids older than the oldest
// transaction still running anywhere in the database), so a long
// transaction pins the walk; see Enqueue for what the order means. A
// settlement without parked entries takes two round trips: BEGIN with the
// cursor lock in one pipeline, the state write with COMMIT in another.
type OutboxStore struct {
	*pgsql.OutboxStore
	pool *pgxpool.Pool // Listen's connections come from it
}

var (
	_ outbox.Store = (*OutboxStore)(nil)
	_ outbox.Waker = (*OutboxStore)(nil)
)

// RebaseResult is what Rebase found and did, or would do with dryRun.
type RebaseResult = pgsql.RebaseResult

// ErrRebaseNotNeeded is returned by OutboxStore.Rebase when the stored
// cursor is below the database's transaction counter: the outbox was not
// restored logically, and its xids are this database's own.
var ErrRebaseNotNeeded = pgsql.ErrRebaseNotNeeded

// ErrRebaseNoRoom is returned by OutboxStore.Rebase when the entries to
// renumber need more xid values than lie below the oldest running
// transaction.
var ErrRebaseNoRoom = pgsql.ErrRebaseNoRoom

// NewOutboxStore returns an OutboxStore over pool, or an error naming the
// first invalid option. It sends nothing to the database; run Migrate (or
// the migrations) first.
func NewOutboxStore(pool *pgxpool.Pool, opts OutboxStoreOptions) (*OutboxStore, error) {
	if pool == nil {
		return nil, errors.New("baton/pgxstore: NewOutboxStore: the pool is nil")
	}
	st, err := pgsql.NewOutboxStore(newPoolDB(pool), adapter, opts)
	if err != nil {
		return nil, err
	}
	return &OutboxStore{st, pool}, nil
}

// Enqueue is the package-level Enqueue for this store's tables: it writes
// into baton_outbox of OutboxStoreOptions.Schema (or of tx's search_path
// when that is empty). tx is the caller's transaction and may come from any
// pool or connection to the same database; the store's own pool is not used.
func (s *OutboxStore) Enqueue(ctx context.Context, tx pgx.Tx, id outbox.ID, lane string, payload []byte) error {
	return enqueue(ctx, tx, s.EnqueueSQL(), id, lane, payload)
}
