package pgsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Session opens a connection of its own for a listening session (the
// lease watcher's, the outbox driver's, a work-row worker's) and returns
// it with release, which ends it: a connection that listened, or holds
// the idle gate, never goes back to a pool. It is the seam's part for
// LISTEN, which each adapter gives from its own pool.
type Session func(ctx context.Context) (conn *pgx.Conn, release func(), err error)

// SQLSession takes one connection of db, a pool on pgx's database/sql
// driver, for a session: a goroutine holds it inside (*sql.Conn).Raw,
// handing out pgx's connection under it, until release, which discards
// it. A connection of another driver is ErrListenUnsupported.
func SQLSession(ctx context.Context, db *sql.DB) (*pgx.Conn, func(), error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	got := make(chan any, 1) // pgx's connection, or the driver's of another kind
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned: ends at release
		defer close(done)
		_ = conn.Raw(func(dc any) error {
			pc, ok := dc.(interface{ Conn() *pgx.Conn })
			if !ok {
				got <- dc
				return nil
			}
			got <- pc.Conn()
			<-stop
			return driver.ErrBadConn // discard it: it listened, and may hold the gate
		})
	}()
	c := <-got
	release := func() {
		close(stop)
		<-done
		_ = conn.Close()
	}
	pc, ok := c.(*pgx.Conn)
	if !ok {
		release()
		return nil, nil, fmt.Errorf("%w: its driver connection is a %T; use pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib)", ErrListenUnsupported, c)
	}
	return pc, release, nil
}
