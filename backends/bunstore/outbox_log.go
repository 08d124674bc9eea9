package bunstore

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
)

// OutboxLogOptions configure an OutboxLogStore, as for the pgx adapter;
// ConnString is required here (bun's handle does not say how it
// connected): a direct connection to the same database, on which the
// store opens its replication connection.
type OutboxLogOptions = pgsql.OutboxLogOptions

// OutboxLogStore is the outbox's logical source (outbox.LogStore) and its
// table store (outbox.Store) in one, on a bun.IDB: give it to outbox.Config
// as both Store and Log. Its statements are the pgx adapter's, and its
// replication connection is pgx's, as bun's pgx driver is; nodes of either
// adapter may lead in turn. Producers keep calling Enqueue on their bun
// transactions: nothing changes for them. See docs/bun.md.
type OutboxLogStore struct {
	*pgsql.OutboxLogStore
}

var (
	_ outbox.Store    = (*OutboxLogStore)(nil)
	_ outbox.LogStore = (*OutboxLogStore)(nil)
)

// NewOutboxLogStore returns an OutboxLogStore over db (normally the
// *bun.DB), or an error naming the first invalid option. db must run on
// pgx's database/sql driver, as for NewOutboxStore.
func NewOutboxLogStore(ctx context.Context, db bun.IDB, opts OutboxLogOptions) (*OutboxLogStore, error) {
	h, err := open(db, "NewOutboxLogStore")
	if err != nil {
		return nil, err
	}
	st, err := pgsql.NewOutboxLogStore(h.outboxDB(), adapter, opts)
	if err != nil {
		return nil, err
	}
	// The session checks of the table store (standard_conforming_strings).
	if _, err := NewOutboxStore(ctx, db, OutboxStoreOptions{Schema: opts.Schema, Logger: opts.Logger}); err != nil {
		return nil, err
	}
	return &OutboxLogStore{st}, nil
}
