package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
)

var (
	_ outbox.Waker  = (*OutboxStore)(nil)
	_ workrow.Waker = (*WorkRows[int64, struct{}])(nil)
)

// Listen implements outbox.Waker: the leading driver listens on one
// connection of the store's pool, taken out of the pool for good (closed,
// not returned, when the session ends), for the signals of Enqueue. It
// needs a session of its own: behind PgBouncer in transaction pooling
// mode, LISTEN does not work; set outbox.Config.PollOnly there.
func (s *OutboxStore) Listen(ctx context.Context) (outbox.Listener, error) {
	conn, release, err := dedicated(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("baton/pgxstore: outbox listen: get a connection: %w", err)
	}
	return s.ListenOutbox(ctx, conn, release)
}

// Listen implements workrow.Waker: a Worker's Run listens on one
// connection of the store's pool, taken out of the pool for good, for the
// signals of Signal and SignalWorkRows on this table. Behind PgBouncer in
// transaction pooling mode, set workrow.Config.PollOnly.
func (s *WorkRows[K, R]) Listen(ctx context.Context) (workrow.Listener, error) {
	conn, release, err := dedicated(ctx, s.pool)
	if err != nil {
		return nil, fmt.Errorf("baton/pgxstore: work rows listen: get a connection: %w", err)
	}
	return s.ListenWork(ctx, conn, release)
}

// Signal signals this store's table in the caller's transaction tx: the
// Workers listening for it claim as soon as tx commits, instead of at
// their next poll. Call it in the transaction that inserts (or makes due)
// the rows; several calls in one transaction send one signal, and none is
// sent if tx rolls back. It sends the signal only while a Worker of the
// table is idle, so it costs a producer next to nothing while the workers
// are busy.
func (s *WorkRows[K, R]) Signal(ctx context.Context, tx pgx.Tx) error {
	if tx == nil {
		return s.WorkRows.Signal(ctx, nil)
	}
	return s.WorkRows.Signal(ctx, querier{tx})
}

// SignalWorkRows is Signal for the work table table in schema ("" for
// tx's search_path), for producers that have no WorkRows of their own.
func SignalWorkRows(ctx context.Context, tx pgx.Tx, schema, table string) error {
	if p := pgsql.IdentifierProblem(table); p != "" {
		return fmt.Errorf("baton/pgxstore: SignalWorkRows: table %q: %s", table, p)
	}
	if schema != "" {
		if err := pgsql.ValidateSchemaName("SignalWorkRows schema", schema); err != nil {
			return err
		}
	}
	var q pgsql.Querier
	if tx != nil {
		q = querier{tx}
	}
	return adapter.SignalWork(ctx, q, pgsql.Qualified(schema, table))
}

// dedicated takes a connection out of pool for a listening session and
// returns it with the function that closes it.
func dedicated(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, func(), error) {
	if pool == nil {
		return nil, nil, errors.New("the store has no pool")
	}
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	c := pc.Hijack()
	return c, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = c.Close(ctx)
	}, nil
}
