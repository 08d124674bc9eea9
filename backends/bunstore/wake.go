package bunstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
)

var (
	_ outbox.Waker  = (*OutboxStore)(nil)
	_ workrow.Waker = (*WorkRows[int64, struct{}])(nil)
)

// ErrListenUnsupported is returned by Listen when the store's handle
// cannot LISTEN: it is not a *bun.DB, or its driver's connection is not
// pgx's. A driver or worker over such a store polls.
var ErrListenUnsupported = errors.New("baton/bunstore: this database handle cannot listen for wake-ups")

// Listen implements outbox.Waker: the leading driver listens, for the
// signals of Enqueue, on one connection of the *bun.DB's pool, discarded
// rather than returned to the pool when the session ends. Behind
// PgBouncer in transaction pooling mode LISTEN does not work: set
// outbox.Config.PollOnly there.
func (s *OutboxStore) Listen(ctx context.Context) (outbox.Listener, error) {
	conn, release, err := dedicated(ctx, s.db)
	if err != nil {
		return nil, err
	}
	return s.ListenOutbox(ctx, conn, release)
}

// Listen implements workrow.Waker: a Worker's Run listens on one
// connection of the *bun.DB's pool, discarded when the session ends, for
// the signals of Signal and SignalWorkRows on this table. Behind PgBouncer
// in transaction pooling mode, set workrow.Config.PollOnly.
func (s *WorkRows[K, R]) Listen(ctx context.Context) (workrow.Listener, error) {
	conn, release, err := dedicated(ctx, s.db)
	if err != nil {
		return nil, err
	}
	return s.ListenWork(ctx, conn, release)
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
	if p := pgsql.IdentifierProblem(table); p != "" {
		return fmt.Errorf("baton/bunstore: SignalWorkRows: table %q: %s", table, p)
	}
	if schema != "" {
		if err := pgsql.ValidateSchemaName("SignalWorkRows schema", schema); err != nil {
			return err
		}
	}
	h, err := open(db, "SignalWorkRows")
	if err != nil {
		return err
	}
	return adapter.SignalWork(ctx, h, pgsql.Qualified(schema, table))
}

// dedicated takes one connection of db's pool for a listening session: a
// goroutine holds it inside (*sql.Conn).Raw, handing out pgx's connection
// under it, until release, which discards it.
func dedicated(ctx context.Context, db bun.IDB) (*pgx.Conn, func(), error) {
	bdb, ok := db.(*bun.DB)
	if !ok {
		return nil, nil, fmt.Errorf("%w: it is a %T; build the store over the *bun.DB", ErrListenUnsupported, db)
	}
	conn, err := bdb.DB.Conn(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("baton/bunstore: listen: get a connection: %w", err)
	}
	got := make(chan *pgx.Conn, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned: ends at release
		defer close(done)
		_ = conn.Raw(func(dc any) error {
			pc, ok := dc.(interface{ Conn() *pgx.Conn })
			if !ok {
				got <- nil
				return nil
			}
			got <- pc.Conn()
			<-stop
			return driver.ErrBadConn // discard it: it listened, and may hold the gate
		})
	}()
	pc := <-got
	release := func() {
		close(stop)
		<-done
		_ = conn.Close()
	}
	if pc == nil {
		release()
		return nil, nil, fmt.Errorf("%w: its driver connection is not pgx's; use github.com/jackc/pgx/v5/stdlib", ErrListenUnsupported)
	}
	return pc, release, nil
}
