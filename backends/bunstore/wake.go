package bunstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
)

// ErrListenUnsupported is returned, wrapped, by Listen and
// LeaseStore.WatchReleases when the store's handle cannot LISTEN: it is not
// a *bun.DB, or its driver's connection is not pgx's. A driver or worker
// over such a store polls; a lease manager's takeovers wait for the next
// heartbeat.
var ErrListenUnsupported = pgsql.ErrListenUnsupported

// Listen implements outbox.Waker: the leading driver listens, for the
// signals of Enqueue, on one connection of the *bun.DB's pool, discarded
// rather than returned to the pool when the session ends. Behind
// PgBouncer in transaction pooling mode LISTEN does not work: set
// outbox.Config.PollOnly there.
func (s *OutboxStore) Listen(ctx context.Context) (outbox.Listener, error) {
	return s.ListenOutbox(ctx, session(s.db))
}

// Listen implements workrow.Waker: a Worker's Run listens on one
// connection of the *bun.DB's pool, discarded when the session ends, for
// the signals of Signal and SignalWorkRows on this table. Behind PgBouncer
// in transaction pooling mode, set workrow.Config.PollOnly.
func (s *WorkRows[K, R]) Listen(ctx context.Context) (workrow.Listener, error) {
	return s.ListenWork(ctx, session(s.db))
}

// Signal signals this store's table with db, the caller's transaction:
// the Workers listening for it claim as soon as it commits, instead of at
// their next poll. Call it in the transaction that inserts (or makes due)
// the rows; several calls in one transaction send one signal, and none is
// sent if it rolls back. It sends the signal only while a Worker of the
// table is idle, so it costs a producer next to nothing while the workers
// are busy.
func (s *WorkRows[K, R]) Signal(ctx context.Context, db bun.IDB) error {
	h, err := open(db, "Signal")
	if err != nil {
		return err
	}
	return s.WorkRows.Signal(ctx, h)
}

// SignalWorkRows is Signal for the work table table in schema ("" for the
// search_path), for producers that have no WorkRows of their own.
func SignalWorkRows(ctx context.Context, db bun.IDB, schema, table string) error {
	h, err := open(db, "SignalWorkRows")
	if err != nil {
		return err
	}
	return adapter.SignalWorkRows(ctx, h, schema, table)
}

// session gives the listening sessions of db, which must be the *bun.DB:
// one connection of its pool each, discarded rather than returned to the
// pool when the session ends.
func session(db bun.IDB) pgsql.Session {
	return func(ctx context.Context) (*pgx.Conn, func(), error) {
		bdb, ok := db.(*bun.DB)
		if !ok {
			return nil, nil, fmt.Errorf("%w: it is a %T; build the store over the *bun.DB", ErrListenUnsupported, db)
		}
		return pgsql.SQLSession(ctx, bdb.DB)
	}
}
