package pgxstore

import (
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
)

// Defaults of OutboxLogOptions.
const (
	DefaultSlot              = pgsql.DefaultSlot
	DefaultPublication       = pgsql.DefaultPublication
	DefaultSlotCreateTimeout = pgsql.DefaultSlotCreateTimeout
	DefaultStatusInterval    = pgsql.DefaultStatusInterval
)

// OutboxLogOptions configure an OutboxLogStore: Schema and Logger as for
// OutboxStoreOptions; ConnString for the replication connection (the
// pool's own when empty: it must reach the server directly, not through a
// transaction pooler); Slot and Publication (DefaultSlot and
// DefaultPublication); SlotCreateTimeout; StatusInterval. The bun adapter
// takes the same type.
type OutboxLogOptions = pgsql.OutboxLogOptions

// SlotStatus is the slot as OutboxLogStore.SlotStatus reads it.
type SlotStatus = pgsql.SlotStatus

// OutboxLogStore is the outbox's logical source (outbox.LogStore) and its
// table store (outbox.Store) in one: give it to outbox.Config as both Store
// and Log. It reads the outbox table's inserts from the write-ahead log
// through a publication (inserts only) and a pgoutput replication slot, in
// commit order, on a replication connection of the leader's own, and
// settles in the same tables as the walk. Create it with
// NewOutboxLogStore.
//
// The server needs wal_level = logical, a free replication slot and WAL
// sender, and the role the REPLICATION attribute; creating the
// publication needs the owner of the table (or create it as the owner:
// CREATE PUBLICATION baton_outbox FOR TABLE baton_outbox WITH (publish =
// 'insert')). Open checks each and says what to change. See
// docs/outbox.md, "Choosing a source".
type OutboxLogStore struct {
	*pgsql.OutboxLogStore
}

var (
	_ outbox.Store    = (*OutboxLogStore)(nil)
	_ outbox.LogStore = (*OutboxLogStore)(nil)
)

// NewOutboxLogStore returns an OutboxLogStore over pool, or an error naming
// the first invalid option. It sends nothing; the leader's first Open
// checks the server, creates the publication and the slot when missing.
func NewOutboxLogStore(pool *pgxpool.Pool, opts OutboxLogOptions) (*OutboxLogStore, error) {
	if pool == nil {
		return nil, errors.New("baton/pgxstore: NewOutboxLogStore: the pool is nil")
	}
	if opts.ConnString == "" {
		opts.ConnString = pool.Config().ConnString()
	}
	st, err := pgsql.NewOutboxLogStore(newPoolDB(pool), adapter, opts)
	if err != nil {
		return nil, err
	}
	return &OutboxLogStore{st}, nil
}
