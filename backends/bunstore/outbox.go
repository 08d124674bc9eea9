package bunstore

import (
	"context"

	"github.com/uptrace/bun"

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
// one wrapping outbox.ErrIDInUse. Any other failure is an error of a
// statement inside the transaction, which PostgreSQL then refuses to
// continue: roll it back. The values travel as parameters. The trace
// context ctx carries (outbox.WithTraceContext) is stored with the entry,
// NULL without one, and validated like the rest.
//
// The walk delivers entries in (xid, id) order: the order in which the
// producing transactions made their first write, not commit order. Make
// the entity's row write the transaction's first write and enqueue after
// it; the pgx adapter's Enqueue documents the order in full, and it holds
// here unchanged (the statement is the same).
func Enqueue(ctx context.Context, db bun.IDB, id outbox.ID, lane string, payload []byte) error {
	return enqueue(ctx, db, pgsql.EnqueueSQL, id, lane, payload)
}

func enqueue(ctx context.Context, db bun.IDB, query string, id outbox.ID, lane string, payload []byte) error {
	var q pgsql.Querier
	if db != nil {
		h, err := open(db, "Enqueue")
		if err != nil {
			return err
		}
		q = h
	}
	return adapter.Enqueue(ctx, q, query, id, lane, payload)
}

// OutboxStoreOptions configure an OutboxStore: Schema (the schema of the
// outbox tables, "" for the search_path) and Logger (nil discards). The
// pgx adapter takes the same type.
type OutboxStoreOptions = pgsql.OutboxStoreOptions

// OutboxStore is the outbox.Store over baton_outbox, baton_outbox_state and
// baton_outbox_dead, on a bun.IDB, and their Rebase. Create it with
// NewOutboxStore.
//
// Every method is one statement, or one short READ COMMITTED transaction (a
// savepoint on a bun.Tx), with the pgx adapter's statements: bun and pgx
// drivers can settle the same cursor, and one of each may hold the leader
// lock in turn. Scan reads only below the horizon, so a long transaction
// anywhere in the database pins the walk.
type OutboxStore struct {
	*pgsql.OutboxStore
	db bun.IDB // Listen's connections come from it
}

var (
	_ outbox.Store = (*OutboxStore)(nil)
	_ outbox.Waker = (*OutboxStore)(nil)
)

// NewOutboxStore returns an OutboxStore over db (normally the *bun.DB), or
// an error naming the first invalid option. db must run on pgx's
// database/sql driver (ErrUnsupportedDriver). It asks the database one
// thing, standard_conforming_strings, and refuses a session without it
// (ErrNonStandardStrings); run Migrate first.
func NewOutboxStore(ctx context.Context, db bun.IDB, opts OutboxStoreOptions) (*OutboxStore, error) {
	h, err := open(db, "NewOutboxStore")
	if err != nil {
		return nil, err
	}
	st, err := pgsql.NewOutboxStore(h.outboxDB(), adapter, opts)
	if err != nil {
		return nil, err
	}
	if err := checkSession(ctx, h, "NewOutboxStore"); err != nil {
		return nil, err
	}
	return &OutboxStore{st, db}, nil
}

// Enqueue is the package-level Enqueue for this store's tables: it writes
// into baton_outbox of OutboxStoreOptions.Schema with db, the caller's
// transaction (the store's own handle is not used).
func (s *OutboxStore) Enqueue(ctx context.Context, db bun.IDB, id outbox.ID, lane string, payload []byte) error {
	return enqueue(ctx, db, s.EnqueueSQL(), id, lane, payload)
}
