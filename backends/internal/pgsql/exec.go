package pgsql

import "context"

// Querier runs one statement. Parameters are written $1, $2, ... and their
// values travel as parameters, never in the statement text.
type Querier interface {
	// Exec runs a statement and returns the number of rows it affected.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// Query runs a statement and returns its rows, to be read and closed.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// QueryRow runs a statement whose result is one row; its Scan returns
	// an error wrapping sql.ErrNoRows when there is none.
	QueryRow(ctx context.Context, sql string, args ...any) Row
}

// Rows is a result being read.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	// Err reports what ended the reading early, after Next returned false
	// or after Close.
	Err() error
	Close()
}

// Row is a result of at most one row.
type Row interface {
	Scan(dest ...any) error
}

// Beginner starts transactions: all Migrate and VerifySchema need.
type Beginner interface {
	// Begin starts a transaction, or a savepoint when the handle is a
	// transaction itself.
	Begin(ctx context.Context) (Tx, error)
}

// DB is a handle the stores run on: single statements, and transactions,
// which a DB begins READ COMMITTED (the statements expect each to see what
// committed before it started; see the stores).
type DB interface {
	Querier
	Beginner
}

// Tx is a transaction (or a savepoint in one).
type Tx interface {
	Querier
	Commit(ctx context.Context) error
	// Rollback undoes the transaction; after Commit it does nothing.
	Rollback(ctx context.Context) error
}

// Statement is one statement with its parameters.
type Statement struct {
	SQL  string
	Args []any
}

// Batcher is a Querier that can send several statements in one round trip.
type Batcher interface {
	// ExecBatch runs the statements in order, stopping at the first
	// failure, and returns their row counts.
	ExecBatch(ctx context.Context, stmts ...Statement) ([]int64, error)
}

// ExecCommitter is a Tx that can send its last statement and COMMIT in
// one round trip.
type ExecCommitter interface {
	// ExecCommit runs the statement, then commits; the transaction is over
	// either way.
	ExecCommit(ctx context.Context, sql string, args ...any) (int64, error)
}

// Autocommitter is a DB over a pool: its statements, sent outside a
// transaction, each commit on their own, and calls from several
// goroutines run on connections of their own. A caller's transaction or
// a single connection is not one: a statement that fails there ends the
// caller's transaction too, and two calls at once would share one
// session.
type Autocommitter interface {
	// Autocommits marks the handle; it does nothing.
	Autocommits()
}

// Copier is a Tx that can load rows with COPY.
type Copier interface {
	// CopyFrom copies rows into the table (schema and name; schema ""
	// for the search_path) and returns how many it copied.
	CopyFrom(ctx context.Context, table [2]string, columns []string, rows [][]any) (int64, error)
}

// execAll runs stmts on q, in one round trip when q is a Batcher.
func execAll(ctx context.Context, q Querier, stmts ...Statement) ([]int64, error) {
	if b, ok := q.(Batcher); ok {
		return b.ExecBatch(ctx, stmts...)
	}
	counts := make([]int64, 0, len(stmts))
	for _, s := range stmts {
		n, err := q.Exec(ctx, s.SQL, s.Args...)
		if err != nil {
			return counts, err
		}
		counts = append(counts, n)
	}
	return counts, nil
}

// execCommit runs a transaction's last statement and commits it, in one
// round trip when tx is an ExecCommitter.
func execCommit(ctx context.Context, tx Tx, sql string, args ...any) (int64, error) {
	if c, ok := tx.(ExecCommitter); ok {
		return c.ExecCommit(ctx, sql, args...)
	}
	n, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return n, err
	}
	return n, tx.Commit(ctx)
}

// rollback ends tx when it was not committed, even after ctx ended.
func rollback(ctx context.Context, tx Tx) { _ = tx.Rollback(context.WithoutCancel(ctx)) }

// collect reads every row of a query with scan.
func collect[T any](rows Rows, err error, scan func(Rows) (T, error)) ([]T, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	rows.Close()
	return out, rows.Err()
}

// each calls fn on every row of a query.
func each(rows Rows, err error, fn func(Rows) error) error {
	_, err = collect(rows, err, func(r Rows) (struct{}, error) { return struct{}{}, fn(r) })
	return err
}
