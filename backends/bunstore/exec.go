package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
)

// This file is the adapter: the database/sql handle under a bun.IDB, on
// pgx's driver, under the statements of backends/internal/pgsql. They go to
// that handle with their values as parameters, not through bun's query
// formatting, so bun's query hooks do not see them.

// adapter names this package in errors.
const adapter pgsql.Adapter = "bunstore"

// ErrUnsupportedDriver is wrapped by every constructor, schema function and
// Enqueue given a handle whose *sql.DB does not run on pgx's database/sql
// driver (github.com/jackc/pgx/v5/stdlib): bun's own pgdriver, for one,
// cannot carry baton's array parameters, nor LISTEN through database/sql.
var ErrUnsupportedDriver = errors.New("baton/bunstore: the database handle's driver is not pgx's database/sql driver")

// sqlConn is what *sql.DB, *sql.Tx and *sql.Conn share.
type sqlConn interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// querier runs statements on a database/sql handle.
type querier struct{ c sqlConn }

func (q querier) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := q.c.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (q querier) Query(ctx context.Context, query string, args ...any) (pgsql.Rows, error) {
	rows, err := q.c.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (q querier) QueryRow(ctx context.Context, query string, args ...any) pgsql.Row {
	return q.c.QueryRowContext(ctx, query, args...)
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// handle is the seam over a bun.IDB: statements on its database/sql
// handle, transactions through bun (a savepoint inside a bun.Tx).
type handle struct {
	querier
	db bun.IDB
}

// open checks that db runs on pgx's database/sql driver and returns its
// handle; caller names the function, for the error.
func open(db bun.IDB, caller string) (handle, error) {
	if db == nil {
		return handle{}, fmt.Errorf("baton/bunstore: %s: the database handle is nil", caller)
	}
	var c sqlConn
	switch x := db.(type) {
	case *bun.DB:
		c = x.DB
	case bun.Tx:
		c = x.Tx
	case *bun.Tx:
		c = x.Tx
	case bun.Conn:
		c = x.Conn
	case *bun.Conn:
		c = x.Conn
	default:
		return handle{}, fmt.Errorf("baton/bunstore: %s: the handle is a %T; give a *bun.DB, a bun.Tx or a bun.Conn", caller, db)
	}
	if d := db.NewRaw("").DB(); d == nil || !isPgx(d) {
		return handle{}, fmt.Errorf("baton/bunstore: %s: open the *sql.DB under bun with github.com/jackc/pgx/v5/stdlib "+
			"(sql.Open(\"pgx\", dsn), stdlib.OpenDB or stdlib.OpenDBFromPool) instead of bun's pgdriver (%w)", caller, ErrUnsupportedDriver)
	}
	return handle{querier{c}, db}, nil
}

// poolHandle is a handle over a *bun.DB, whose statements outside a
// transaction commit on their own (pgsql.Autocommitter): a granted outbox
// settlement is then one statement. A bun.Tx or bun.Conn handle is not
// one.
type poolHandle struct{ handle }

// Autocommits implements pgsql.Autocommitter.
func (poolHandle) Autocommits() {}

// outboxDB is h for the outbox stores: a poolHandle over a *bun.DB.
func (h handle) outboxDB() pgsql.DB {
	if _, ok := h.db.(*bun.DB); ok {
		return poolHandle{h}
	}
	return h
}

func isPgx(db *bun.DB) bool {
	_, ok := db.Driver().(*stdlib.Driver)
	return ok
}

// Begin starts a READ COMMITTED transaction, or a savepoint when the
// handle is a bun.Tx.
func (h handle) Begin(ctx context.Context) (pgsql.Tx, error) {
	tx, err := h.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	return &bunTx{querier: querier{tx.Tx}, tx: tx}, nil
}

type bunTx struct {
	querier
	tx   bun.Tx
	done bool
}

func (t *bunTx) Commit(context.Context) error {
	t.done = true
	return t.tx.Commit()
}

// Rollback does nothing after Commit: on a savepoint it would fail, and
// fail the caller's transaction with it.
func (t *bunTx) Rollback(context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	return t.tx.Rollback()
}
