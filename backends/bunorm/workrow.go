package bunorm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/baton-go/baton/core/workrow"
)

// Default column names of a work table: LockColumns' columns, and the id.
const (
	DefaultWorkRowIDColumn          = "id"
	DefaultWorkRowLockIDColumn      = "lock_id"
	DefaultWorkRowLockedUntilColumn = "locked_until"
)

// claimAttempts bounds how often one claim sends its statement: again when
// it selected candidates but stamped none because concurrent claimers took
// them all first, or when a serialization failure or deadlock rolled it
// back.
const claimAttempts = 4

// WorkRowsOptions describe an application's work table to WorkRows. The
// table is the bun model R's unless Table says otherwise.
type WorkRowsOptions struct {
	// Schema holds the table. "" uses the connection's search_path.
	Schema string
	// Table is the work table (default: the model's table, from its
	// bun:"table:..." tag or bun's naming of the type).
	Table string
	// IDColumn is the primary key (default: the model's single primary
	// key column, else "id").
	IDColumn string
	// LockIDColumn and LockedUntilColumn are the lock columns (default
	// "lock_id" and "locked_until": embed LockColumns in the model).
	LockIDColumn      string
	LockedUntilColumn string
	// Live is the live-row filter, for example
	// workrow.IsNull("completed_at"): the rows that may still need work.
	// Required. It is the claim index's predicate (ClaimIndex) and every
	// claim adds it to its own predicate, so the planner can always use the
	// partial index. It must not mention the lock columns.
	Live workrow.Cond
	// Order is the queue order used when a claim has none, and the claim
	// index's key before the id.
	Order []workrow.Order
	// Logger receives diagnostics. nil discards them.
	Logger *slog.Logger
}

func (o *WorkRowsOptions) validate(table *schema.Table) error {
	if o.Table == "" {
		o.Table = table.Name
	}
	if o.IDColumn == "" {
		o.IDColumn = DefaultWorkRowIDColumn
		if len(table.PKs) == 1 {
			o.IDColumn = table.PKs[0].Name
		}
	}
	if o.LockIDColumn == "" {
		o.LockIDColumn = DefaultWorkRowLockIDColumn
	}
	if o.LockedUntilColumn == "" {
		o.LockedUntilColumn = DefaultWorkRowLockedUntilColumn
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("baton/bunorm: WorkRowsOptions.%s", fmt.Sprintf(format, args...))
	}
	if o.Schema != "" {
		if err := validateSchemaName("WorkRowsOptions.Schema", o.Schema); err != nil {
			return err
		}
	}
	for _, f := range []struct{ field, name string }{{"Table", o.Table}, {"IDColumn", o.IDColumn},
		{"LockIDColumn", o.LockIDColumn}, {"LockedUntilColumn", o.LockedUntilColumn}} {
		if p := identifierProblem(f.name); p != "" {
			return bad("%s %q: %s", f.field, f.name, p)
		}
	}
	if o.LockIDColumn == o.LockedUntilColumn || o.IDColumn == o.LockIDColumn || o.IDColumn == o.LockedUntilColumn {
		return bad("IDColumn, LockIDColumn and LockedUntilColumn must be three different columns")
	}
	if o.Live.IsZero() {
		return bad("Live is empty; name the live-row filter, for example workrow.IsNull(\"completed_at\"): the claim index covers only these rows")
	}
	probe := workrow.ClaimSpec{LockID: workrow.LockID{1}, Now: time.Unix(1, 0), LeaseUntil: time.Unix(2, 0), BatchSize: 1,
		Eligible: o.Live, Order: o.Order}
	if err := probe.Validate(); err != nil {
		return bad("Live or Order: %v", err)
	}
	for _, c := range o.Live.Columns() {
		if c == o.LockIDColumn || c == o.LockedUntilColumn {
			return bad("Live mentions the lock column %q; keep lock columns out of every index predicate, or claims and renewals cannot be HOT updates", c)
		}
	}
	for i, ord := range o.Order {
		if ord.Column == o.IDColumn || ord.Column == o.LockIDColumn || ord.Column == o.LockedUntilColumn {
			return bad("Order[%d] is %q; order by the application's own columns (the id is appended as the last key)", i, ord.Column)
		}
	}
	return nil
}

// WorkRows is the workrow.Store of one application table, on a bun.IDB, with
// R the table's bun model and K its id's type. Create it with NewWorkRows.
//
// It serves two kinds of caller. workrow.Worker (and anything else holding
// a workrow.Store) claims with core's condition trees (workrow.Cond), which
// WorkRows renders through bun: identifiers quoted by bun, values as bun
// placeholders. Code written with bun claims with ClaimWith, whose
// predicate, order and claim-time sets are bun query-builder functions.
// Both run the same single statement, the PostgreSQL adapter's: read the
// first eligible, free candidates (skipping rows another statement is
// writing), stamp them in a conditional UPDATE that restates the whole
// predicate and the lock check, and read back exactly the rows stamped.
//
// Finalize, renew and release match the id and the lock id and report
// whether the row was still owned. Every method is one statement: nothing
// is held while the work happens. The statements expect READ COMMITTED.
type WorkRows[K comparable, R any] struct {
	db   bun.IDB
	opts WorkRowsOptions

	table                schema.QueryAppender // the table, as "? AS ?TableAlias" takes it
	id, lockID, lockedTo schema.Name
	columns              []string // R's columns, read back after a claim
	live                 func(bun.QueryBuilder) bun.QueryBuilder
	order                func(*bun.SelectQuery) *bun.SelectQuery
}

var _ workrow.Store[int64, struct{}] = (*WorkRows[int64, struct{}])(nil)

// NewWorkRows returns a WorkRows over db for the model R, or an error
// naming the first invalid option. It asks the database one thing,
// standard_conforming_strings, and refuses a session without it
// (ErrNonStandardStrings).
func NewWorkRows[K comparable, R any](ctx context.Context, db bun.IDB, opts WorkRowsOptions) (*WorkRows[K, R], error) {
	if db == nil {
		return nil, errors.New("baton/bunorm: NewWorkRows: the database handle is nil")
	}
	typ := reflect.TypeFor[R]()
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("baton/bunorm: NewWorkRows: the row type %v is not a struct; it must be the table's bun model", typ)
	}
	table := db.Dialect().Tables().Get(typ)
	if err := opts.validate(table); err != nil {
		return nil, err
	}
	var columns []string
	for _, f := range table.Fields {
		columns = append(columns, f.Name)
	}
	if len(columns) == 0 {
		return nil, fmt.Errorf("baton/bunorm: NewWorkRows: the model %v maps no column", typ)
	}
	live, err := condFilter(opts.Live, "?TableAlias.", time.Time{})
	if err != nil {
		return nil, fmt.Errorf("baton/bunorm: WorkRowsOptions.Live: %w", err)
	}
	if err := checkSession(ctx, db, "NewWorkRows"); err != nil {
		return nil, err
	}
	return &WorkRows[K, R]{
		db: db, opts: opts,
		table:    tableName(opts.Schema, opts.Table),
		id:       bun.Name(opts.IDColumn),
		lockID:   bun.Name(opts.LockIDColumn),
		lockedTo: bun.Name(opts.LockedUntilColumn),
		columns:  columns,
		live:     live,
		order:    orderBy(opts.Order),
	}, nil
}

// ClaimQuery is one claim written with bun's query builder. The statement
// reads the table under the model's alias: refer to columns unqualified or
// as ?TableAlias.column (the read-back of the stamped rows uses another
// alias, so a hard-coded one breaks there).
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
	// The store adds the live-row filter and "lock free or expired".
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

// ClaimWith claims with bun expressions (see ClaimQuery), in one statement,
// and returns exactly the rows it stamped, as they are afterwards, in queue
// order. An invalid claim is an error wrapping workrow.ErrInvalidSpec and
// sends nothing.
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
	order := c.Order
	if order == nil {
		order = s.order
	}
	return s.claim(ctx, c.LockID, c.Now, c.LeaseUntil, c.BatchSize, c.Where, order, c.Set)
}

// Claim implements workrow.Store: the spec's condition trees rendered
// through bun, then the same statement as ClaimWith.
func (s *WorkRows[K, R]) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[K, R], error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkSets("ClaimSpec.OnClaim", spec.OnClaim); err != nil {
		return nil, err
	}
	where, err := condFilter(spec.Eligible, "?TableAlias.", spec.Now)
	if err != nil {
		return nil, fmt.Errorf("%w: ClaimSpec.Eligible: %w", workrow.ErrInvalidSpec, err)
	}
	order := s.order
	if len(spec.Order) > 0 {
		order = orderBy(spec.Order)
	}
	sets := make([]setExpr, len(spec.OnClaim))
	for i, st := range spec.OnClaim {
		if sets[i], err = renderSet(st, spec.Now); err != nil {
			return nil, fmt.Errorf("%w: ClaimSpec.OnClaim: %w", workrow.ErrInvalidSpec, err)
		}
	}
	set := func(q *bun.UpdateQuery) *bun.UpdateQuery {
		for _, st := range sets {
			q = q.Set(st.query, st.args...)
		}
		return q
	}
	return s.claim(ctx, spec.LockID, spec.Now, spec.LeaseUntil, spec.BatchSize, where, order, set)
}

// claimed is one row of the claim statement's read-back: the number of
// candidates, the id (NULL when nothing was stamped) and the row.
type claimed[K comparable, R any] struct {
	bun.BaseModel `bun:"table:baton_claimed,alias:baton_claimed"`

	Selected int64 `bun:"baton_selected_count"`
	Stamped  bool  `bun:"baton_stamped"`
	ID       K     `bun:"baton_id"`
	Row      R     `bun:"embed:"`
}

// claim builds and sends the claim statement:
//
//	WITH baton_candidate AS (
//	    SELECT id FROM table AS alias WHERE live AND where AND lock free
//	    ORDER BY order, id LIMIT n FOR NO KEY UPDATE OF alias SKIP LOCKED
//	), baton_stamped AS (
//	    UPDATE table AS alias SET lock_id = L, locked_until = T, sets...
//	    FROM baton_candidate WHERE id = candidate AND live AND where AND lock free
//	    RETURNING alias.*
//	)
//	SELECT count, stamped, id, columns FROM (SELECT count(*) FROM baton_candidate)
//	LEFT JOIN baton_stamped ON true ORDER BY order, id
//
// The candidate read holds its row locks only while the statement runs;
// the UPDATE re-checks everything on the latest version of each row, so a
// row another claimer took meanwhile is skipped, never taken twice.
func (s *WorkRows[K, R]) claim(ctx context.Context, lock workrow.LockID, now, until time.Time, batch int,
	where func(bun.QueryBuilder) bun.QueryBuilder, order func(*bun.SelectQuery) *bun.SelectQuery,
	set func(*bun.UpdateQuery) *bun.UpdateQuery) ([]workrow.Claimed[K, R], error) {
	const free = "(?TableAlias.? IS NULL OR ?TableAlias.? <= ?)"
	candidate := s.db.NewSelect().Model((*R)(nil)).ModelTableExpr("? AS ?TableAlias", s.table).
		ColumnExpr("?TableAlias.? AS baton_candidate_id", s.id).
		ApplyQueryBuilder(s.live).ApplyQueryBuilder(where).
		Where(free, s.lockedTo, s.lockedTo, now).
		Apply(order).OrderExpr("?TableAlias.?", s.id).
		Limit(int64(batch)).
		For("NO KEY UPDATE OF ?TableAlias SKIP LOCKED")
	stamp := s.db.NewUpdate().Model((*R)(nil)).ModelTableExpr("? AS ?TableAlias", s.table).
		Set("? = ?", s.lockID, lock.String()).
		Set("? = ?", s.lockedTo, until)
	if set != nil {
		stamp = stamp.Apply(set)
	}
	stamp = stamp.TableExpr("baton_candidate").
		Where("?TableAlias.? = baton_candidate.baton_candidate_id", s.id).
		ApplyQueryBuilder(s.live).ApplyQueryBuilder(where).
		Where(free, s.lockedTo, s.lockedTo, now).
		Returning("?TableAlias.*")

	for attempt := 1; ; attempt++ {
		var rows []claimed[K, R]
		q := s.db.NewSelect().
			With("baton_candidate", candidate).
			With("baton_stamped", stamp).
			Model(&rows).
			ModelTableExpr("(SELECT count(*) AS n FROM baton_candidate) AS baton_n LEFT JOIN baton_stamped AS ?TableAlias ON true").
			ColumnExpr("baton_n.n AS baton_selected_count").
			ColumnExpr("?TableAlias.? IS NOT NULL AS baton_stamped", s.id).
			ColumnExpr("?TableAlias.? AS baton_id", s.id)
		for _, c := range s.columns {
			q = q.ColumnExpr("?TableAlias.?", bun.Name(c))
		}
		q = q.Apply(order).OrderExpr("?TableAlias.?", s.id)
		err := q.Scan(ctx)
		if err != nil {
			if isConflict(err) && attempt < claimAttempts && ctx.Err() == nil {
				continue // rolled back whole: safe to send again
			}
			return nil, s.mapErr("claim", err)
		}
		var out []workrow.Claimed[K, R]
		var selected int64
		for _, r := range rows {
			selected = r.Selected
			if r.Stamped {
				out = append(out, workrow.Claimed[K, R]{ID: r.ID, Row: r.Row})
			}
		}
		if len(out) > 0 || selected == 0 || attempt == claimAttempts {
			return out, nil
		}
		// Concurrent claimers stamped every candidate first: look again
		// with a fresh snapshot rather than report an empty queue.
	}
}

// checkSets refuses core sets that would touch the id or the lock columns.
func (s *WorkRows[K, R]) checkSets(where string, sets []workrow.Set) error {
	for i, set := range sets {
		switch set.Column() {
		case s.opts.IDColumn, s.opts.LockIDColumn, s.opts.LockedUntilColumn:
			return fmt.Errorf("%w: %s[%d] sets %q, which the store manages", workrow.ErrInvalidSpec, where, i, set.Column())
		}
	}
	return nil
}

// update starts an UPDATE of the table under the model's alias.
func (s *WorkRows[K, R]) update() *bun.UpdateQuery {
	return s.db.NewUpdate().Model((*R)(nil)).ModelTableExpr("? AS ?TableAlias", s.table)
}

// owned sends a guarded UPDATE (id AND lock id) and reports, per id,
// whether the row was still owned, from the ids it returned.
func (s *WorkRows[K, R]) owned(ctx context.Context, op string, q *bun.UpdateQuery, lock workrow.LockID, ids []K) ([]bool, error) {
	var got []K
	err := q.Where("?TableAlias.? = ?", s.lockID, lock.String()).
		Where("?TableAlias.? IN (?)", s.id, bun.In(ids)).
		Returning("?TableAlias.?", s.id).
		Scan(ctx, &got)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	set := make(map[K]bool, len(got))
	for _, id := range got {
		set[id] = true
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		out[i] = set[id]
	}
	return out, nil
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
	q := s.update().Set("? = NULL", s.lockID).Set("? = ?", s.lockedTo, visibility(visibleAfter))
	if set != nil {
		q = q.Apply(set)
	}
	owned, err := s.owned(ctx, "finalize", q, lock, []K{id})
	if err != nil {
		return false, err
	}
	return owned[0], nil
}

// visibility is the lock expiry a finalize writes: NULL for "at once".
func visibility(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// Finalize ends one row's attempt with core sets; see FinalizeMany.
func (s *WorkRows[K, R]) Finalize(ctx context.Context, lock workrow.LockID, f workrow.Final[K]) (bool, error) {
	owned, err := s.FinalizeMany(ctx, lock, []workrow.Final[K]{f})
	if err != nil {
		return false, err
	}
	return owned[0], nil
}

// FinalizeMany implements workrow.Store in one statement, whatever the
// number of rows: each column any row sets becomes a CASE over the id, with
// the row's value (or addition, or copied column) in its branch and the
// column itself for the rows that leave it alone; the lock expiry is the
// row's VisibleAfter. Each row is matched by id and lock id.
func (s *WorkRows[K, R]) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[K]) ([]bool, error) {
	if err := workrow.CheckFinalize(lock, finals); err != nil {
		return nil, err
	}
	for i, f := range finals {
		if err := s.checkSets(fmt.Sprintf("Final[%d].Set", i), f.Set); err != nil {
			return nil, err
		}
	}
	if len(finals) == 0 {
		return nil, nil
	}
	ids := make([]K, len(finals))
	visible := &caseExpr{}
	byColumn := map[string]*caseExpr{}
	for i, f := range finals {
		ids[i] = f.ID
		visible.when(f.ID, "?", visibility(f.VisibleAfter))
		for _, st := range f.Set {
			r, err := renderSetValue(st, time.Time{})
			if err != nil {
				return nil, fmt.Errorf("%w: Final[%d].Set: %w", workrow.ErrInvalidSpec, i, err)
			}
			c := byColumn[st.Column()]
			if c == nil {
				c = &caseExpr{}
				byColumn[st.Column()] = c
			}
			c.when(f.ID, r.query, r.args...)
		}
	}
	q := visible.apply(s.update().Set("? = NULL", s.lockID), s.lockedTo, s.id)
	// Columns in name order, so equal shapes give equal statements.
	for _, col := range slices.Sorted(func(yield func(string) bool) {
		for c := range byColumn {
			if !yield(c) {
				return
			}
		}
	}) {
		q = byColumn[col].apply(q, bun.Name(col), s.id)
	}
	return s.owned(ctx, "finalize", q, lock, ids)
}

// caseExpr builds "column = CASE alias.id WHEN id THEN value ... ELSE
// alias.column END": the ELSE is never taken (every row the statement
// updates has a branch) but gives the CASE the column's type, so a value
// written as an untyped literal is read as that type.
type caseExpr struct {
	b    strings.Builder
	args []any
}

func (c *caseExpr) when(id any, query string, args ...any) {
	c.b.WriteString(" WHEN ? THEN ")
	c.b.WriteString(query)
	c.args = append(append(c.args, id), args...)
}

func (c *caseExpr) apply(q *bun.UpdateQuery, column, id schema.Name) *bun.UpdateQuery {
	args := append([]any{column, id}, c.args...)
	return q.Set("? = CASE ?TableAlias.?"+c.b.String()+" ELSE ?TableAlias.? END", append(args, column)...)
}

// RenewMany implements workrow.Store in one statement.
func (s *WorkRows[K, R]) RenewMany(ctx context.Context, lock workrow.LockID, until time.Time, ids []K) ([]bool, error) {
	if err := workrow.CheckRenew(lock, until, ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return s.owned(ctx, "renew", s.update().Set("? = ?", s.lockedTo, until), lock, ids)
}

// Renew extends the lease of one row if it still carries lock.
func (s *WorkRows[K, R]) Renew(ctx context.Context, lock workrow.LockID, id K, until time.Time) (bool, error) {
	owned, err := s.RenewMany(ctx, lock, until, []K{id})
	if err != nil {
		return false, err
	}
	return owned[0], nil
}

// ReleaseMany implements workrow.Store in one statement: the rows still
// carrying lock get their lock columns cleared, claimable at once.
func (s *WorkRows[K, R]) ReleaseMany(ctx context.Context, lock workrow.LockID, ids []K) ([]bool, error) {
	if err := workrow.CheckRelease(lock, ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return s.owned(ctx, "release", s.update().Set("? = NULL", s.lockID).Set("? = NULL", s.lockedTo), lock, ids)
}

// Release hands one row back if it still carries lock.
func (s *WorkRows[K, R]) Release(ctx context.Context, lock workrow.LockID, id K) (bool, error) {
	owned, err := s.ReleaseMany(ctx, lock, []K{id})
	if err != nil {
		return false, err
	}
	return owned[0], nil
}

func (s *WorkRows[K, R]) mapErr(op string, err error) error {
	return mapError(areaWorkRow, fmt.Sprintf("%s of table %s", op, s.opts.Table), err)
}
