package pgxstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
)

// This file is the adapter: pgx under the statements of backends/internal/pgsql.

// adapter names this package in errors.
const adapter pgsql.Adapter = "pgxstore"

// pgxQuerier is what a pool, a connection and a transaction share.
type pgxQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// querier runs statements on a pool, a connection or a transaction.
type querier struct{ q pgxQuerier }

func (q querier) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := q.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (q querier) Query(ctx context.Context, sql string, args ...any) (pgsql.Rows, error) {
	rows, err := q.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (q querier) QueryRow(ctx context.Context, sql string, args ...any) pgsql.Row {
	return q.q.QueryRow(ctx, sql, args...)
}

// poolDB is the stores' handle over a pool.
type poolDB struct {
	querier
	pool *pgxpool.Pool
}

func newPoolDB(pool *pgxpool.Pool) poolDB { return poolDB{querier{pool}, pool} }

// Begin takes a connection for a READ COMMITTED transaction whose BEGIN
// goes out with its first statement: one round trip fewer.
func (d poolDB) Begin(ctx context.Context) (pgsql.Tx, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &poolTx{conn: conn}, nil
}

// Autocommits implements pgsql.Autocommitter: a statement on the pool
// commits on its own.
func (poolDB) Autocommits() {}

// poolTx is a transaction on a connection of the pool.
type poolTx struct {
	conn  *pgxpool.Conn
	begun bool // BEGIN has been sent
	done  bool // the connection went back to the pool
}

// send sends stmts, BEGIN first while it has not been sent, and reads
// BEGIN's result.
func (t *poolTx) send(ctx context.Context, stmts ...pgsql.Statement) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	if !t.begun {
		b.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	}
	for _, s := range stmts {
		b.Queue(s.SQL, s.Args...)
	}
	res := t.conn.SendBatch(ctx, b)
	if !t.begun {
		t.begun = true
		if _, err := res.Exec(); err != nil {
			_ = res.Close()
			return nil, err
		}
	}
	return res, nil
}

func (t *poolTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	if t.begun {
		tag, err := t.conn.Exec(ctx, sql, args...)
		return tag.RowsAffected(), err
	}
	n, err := t.ExecBatch(ctx, pgsql.Statement{SQL: sql, Args: args})
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

func (t *poolTx) ExecBatch(ctx context.Context, stmts ...pgsql.Statement) ([]int64, error) {
	res, err := t.send(ctx, stmts...)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	counts, err := rowCounts(res, len(stmts))
	if err != nil {
		return counts, err
	}
	return counts, res.Close()
}

// rowCounts reads the results of a batch's first n statements.
func rowCounts(res pgx.BatchResults, n int) ([]int64, error) {
	counts := make([]int64, 0, n)
	for range n {
		tag, err := res.Exec()
		if err != nil {
			return counts, err
		}
		counts = append(counts, tag.RowsAffected())
	}
	return counts, nil
}

func (t *poolTx) Query(ctx context.Context, sql string, args ...any) (pgsql.Rows, error) {
	if t.begun {
		return querier{t.conn}.Query(ctx, sql, args...)
	}
	res, err := t.send(ctx, pgsql.Statement{SQL: sql, Args: args})
	if err != nil {
		return nil, err
	}
	rows, err := res.Query()
	if err != nil {
		_ = res.Close()
		return nil, err
	}
	return batchRows{rows, res}, nil
}

func (t *poolTx) QueryRow(ctx context.Context, sql string, args ...any) pgsql.Row {
	if t.begun {
		return t.conn.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	return firstRow{rows, err}
}

// ExecCommit sends the statement and COMMIT in one round trip.
func (t *poolTx) ExecCommit(ctx context.Context, sql string, args ...any) (int64, error) {
	n, err := t.execCommit(ctx, pgsql.Statement{SQL: sql, Args: args})
	if err != nil {
		return 0, err
	}
	return n[0], nil
}

// execCommit sends stmts and COMMIT in one round trip (with BEGIN, when
// it has not been sent) and returns the statements' row counts.
func (t *poolTx) execCommit(ctx context.Context, stmts ...pgsql.Statement) ([]int64, error) {
	res, err := t.send(ctx, append(slices.Clip(stmts), pgsql.Statement{SQL: "COMMIT"})...)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	counts, err := rowCounts(res, len(stmts))
	if err != nil {
		return nil, err
	}
	if err := commitResult(res.Exec()); err != nil {
		return nil, err
	}
	if err := res.Close(); err != nil {
		return nil, err
	}
	t.release()
	return counts, nil
}

func (t *poolTx) CopyFrom(ctx context.Context, table [2]string, columns []string, rows [][]any) (int64, error) {
	if !t.begun {
		if _, err := t.ExecBatch(ctx); err != nil {
			return 0, err
		}
	}
	name := pgx.Identifier{table[1]}
	if table[0] != "" {
		name = pgx.Identifier{table[0], table[1]}
	}
	return t.conn.CopyFrom(ctx, name, columns, pgx.CopyFromRows(rows))
}

func (t *poolTx) Commit(ctx context.Context) error {
	if t.begun {
		if err := commitResult(t.conn.Exec(ctx, "COMMIT")); err != nil {
			return err
		}
	}
	t.release()
	return nil
}

func (t *poolTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	defer t.release()
	if t.conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	// The pool closes a connection released inside a transaction rather
	// than reuse it: a failed ROLLBACK costs the connection, nothing more.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return err
}

func (t *poolTx) release() {
	if !t.done {
		t.done = true
		t.conn.Release()
	}
}

// commitResult reads COMMIT's answer: PostgreSQL answers ROLLBACK to the
// COMMIT of a failed transaction.
func commitResult(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("the transaction was rolled back (%s)", tag)
	}
	return nil
}

// batchRows are the rows of a batch's last statement; closing them ends
// the batch.
type batchRows struct {
	pgx.Rows
	res pgx.BatchResults
}

func (r batchRows) Close() {
	r.Rows.Close()
	_ = r.res.Close()
}

// firstRow scans the first row of rows.
type firstRow struct {
	rows pgsql.Rows
	err  error
}

func (r firstRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// pgxTx is a caller's transaction under the statements.
type pgxTx struct {
	querier
	tx pgx.Tx
}

func (t pgxTx) Commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgxTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// starter is a TxStarter under Migrate and VerifySchema.
type starter struct{ db TxStarter }

func (s starter) Begin(ctx context.Context) (pgsql.Tx, error) {
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgxTx{querier{tx}, tx}, nil
}
