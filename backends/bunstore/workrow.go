package bunstore

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/workrow"
)

// WorkRowsOptions describe an application's work table to WorkRows. The
// table is the bun model R's unless Table says otherwise.
type WorkRowsOptions struct {
	// Live is the live-row filter, for example
	// workrow.IsNull("completed_at"): the rows that may still need work.
	// Required. It is the claim index's predicate (ClaimIndex) and every
	// claim adds it to its own predicate, so the planner can always use the
	// partial index. It must not mention the lock columns.
	Live workrow.Cond
	// Order is the queue order used when a claim has none, and the claim
	// index's key before the id.
	Order []workrow.Order
	// Table is the work table (default: the model's table, from its
	// bun:"table:..." tag or bun's naming of the type), in Schema ("" uses
	// the connection's search_path).
	Table, Schema string
	// IDColumn is the primary key (default: the model's single primary
	// key column, else "id").
	IDColumn string
	// LockIDColumn and LockedUntilColumn are the lock columns (default
	// "lock_id" and "locked_until": embed LockColumns in the model).
	LockIDColumn, LockedUntilColumn string
	// Logger receives diagnostics. nil discards them.
	Logger *slog.Logger
}

// withModel fills the defaults the model R gives.
func (o WorkRowsOptions) withModel(table *schema.Table) WorkRowsOptions {
	if o.Table == "" {
		o.Table = table.Name
	}
	if o.IDColumn == "" && len(table.PKs) == 1 {
		o.IDColumn = table.PKs[0].Name
	}
	return o
}

func (o WorkRowsOptions) index() pgsql.ClaimIndex {
	return pgsql.ClaimIndex{Adapter: adapter, Schema: o.Schema, Table: o.Table, IDColumn: o.IDColumn, Order: o.Order, Live: o.Live}
}

// modelTable is R's bun table, or an error when R is no struct.
func modelTable[R any](db bun.IDB, caller string) (*schema.Table, error) {
	typ := reflect.TypeFor[R]()
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("baton/bunstore: %s: the row type %v is not a struct; it must be the table's bun model", caller, typ)
	}
	return db.Dialect().Tables().Get(typ), nil
}

// WorkRows is the workrow.Store of one application table, on a bun.IDB, with
// R the table's bun model and K its id's type. Create it with NewWorkRows.
//
// It serves two kinds of caller. workrow.Worker (and anything else holding
// a workrow.Store) claims with core's condition trees (workrow.Cond), which
// are rendered as the pgx adapter renders them, values as parameters. Code
// written with bun claims with ClaimWith, whose predicate, order and
// claim-time sets are bun query-builder functions. Both run the pgx
// adapter's single statement: read the first eligible, free candidates
// (skipping rows another statement is writing), stamp them in a
// conditional UPDATE that restates the whole predicate and the lock check,
// and read back exactly the rows stamped, into R with bun.
//
// Finalize, renew and release match the id and the lock id and report
// whether the row was still owned. Every method is one statement: nothing
// is held while the work happens. The statements expect READ COMMITTED.
type WorkRows[K comparable, R any] struct {
	*pgsql.WorkRows[K, R]
	db    bun.IDB
	table *schema.Table
	opts  WorkRowsOptions
}

var (
	_ workrow.Store[int64, struct{}] = (*WorkRows[int64, struct{}])(nil)
	_ workrow.Waker                  = (*WorkRows[int64, struct{}])(nil)
)

// NewWorkRows returns a WorkRows over db for the model R, or an error
// naming the first invalid option. db must run on pgx's database/sql
// driver (ErrUnsupportedDriver). It asks the database one thing,
// standard_conforming_strings, and refuses a session without it
// (ErrNonStandardStrings): ClaimWith and FinalizeWith write bun's quoted
// values into their statements.
func NewWorkRows[K comparable, R any](ctx context.Context, db bun.IDB, opts WorkRowsOptions) (*WorkRows[K, R], error) {
	h, err := open(db, "NewWorkRows")
	if err != nil {
		return nil, err
	}
	table, err := modelTable[R](db, "NewWorkRows")
	if err != nil {
		return nil, err
	}
	s := &WorkRows[K, R]{db: db, table: table, opts: opts.withModel(table)}
	var columns []string
	for _, f := range table.Fields {
		columns = append(columns, f.Name)
	}
	s.WorkRows, err = pgsql.NewWorkRows(h, pgsql.WorkRowsOptions[K, R]{
		Adapter: adapter, Schema: s.opts.Schema, Table: s.opts.Table, IDColumn: s.opts.IDColumn,
		LockIDColumn: s.opts.LockIDColumn, LockedUntilColumn: s.opts.LockedUntilColumn, Live: s.opts.Live, Order: s.opts.Order,
		Alias:   string(table.SQLAlias),
		Columns: func([]string) []string { return columns }, ColumnsFrom: fmt.Sprintf("a field of the model %v", table.Type),
		ScanClaimed: s.scanClaimed, Logger: s.opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	if err := checkSession(ctx, h, "NewWorkRows"); err != nil {
		return nil, err
	}
	return s, nil
}

// claimed is one row of the claim statement's read-back: the number of
// candidates, whether it holds a stamped row, its id and the row.
type claimed[K comparable, R any] struct {
	bun.BaseModel `bun:"table:baton_claimed,alias:baton_claimed"`

	Selected int64 `bun:"baton_selected"`
	Stamped  bool  `bun:"baton_stamped"`
	ID       K     `bun:"baton_id"`
	Row      R     `bun:"embed:"`
}

// scanClaimed reads a claim's rows into R with bun.
func (s *WorkRows[K, R]) scanClaimed(ctx context.Context, rows pgsql.Rows) (int64, []workrow.Claimed[K, R], error) {
	var read []claimed[K, R]
	if err := s.db.NewRaw("").DB().ScanRows(ctx, rows.(sqlRows).Rows, &read); err != nil {
		return 0, nil, err
	}
	var (
		out      []workrow.Claimed[K, R]
		selected int64
	)
	for _, r := range read {
		selected = r.Selected
		if r.Stamped {
			out = append(out, workrow.Claimed[K, R]{ID: r.ID, Row: r.Row})
		}
	}
	return selected, out, nil
}

// ClaimQuery is one claim written with bun's query builder. The statement
// reads the table, and the stamped rows back, under the model's alias:
// refer to columns unqualified or as ?TableAlias.column.
type ClaimQuery struct {
	// LockID is stamped on every claimed row (workrow.NewLockID()).
	LockID workrow.LockID
	// Now is the claimer's current time: a row is free when its lock
	// expiry is NULL or not after Now.
	Now time.Time
	// LeaseUntil is stamped as the claimed rows' lock expiry; after Now.
	LeaseUntil time.Time
	// BatchSize is the most rows to claim, 1 to workrow.MaxBatchSize.
	BatchSize int
	// Where adds the eligibility predicate, for example
	//
	//	func(q bun.QueryBuilder) bun.QueryBuilder {
	//		return q.Where("completed_at IS NULL").Where("attempts < ?", 8)
	//	}
	//
	// Required. It is applied twice, to the candidate read and to the
	// stamping UPDATE, which restates it; so it must be a pure predicate.
	// The store adds the live-row filter and "lock free or expired"; it
	// adds no soft-delete filter of the model's.
	Where func(q bun.QueryBuilder) bun.QueryBuilder
	// Order is the queue order, for example
	// func(q *bun.SelectQuery) *bun.SelectQuery { return q.Order("created_at") }.
	// It is applied to the candidate read and to the read-back; the store
	// appends the id. nil uses WorkRowsOptions.Order.
	Order func(q *bun.SelectQuery) *bun.SelectQuery
	// Set adds the claim's own sets to the stamping UPDATE, for example
	// func(q *bun.UpdateQuery) *bun.UpdateQuery { return q.Set("attempts = attempts + 1") }.
	// It must not set the id or the lock columns. nil sets nothing more.
	Set func(q *bun.UpdateQuery) *bun.UpdateQuery
}

// ClaimWith claims with bun expressions (see ClaimQuery), in the one claim
// statement, and returns exactly the rows it stamped, as they are
// afterwards, in queue order. An invalid claim is an error wrapping
// workrow.ErrInvalidSpec and sends nothing.
func (s *WorkRows[K, R]) ClaimWith(ctx context.Context, c ClaimQuery) ([]workrow.Claimed[K, R], error) {
	// The lock, times and batch size follow the core rules, checked by
	// core: a probe spec carrying them, with the live filter standing in
	// for the predicate (which is bun's here).
	probe := workrow.ClaimSpec{LockID: c.LockID, Now: c.Now, LeaseUntil: c.LeaseUntil, BatchSize: c.BatchSize, Eligible: s.opts.Live}
	if err := probe.Validate(); err != nil {
		return nil, err
	}
	if c.Where == nil {
		return nil, fmt.Errorf("%w: ClaimQuery.Where is nil; a claim must say which rows are due, or it would take finished rows again", workrow.ErrInvalidSpec)
	}
	var parts pgsql.ClaimParts
	where, err := s.selectPart("WHERE", func(q *bun.SelectQuery) *bun.SelectQuery { return q.ApplyQueryBuilder(c.Where) })
	if err != nil {
		return nil, fmt.Errorf("%w: ClaimQuery.Where: %w", workrow.ErrInvalidSpec, err)
	}
	parts.Where = "(" + where + ")" // whole, whatever its ORs
	if c.Order != nil {
		if parts.Order, err = s.selectPart("ORDER BY", c.Order); err != nil {
			return nil, fmt.Errorf("%w: ClaimQuery.Order: %w", workrow.ErrInvalidSpec, err)
		}
	}
	if c.Set != nil {
		set, err := s.setPart(c.Set)
		if err != nil {
			return nil, fmt.Errorf("%w: ClaimQuery.Set: %w", workrow.ErrInvalidSpec, err)
		}
		parts.Sets = []string{set}
	}
	return s.WorkRows.ClaimWith(ctx, c.LockID, c.Now, c.LeaseUntil, c.BatchSize, parts)
}

// FinalizeWith ends one row's attempt with bun sets: if the row still
// carries lock, set applies the application's changes (the completion
// marker, the error), the lock id is cleared and the lock expiry becomes
// visibleAfter (NULL when zero). It reports whether the row was still
// owned; when it was not, nothing changed. set may be nil, and must not
// set the id or the lock columns.
func (s *WorkRows[K, R]) FinalizeWith(ctx context.Context, lock workrow.LockID, id K, visibleAfter time.Time,
	set func(q *bun.UpdateQuery) *bun.UpdateQuery) (bool, error) {
	if err := workrow.CheckFinalize(lock, []workrow.Final[K]{{ID: id}}); err != nil {
		return false, err
	}
	var sets []string
	if set != nil {
		r, err := s.setPart(set)
		if err != nil {
			return false, fmt.Errorf("%w: FinalizeWith's set: %w", workrow.ErrInvalidSpec, err)
		}
		sets = []string{r}
	}
	return s.WorkRows.FinalizeWith(ctx, lock, id, visibleAfter, sets)
}

// selectPart renders what apply adds to a query of the model, as a
// WHERE condition or ORDER BY keys (by marks "WHERE" or "ORDER BY"): bun
// writes the query with it and without it, both ending in a marker, and
// the difference is the part, its values quoted by bun.
func (s *WorkRows[K, R]) selectPart(by string, apply func(*bun.SelectQuery) *bun.SelectQuery) (string, error) {
	base := func() *bun.SelectQuery {
		q := s.db.NewSelect().Model((*R)(nil)).ModelTableExpr("baton AS ?TableAlias").ColumnExpr("1")
		if s.table.SoftDeleteField != nil {
			q = q.WhereAllWithDeleted()
		}
		return q
	}
	end, marker, joiner := func(q *bun.SelectQuery) *bun.SelectQuery { return q.Where("baton_end") }, "(baton_end)", " AND "
	if by == "ORDER BY" {
		end, marker, joiner = func(q *bun.SelectQuery) *bun.SelectQuery { return q.OrderExpr("baton_end") }, "baton_end", ", "
	}
	return s.part(end(base()), end(apply(base())), marker, joiner, false)
}

// setPart renders the assignments set adds to an UPDATE of the model.
func (s *WorkRows[K, R]) setPart(set func(*bun.UpdateQuery) *bun.UpdateQuery) (string, error) {
	base := func() *bun.UpdateQuery {
		return s.db.NewUpdate().Model((*R)(nil)).ModelTableExpr("baton AS ?TableAlias").Set("baton_end = 1")
	}
	end := func(q *bun.UpdateQuery) *bun.UpdateQuery { return q.Where("baton") }
	return s.part(end(base()), end(set(base())), "baton_end = 1", ", ", true)
}

// part is what with holds where without holds nothing: next to marker
// (before it, or after it), joined to it by joiner. Anything with holds
// elsewhere (a LIMIT, a filter) means the function added more than its
// part, and is refused.
func (s *WorkRows[K, R]) part(without, with schema.QueryAppender, marker, joiner string, after bool) (string, error) {
	gen := s.db.NewRaw("").DB().QueryGen()
	a, err := without.AppendQuery(gen, nil)
	if err != nil {
		return "", err
	}
	b, err := with.AppendQuery(gen, nil)
	if err != nil {
		return "", err
	}
	i := strings.Index(string(a), marker)
	head, tail := string(a[:i]), joiner+string(a[i:])
	if after {
		head, tail = string(a[:i+len(marker)])+joiner, string(a[i+len(marker):])
	}
	if len(b) > len(head)+len(tail) && strings.HasPrefix(string(b), head) && strings.HasSuffix(string(b), tail) {
		return string(b[len(head) : len(b)-len(tail)]), nil
	}
	return "", fmt.Errorf("it must add its own part to the statement and nothing else: %s", b)
}

// ClaimIndex returns the claim index of the work table described by R and
// opts, as a bun CREATE INDEX IF NOT EXISTS query to run in a migration:
// the Order columns, then the id, partial over the Live rows,
//
//	q, err := bunstore.ClaimIndex[Delivery](db, opts)
//	...
//	_, err = q.Exec(ctx)
//
// named "<table>_claim" (set another with q.Index). Because it holds only
// live rows, a claim stays as fast with a million finished rows as with
// none. Keep the lock columns out of it and out of every other index of
// the table: claims, renewals and releases change only them, and stay HOT
// updates (no index entry written) as long as no index mentions them.
func ClaimIndex[R any](db bun.IDB, opts WorkRowsOptions) (*bun.CreateIndexQuery, error) {
	if db == nil {
		return nil, fmt.Errorf("baton/bunstore: ClaimIndex: the database handle is nil")
	}
	table, err := modelTable[R](db, "ClaimIndex")
	if err != nil {
		return nil, err
	}
	opts = opts.withModel(table)
	// The store's own checks of the options, with the same messages.
	check := pgsql.WorkRowsOptions[struct{}, R]{Adapter: adapter, Schema: opts.Schema, Table: opts.Table, IDColumn: opts.IDColumn,
		LockIDColumn: opts.LockIDColumn, LockedUntilColumn: opts.LockedUntilColumn, Live: opts.Live, Order: opts.Order}
	if err := check.WithDefaults().Validate(); err != nil {
		return nil, err
	}
	return claimIndexQuery[R](db, opts)
}

func claimIndexQuery[R any](db bun.IDB, opts WorkRowsOptions) (*bun.CreateIndexQuery, error) {
	ix := opts.index()
	pred, err := ix.Predicate()
	if err != nil {
		return nil, fmt.Errorf("baton/bunstore: WorkRowsOptions.Live: %w", err)
	}
	q := db.NewCreateIndex().Model((*R)(nil)).ModelTableExpr("?", bun.Safe(pgsql.Qualified(opts.Schema, opts.Table))).
		Index(opts.Table + "_claim").IfNotExists()
	for _, k := range ix.Keys() {
		q = q.ColumnExpr("?", bun.Safe(k))
	}
	return q.Where("?", bun.Safe(pred)), nil
}

// ClaimIndex returns this store's claim index as a bun CREATE INDEX query;
// see the package-level ClaimIndex.
func (s *WorkRows[K, R]) ClaimIndex() *bun.CreateIndexQuery {
	q, err := claimIndexQuery[R](s.db, s.opts)
	if err != nil { // cannot happen: the options were validated by NewWorkRows
		return s.db.NewCreateIndex().Err(err)
	}
	return q
}
