package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/workrow"
)

// Default column names of a work table.
const (
	DefaultWorkRowIDColumn          = pgsql.DefaultWorkRowIDColumn
	DefaultWorkRowLockIDColumn      = pgsql.DefaultWorkRowLockIDColumn
	DefaultWorkRowLockedUntilColumn = pgsql.DefaultWorkRowLockedUntilColumn
)

// WorkRowsOptions describe an application's work table to WorkRows. R is
// the row type.
type WorkRowsOptions[R any] struct {
	// Schema holds the table. "" uses the connection's search_path.
	Schema string
	// Table is the work table. Required.
	Table string
	// IDColumn is the primary key (default "id"), of any type pgx can
	// scan into WorkRows' K.
	IDColumn string
	// LockIDColumn is the claim's lock id, a nullable uuid (default
	// "lock_id").
	LockIDColumn string
	// LockedUntilColumn is the lock expiry, a nullable timestamptz
	// (default "locked_until"). It doubles as the retry visibility: a
	// failed row's finalize sets it to the time the row may be claimed
	// again.
	LockedUntilColumn string

	// Live is the live-row filter, for example
	// workrow.IsNull("completed_at"): the rows that may still need work.
	// Required. It is the claim index's predicate, and every claim adds it,
	// written out as literals, to its own predicate, so the planner can
	// always use the partial index. Keep it to columns a finished row sets
	// once (a completion or parked marker); it must not mention the lock
	// columns.
	Live workrow.Cond
	// Order is the queue order used when a ClaimSpec has none, and the
	// claim index's key (before the id).
	Order []workrow.Order

	// LockFreeCandidates makes the claim's candidate read take no row
	// lock at all, leaving the conditional UPDATE alone to decide which
	// rows a claim gets. It is correct, but under contention it loses: a
	// claim whose snapshot predates a competitor's stamp still row-locks
	// that row while re-checking it (and keeps the lock until the
	// statement ends), which with large batches deadlocks against the
	// competitor's finalize (measured: 40P01 within seconds at 4 workers
	// and batches of 100; the statement PostgreSQL rolls back is sent
	// again, counted in WorkRowsStats.Conflicts), and most claims stamp
	// fewer rows than they read.
	// The default skips rows being written at that moment (FOR NO KEY
	// UPDATE SKIP LOCKED, held only while the claim statement runs).
	LockFreeCandidates bool

	// Columns are the columns read into R. Default: every column of the
	// table that a field of R maps to, matched the way
	// pgx.RowToStructByName matches (the db tag, else the field name,
	// case and underscores ignored). Required when R is not a struct.
	Columns []string
	// Scan turns one row of Columns into an R (default
	// pgx.RowToStructByNameLax[R]).
	Scan func(row pgx.CollectableRow) (R, error)

	// Logger receives diagnostics. nil discards them.
	Logger *slog.Logger
}

// WorkRowsStats count what claims met. Short claims, statements that
// stamped fewer rows than they selected, measure contention: concurrent
// claimers that picked the same candidates. Conflicts count statements
// PostgreSQL rolled back whole and that were sent again: serialization
// failures above READ COMMITTED, and deadlocks between lock-free claims
// and finalizes.
type WorkRowsStats = pgsql.WorkRowsStats

// WorkRows is the workrow.Store of one application table, over pgx. Create
// it with NewWorkRows. K is the id's type, R the row's.
//
// Every method is one statement, so one transaction of its own: a claim,
// finalize, renew or release holds its row locks only while it runs, and
// nothing is held while the work happens. The statements expect READ
// COMMITTED (PostgreSQL's default): under REPEATABLE READ or SERIALIZABLE,
// a claim that meets a concurrent claim on the same row fails with a
// serialization error instead of skipping the row (see docs/work-rows.md).
//
// A claim is one statement: the first eligible, free rows in queue order,
// skipping rows another statement is writing, stamped by a conditional
// UPDATE that restates the whole predicate and the lock check, and read
// back. FinalizeMany is one statement whatever the number of rows; Check
// reads the table's columns and checks its claim index.
type WorkRows[K comparable, R any] struct {
	*pgsql.WorkRows[K, R]
	pool *pgxpool.Pool
	scan func(row pgx.CollectableRow) (R, error)
}

var (
	_ workrow.Store[int64, struct{}] = (*WorkRows[int64, struct{}])(nil)
	_ workrow.Waker                  = (*WorkRows[int64, struct{}])(nil)
)

// NewWorkRows returns a WorkRows over pool, or an error naming the first
// invalid option. It sends nothing to the database; the first call reads
// the table's columns from the catalog (Check does so at once).
func NewWorkRows[K comparable, R any](pool *pgxpool.Pool, opts WorkRowsOptions[R]) (*WorkRows[K, R], error) {
	if pool == nil {
		return nil, errors.New("baton/pgxstore: NewWorkRows: the pool is nil")
	}
	for i, c := range opts.Columns {
		if p := pgsql.IdentifierProblem(c); p != "" {
			return nil, fmt.Errorf("baton/pgxstore: WorkRowsOptions.Columns[%d] %q: %s", i, c, p)
		}
	}
	s := &WorkRows[K, R]{pool: pool, scan: opts.Scan}
	if s.scan == nil {
		s.scan = pgx.RowToStructByNameLax[R]
	}
	columns := func(table []string) []string {
		if len(opts.Columns) > 0 {
			return opts.Columns
		}
		return fieldColumns(reflect.TypeFor[R](), table)
	}
	from := fmt.Sprintf("a field of %v; set WorkRowsOptions.Columns (and Scan, if it is not a struct)", reflect.TypeFor[R]())
	if len(opts.Columns) > 0 {
		from = "WorkRowsOptions.Columns"
	}
	st, err := pgsql.NewWorkRows(newPoolDB(pool), pgsql.WorkRowsOptions[K, R]{
		Adapter: adapter, Schema: opts.Schema, Table: opts.Table,
		IDColumn: opts.IDColumn, LockIDColumn: opts.LockIDColumn, LockedUntilColumn: opts.LockedUntilColumn,
		Live: opts.Live, Order: opts.Order, LockFreeCandidates: opts.LockFreeCandidates,
		Alias: "w", Columns: columns, ColumnsFrom: from, ScanClaimed: s.scanClaimed, Logger: opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	s.WorkRows = st
	return s, nil
}

// ClaimIndex describes the claim index this store's claims ride: the
// Order columns then the id, partial over Live.
func (s *WorkRows[K, R]) ClaimIndex() ClaimIndex {
	ix := s.Index()
	return ClaimIndex{Schema: ix.Schema, Table: ix.Table, IDColumn: ix.IDColumn, Order: ix.Order, Live: ix.Live, LockColumns: ix.LockColumns}
}

// scanClaimed reads a claim's rows with the Scan option, which sees each
// row without the claim's three leading columns.
func (s *WorkRows[K, R]) scanClaimed(_ context.Context, r pgsql.Rows) (int64, []workrow.Claimed[K, R], error) {
	rows := r.(pgx.Rows)
	var (
		out      []workrow.Claimed[K, R]
		selected int64
		stamped  bool
		id       K
	)
	inner := skipColumns{Rows: rows, skip: 3, head: []any{&selected, &stamped, &id}}
	for rows.Next() {
		if rows.RawValues()[2] == nil { // nothing stamped
			dest := make([]any, len(rows.FieldDescriptions()))
			dest[0] = &selected
			if err := rows.Scan(dest...); err != nil {
				return 0, nil, err
			}
			continue
		}
		row, err := s.scan(inner)
		if err != nil {
			return 0, nil, fmt.Errorf("scan a row: %w", err)
		}
		out = append(out, workrow.Claimed[K, R]{ID: id, Row: row})
	}
	return selected, out, rows.Err()
}

// skipColumns shows a row without its first columns to a scan function,
// scanning those into head on the way.
type skipColumns struct {
	pgx.Rows
	skip int
	head []any
}

func (r skipColumns) FieldDescriptions() []pgconn.FieldDescription {
	return r.Rows.FieldDescriptions()[r.skip:]
}

func (r skipColumns) Scan(dest ...any) error {
	return r.Rows.Scan(append(slices.Clip(r.head), dest...)...)
}

func (r skipColumns) Values() ([]any, error) {
	v, err := r.Rows.Values()
	if err != nil {
		return nil, err
	}
	return v[r.skip:], nil
}

func (r skipColumns) RawValues() [][]byte { return r.Rows.RawValues()[r.skip:] }

// fieldColumns lists the columns, in table order, that a field of struct
// type t maps to under pgx.RowToStructByName's rules.
func fieldColumns(t reflect.Type, columns []string) []string {
	if t.Kind() != reflect.Struct {
		return nil
	}
	want := map[string]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for f := range t.Fields() {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			if !f.IsExported() {
				continue
			}
			tag, tagged := f.Tag.Lookup("db")
			tag, _, _ = strings.Cut(tag, ",")
			if tag == "-" {
				continue
			}
			for _, c := range columns {
				if tagged && strings.EqualFold(c, tag) ||
					!tagged && strings.EqualFold(strings.ReplaceAll(c, "_", ""), strings.ReplaceAll(f.Name, "_", "")) {
					want[c] = true
					break
				}
			}
		}
	}
	walk(t)
	var out []string
	for _, c := range columns {
		if want[c] {
			out = append(out, c)
		}
	}
	return out
}

// ErrClaimIndex is wrapped by ClaimIndex.Check when a work table lacks its
// claim index or has an index that keeps claims from being HOT updates.
var ErrClaimIndex = pgsql.ErrClaimIndex

// ClaimIndex describes the index a work table's claims ride: the queue
// order columns, then the id, partial over the live rows only. Because it
// holds only live rows, a claim stays as fast with a million finished rows
// in the table as with none.
//
// The lock columns must stay out of this index and every other index of
// the table, keys, expressions and predicates alike. A claim, a renewal, a
// release and a failure's finalize change only the lock columns (and
// columns such as the attempt counter or the last error, which should stay
// unindexed too); as long as no indexed column changes, PostgreSQL makes
// them HOT updates: the new row version goes into the same heap page, no
// index gets a new entry, and the dead version is pruned without VACUUM. An
// index on locked_until would turn every one of those updates into an
// insertion into every index of the table.
type ClaimIndex struct {
	// Schema and Table name the work table ("" Schema: search_path).
	Schema, Table string
	// Name is the index's name (default "<Table>_claim").
	Name string
	// IDColumn is the primary key (default "id").
	IDColumn string
	// Order are the queue order columns, before the id.
	Order []workrow.Order
	// Live is the live-row filter, the index predicate. Required.
	Live workrow.Cond
	// LockColumns are checked to be in no index (default lock_id and
	// locked_until).
	LockColumns []string
	// Concurrently makes DDL write CREATE INDEX CONCURRENTLY, which does
	// not block writes but cannot run inside a transaction.
	Concurrently bool
}

func (ix ClaimIndex) core() pgsql.ClaimIndex {
	return pgsql.ClaimIndex{Adapter: adapter, Schema: ix.Schema, Table: ix.Table, Name: ix.Name, IDColumn: ix.IDColumn,
		Order: ix.Order, Live: ix.Live, LockColumns: ix.LockColumns, Concurrently: ix.Concurrently}
}

// DDL returns the CREATE INDEX statement, for a migration:
//
//	CREATE INDEX IF NOT EXISTS "deliveries_claim" ON "deliveries" ("created_at", "id") WHERE ("completed_at" IS NULL)
func (ix ClaimIndex) DDL() (string, error) { return ix.core().DDL() }

// Check verifies, read-only, that the table has a valid index whose keys
// are the Order columns (same directions) then the id, that the planner
// uses it for the live rows in queue order, and that no index of the table
// mentions a lock column. The error wraps ErrClaimIndex and says what to
// create or drop.
func (ix ClaimIndex) Check(ctx context.Context, pool *pgxpool.Pool) error {
	if pool == nil {
		return errors.New("baton/pgxstore: ClaimIndex.Check: the pool is nil")
	}
	return ix.core().Check(ctx, newPoolDB(pool))
}
