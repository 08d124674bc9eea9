package pgsql

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/baton-go/baton/core/workrow"
)

// Default column names of a work table.
const (
	DefaultWorkRowIDColumn          = "id"
	DefaultWorkRowLockIDColumn      = "lock_id"
	DefaultWorkRowLockedUntilColumn = "locked_until"
)

// claimAttempts bounds how often one Claim sends its statement: again when
// it selected candidates but stamped none because concurrent claimers took
// them all first, or when it was rolled back by a serialization failure or
// a deadlock. A finalize, renewal or release is sent again as often after
// such a rollback (resend).
const claimAttempts = 4

// WorkRowsOptions configure WorkRows: an adapter's WorkRowsOptions, and how
// the adapter reads rows into R.
type WorkRowsOptions[K comparable, R any] struct {
	Adapter                                   Adapter
	Schema, Table                             string
	IDColumn, LockIDColumn, LockedUntilColumn string
	Live                                      workrow.Cond
	Order                                     []workrow.Order
	LockFreeCandidates                        bool
	// Alias names the table in every statement, and the stamped rows read
	// back: a predicate or an order written over it fits each place.
	Alias string
	// Columns picks the columns read into R from the table's, given in
	// table order; ColumnsFrom names where they come from, for errors.
	Columns     func(table []string) []string
	ColumnsFrom string
	// ScanClaimed reads the claim statement's rows: baton_selected (the
	// candidates), baton_stamped, baton_id, then the Columns; a single row
	// with baton_stamped false when nothing was stamped.
	ScanClaimed func(ctx context.Context, rows Rows) (selected int64, claimed []workrow.Claimed[K, R], err error)
	Logger      *slog.Logger
}

// WorkRowsStats count what claims met. Short claims, statements that
// stamped fewer rows than they selected, measure contention: concurrent
// claimers that picked the same candidates. Conflicts are statements
// PostgreSQL rolled back whole, and which were sent again: serialization
// failures above READ COMMITTED, and deadlocks between lock-free claims
// and finalizes.
type WorkRowsStats struct {
	Claims      uint64 // claim statements sent
	Selected    uint64 // candidate rows those statements selected
	Stamped     uint64 // rows they stamped
	ShortClaims uint64 // statements that stamped fewer rows than they selected
	Conflicts   uint64 // statements rolled back by a serialization failure or deadlock, of every kind
}

// WorkRows is the workrow.Store of one application table. K is the id's
// type, R the row's.
//
// Every method is one statement, so one transaction of its own: a claim,
// finalize, renew or release holds its row locks only while it runs, and
// nothing is held while the work happens. The statements expect READ
// COMMITTED (PostgreSQL's default): under REPEATABLE READ or SERIALIZABLE,
// a claim that meets a concurrent claim on the same row fails with a
// serialization error instead of skipping the row (see docs/work-rows.md).
type WorkRows[K comparable, R any] struct {
	db DB
	c  WorkRowsOptions[K, R]

	table                string // quoted, schema-qualified when Schema is set
	id, lockID, lockedTo string // quoted
	live                 string // the live filter over the alias, literal

	infoMu sync.Mutex
	info   *workTableInfo

	claims, selected, stamped, short, conflicts atomic.Uint64
}

// workTableInfo is what WorkRows reads from the catalog on first use.
type workTableInfo struct {
	types   map[string]workColumn
	selects string // the columns read into R, over the alias
}

type workColumn struct {
	typ     string // format_type
	isArray bool
}

// NewWorkRows returns a WorkRows over db, or an error naming the first
// invalid option. It sends nothing; the first call reads the table's
// columns from the catalog (Check does so at once).
func NewWorkRows[K comparable, R any](db DB, c WorkRowsOptions[K, R]) (*WorkRows[K, R], error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	live, err := literalCond(c.Alias, c.Live)
	if err != nil {
		return nil, c.Adapter.wrap(workrow.ErrInvalidConfig, "WorkRowsOptions.Live", err)
	}
	return &WorkRows[K, R]{
		db: db, c: c,
		table:    qualified(c.Schema, c.Table),
		id:       quote(c.IDColumn),
		lockID:   quote(c.LockIDColumn),
		lockedTo: quote(c.LockedUntilColumn),
		live:     live,
	}, nil
}

// WithDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c WorkRowsOptions[K, R]) WithDefaults() WorkRowsOptions[K, R] {
	if c.IDColumn == "" {
		c.IDColumn = DefaultWorkRowIDColumn
	}
	if c.LockIDColumn == "" {
		c.LockIDColumn = DefaultWorkRowLockIDColumn
	}
	if c.LockedUntilColumn == "" {
		c.LockedUntilColumn = DefaultWorkRowLockedUntilColumn
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks options that have their defaults, naming the first
// invalid one.
func (c WorkRowsOptions[K, R]) Validate() error {
	bad := func(field, format string, args ...any) error {
		return c.Adapter.invalid(workrow.ErrInvalidConfig, "WorkRowsOptions."+field, format, args...)
	}
	if c.Schema != "" {
		if err := ValidateSchemaName("WorkRowsOptions.Schema", c.Schema); err != nil {
			return err
		}
	}
	for _, f := range []struct{ field, name string }{{"Table", c.Table}, {"IDColumn", c.IDColumn},
		{"LockIDColumn", c.LockIDColumn}, {"LockedUntilColumn", c.LockedUntilColumn}} {
		if p := IdentifierProblem(f.name); p != "" {
			return bad(f.field, "%q: %s", f.name, p)
		}
	}
	if c.LockIDColumn == c.LockedUntilColumn || c.IDColumn == c.LockIDColumn || c.IDColumn == c.LockedUntilColumn {
		return bad("IDColumn", "(%q), LockIDColumn (%q) and LockedUntilColumn (%q) must be three different columns",
			c.IDColumn, c.LockIDColumn, c.LockedUntilColumn)
	}
	if c.Live.IsZero() {
		return bad("Live", "is empty; name the live-row filter, for example workrow.IsNull(\"completed_at\"): the claim index covers only these rows")
	}
	probe := workrow.ClaimSpec{LockID: workrow.LockID{1}, Now: time.Unix(1, 0), LeaseUntil: time.Unix(2, 0), BatchSize: 1,
		Eligible: c.Live, Order: c.Order}
	if err := probe.Validate(); err != nil {
		return c.Adapter.wrap(workrow.ErrInvalidConfig, "WorkRowsOptions.Live or Order", err)
	}
	for _, col := range c.Live.Columns() {
		if col == c.LockIDColumn || col == c.LockedUntilColumn {
			return bad("Live", "mentions the lock column %q; keep lock columns out of every index predicate, or claims and renewals cannot be HOT updates", col)
		}
	}
	for i, ord := range c.Order {
		if ord.Column == c.IDColumn || ord.Column == c.LockIDColumn || ord.Column == c.LockedUntilColumn {
			return bad(fmt.Sprintf("Order[%d]", i), "is %q; order by the application's own columns (the id is appended as the last key)", ord.Column)
		}
	}
	return nil
}

// Stats returns the claim counters since the store was created.
func (s *WorkRows[K, R]) Stats() WorkRowsStats {
	return WorkRowsStats{
		Claims: s.claims.Load(), Selected: s.selected.Load(), Stamped: s.stamped.Load(), ShortClaims: s.short.Load(),
		Conflicts: s.conflicts.Load(),
	}
}

// Index describes the claim index this store's claims ride: the Order
// columns then the id, partial over Live.
func (s *WorkRows[K, R]) Index() ClaimIndex {
	return ClaimIndex{
		Adapter: s.c.Adapter, Schema: s.c.Schema, Table: s.c.Table, IDColumn: s.c.IDColumn, Order: s.c.Order, Live: s.c.Live,
		LockColumns: []string{s.c.LockIDColumn, s.c.LockedUntilColumn},
	}
}

// Check reads the table's columns, then checks its claim index (see
// ClaimIndex.Check). It suits a readiness check.
func (s *WorkRows[K, R]) Check(ctx context.Context) error {
	if _, err := s.describe(ctx); err != nil {
		return err
	}
	return s.Index().Check(ctx, s.db)
}

// describe reads the table's columns once.
func (s *WorkRows[K, R]) describe(ctx context.Context) (*workTableInfo, error) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	if s.info != nil {
		return s.info, nil
	}
	info := &workTableInfo{types: map[string]workColumn{}}
	var all []string
	rows, err := s.db.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory = 'A'
FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, s.table)
	err = each(rows, err, func(r Rows) error {
		var name string
		var c workColumn
		if err := r.Scan(&name, &c.typ, &c.isArray); err != nil {
			return err
		}
		info.types[name] = c
		all = append(all, name)
		return nil
	})
	if err != nil {
		return nil, s.mapErr("describe the table", err)
	}
	mismatch := func(format string, args ...any) error {
		return s.c.Adapter.errorf("work table %s: %w: %s", s.table, ErrSchemaMismatch, fmt.Sprintf(format, args...))
	}
	if len(all) == 0 {
		return nil, mismatch("it has no columns")
	}
	if _, ok := info.types[s.c.IDColumn]; !ok {
		return nil, mismatch("no id column %q (WorkRowsOptions.IDColumn)", s.c.IDColumn)
	}
	for _, want := range []struct{ col, typ, field string }{
		{s.c.LockIDColumn, "uuid", "LockIDColumn"},
		{s.c.LockedUntilColumn, "timestamp with time zone", "LockedUntilColumn"},
	} {
		c, ok := info.types[want.col]
		switch {
		case !ok:
			return nil, mismatch("no column %q (WorkRowsOptions.%s); add it as a nullable %s", want.col, want.field, want.typ)
		case c.typ != want.typ:
			return nil, mismatch("column %q is %s; it must be a nullable %s", want.col, c.typ, want.typ)
		}
	}
	columns := s.c.Columns(all)
	if len(columns) == 0 {
		return nil, s.c.Adapter.errorf("work table %s: no column maps to %s", s.table, s.c.ColumnsFrom)
	}
	sel := make([]string, len(columns))
	for i, c := range columns {
		if _, ok := info.types[c]; !ok {
			return nil, mismatch("no column %q (%s)", c, s.c.ColumnsFrom)
		}
		sel[i] = s.c.Alias + "." + quote(c)
	}
	info.selects = strings.Join(sel, ", ")
	s.info = info
	return info, nil
}

// checkSets refuses sets that would touch the id or the lock columns.
func (s *WorkRows[K, R]) checkSets(where string, sets []workrow.Set) error {
	for i, set := range sets {
		switch set.Column() {
		case s.c.IDColumn, s.c.LockIDColumn, s.c.LockedUntilColumn:
			return fmt.Errorf("%w: %s[%d] sets %q, which the store manages", workrow.ErrInvalidSpec, where, i, set.Column())
		}
	}
	return nil
}

// ClaimParts are the parts of a claim its caller writes, as SQL over the
// table's alias: the eligibility predicate, the order keys (without the
// id; "" for the configured order) and the claim's own sets. Args are
// their parameters, numbered from $4 ($1 to $3 are the claim's Now, lock
// id and lease end).
type ClaimParts struct {
	Where string
	Order string
	Sets  []string
	Args  []any
}

// Claim implements workrow.Store in one statement (see ClaimWith): the
// spec's condition trees rendered with parameters.
func (s *WorkRows[K, R]) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[K, R], error) {
	parts, err := s.claimParts(spec)
	if err != nil {
		return nil, err
	}
	return s.ClaimWith(ctx, spec.LockID, spec.Now, spec.LeaseUntil, spec.BatchSize, parts)
}

// ClaimStatement is the statement Claim sends for spec, with its
// parameters, for plan tests.
func (s *WorkRows[K, R]) ClaimStatement(ctx context.Context, spec workrow.ClaimSpec) (string, []any, error) {
	parts, err := s.claimParts(spec)
	if err != nil {
		return "", nil, err
	}
	info, err := s.describe(ctx)
	if err != nil {
		return "", nil, err
	}
	return s.claimSQL(info, spec.BatchSize, parts), claimArgs(spec.LockID, spec.Now, spec.LeaseUntil, parts), nil
}

// claimParts checks spec and renders its parts with parameters.
func (s *WorkRows[K, R]) claimParts(spec workrow.ClaimSpec) (ClaimParts, error) {
	if err := spec.Validate(); err != nil {
		return ClaimParts{}, err
	}
	if err := s.checkSets("ClaimSpec.OnClaim", spec.OnClaim); err != nil {
		return ClaimParts{}, err
	}
	b := &sqlBuilder{args: make([]any, claimParams), now: "$1"}
	where, err := b.cond(s.c.Alias, spec.Eligible)
	if err != nil {
		return ClaimParts{}, fmt.Errorf("%w: ClaimSpec.Eligible: %w", workrow.ErrInvalidSpec, err)
	}
	parts := ClaimParts{Where: where}
	if len(spec.Order) > 0 {
		parts.Order = orderKeys(s.c.Alias, spec.Order)
	}
	for _, set := range spec.OnClaim {
		r, err := b.set(s.c.Alias, set)
		if err != nil {
			return ClaimParts{}, fmt.Errorf("%w: ClaimSpec.OnClaim: %w", workrow.ErrInvalidSpec, err)
		}
		parts.Sets = append(parts.Sets, r)
	}
	parts.Args = b.args[claimParams:]
	return parts, nil
}

// claimParams is how many parameters a claim statement has before its
// parts': Now, the lock id and the lease end.
const claimParams = 3

// claimArgs are a claim statement's parameters.
func claimArgs(lock workrow.LockID, now, until time.Time, parts ClaimParts) []any {
	return append([]any{now, lockParam(lock), until}, parts.Args...)
}

// ClaimWith claims up to batch rows in one statement, the whole claim: the
// candidate CTE reads the first eligible, free rows in queue order,
// skipping rows that another statement is writing at this moment (FOR NO
// KEY UPDATE SKIP LOCKED: the row locks last as long as this statement,
// never across the work); the UPDATE restates the live filter, the
// eligibility predicate and the lock check on each candidate (under READ
// COMMITTED it re-evaluates them on the latest version of a row changed
// since the statement's snapshot) and stamps the lock; the final SELECT
// reads back exactly the rows this statement stamped, with the number of
// candidates in front (one row of NULLs when none was stamped).
//
// When concurrent claimers stamped every candidate first, it tries again
// with a fresh snapshot, a few times, rather than report an empty queue;
// so it does after a serialization failure or deadlock, which rolled the
// statement back whole. The lock, times and batch size must be valid
// (workrow.ClaimSpec.Validate).
func (s *WorkRows[K, R]) ClaimWith(ctx context.Context, lock workrow.LockID, now, until time.Time, batch int, parts ClaimParts) ([]workrow.Claimed[K, R], error) {
	info, err := s.describe(ctx)
	if err != nil {
		return nil, err
	}
	q := s.claimSQL(info, batch, parts)
	args := claimArgs(lock, now, until, parts)
	for attempt := 1; ; attempt++ {
		rows, err := s.db.Query(ctx, q, args...)
		var (
			claimed  []workrow.Claimed[K, R]
			selected int64
		)
		if err == nil {
			selected, claimed, err = s.c.ScanClaimed(ctx, rows)
			rows.Close()
		}
		if err != nil {
			if isConflict(err) {
				s.conflicts.Add(1)
				if attempt < claimAttempts && ctx.Err() == nil {
					continue // rolled back whole: safe to send again
				}
			}
			return nil, s.mapErr("claim", err)
		}
		s.claims.Add(1)
		s.selected.Add(uint64(selected))
		s.stamped.Add(uint64(len(claimed)))
		if len(claimed) < int(selected) {
			s.short.Add(1)
		}
		if len(claimed) > 0 || selected == 0 || attempt == claimAttempts {
			return claimed, nil
		}
	}
}

// claimSQL renders a claim; see ClaimWith. With LockFreeCandidates the
// candidate read takes no lock at all and the UPDATE alone arbitrates; see
// the pgx adapter's WorkRowsOptions.LockFreeCandidates for why that is not
// the default.
//
// The batch size is written into the statement, the one value that is not
// a parameter (a validated int, so nothing to quote): under LIMIT $n a
// generic plan assumes a tenth of the table comes back, costs more than
// the plan for the actual batch, and PostgreSQL plans every claim afresh
// (measured in the work-row bench group: planning came to a third of the
// claims' execution time). With the literal, a prepared claim keeps one
// generic plan per batch size.
func (s *WorkRows[K, R]) claimSQL(info *workTableInfo, batch int, parts ClaimParts) string {
	a := s.c.Alias
	order := parts.Order
	if order == "" {
		order = orderKeys(a, s.c.Order)
	}
	if order != "" {
		order += ", "
	}
	order += a + "." + s.id
	sets := append([]string{s.lockID + " = $2", s.lockedTo + " = $3"}, parts.Sets...)
	where := s.live + "\n      AND " + parts.Where + "\n      AND (" + a + "." + s.lockedTo + " IS NULL OR " + a + "." + s.lockedTo + " <= $1)"
	lock := "\n    FOR NO KEY UPDATE OF " + a + " SKIP LOCKED"
	if s.c.LockFreeCandidates {
		lock = ""
	}
	return `WITH baton_candidate AS MATERIALIZED (
    SELECT ` + a + `.` + s.id + ` AS baton_id FROM ` + s.table + ` AS ` + a + `
    WHERE ` + where + `
    ORDER BY ` + order + `
    LIMIT ` + strconv.Itoa(batch) + lock + `
), baton_stamped AS (
    UPDATE ` + s.table + ` AS ` + a + `
    SET ` + strings.Join(sets, ", ") + `
    FROM baton_candidate
    WHERE ` + a + `.` + s.id + ` = baton_candidate.baton_id
      AND ` + where + `
    RETURNING ` + a + `.*
)
SELECT baton_n.baton_selected, ` + a + `.` + s.id + ` IS NOT NULL AS baton_stamped, ` + a + `.` + s.id + ` AS baton_id, ` + info.selects + `
FROM (SELECT count(*) AS baton_selected FROM baton_candidate) AS baton_n
LEFT JOIN baton_stamped AS ` + a + ` ON true
ORDER BY ` + order
}

// Finalize ends one row's attempt: if the row still carries lock, it
// applies f.Set, clears the lock id and sets the lock expiry to
// f.VisibleAfter (NULL when zero). It reports whether the row was still
// owned; when it was not, nothing changed.
func (s *WorkRows[K, R]) Finalize(ctx context.Context, lock workrow.LockID, f workrow.Final[K]) (bool, error) {
	if err := workrow.CheckFinalize(lock, []workrow.Final[K]{f}); err != nil {
		return false, err
	}
	if err := s.checkSets("Final.Set", f.Set); err != nil {
		return false, err
	}
	b := &sqlBuilder{args: make([]any, 3)}
	var sets []string
	for _, set := range f.Set {
		r, err := b.set(s.c.Alias, set)
		if err != nil {
			return false, fmt.Errorf("%w: Final.Set: %w", workrow.ErrInvalidSpec, err)
		}
		sets = append(sets, r)
	}
	return s.FinalizeWith(ctx, lock, f.ID, f.VisibleAfter, sets, b.args[3:]...)
}

// FinalizeWith is Finalize with the sets written as SQL over the table's
// alias (args their parameters, from $4). The caller has checked lock.
func (s *WorkRows[K, R]) FinalizeWith(ctx context.Context, lock workrow.LockID, id K, visibleAfter time.Time, sets []string, args ...any) (bool, error) {
	a := s.c.Alias
	sets = append([]string{s.lockID + " = NULL", s.lockedTo + " = $3"}, sets...)
	q := `UPDATE ` + s.table + ` AS ` + a + ` SET ` + strings.Join(sets, ", ") +
		` WHERE ` + a + `.` + s.id + ` = $1 AND ` + a + `.` + s.lockID + ` = $2 RETURNING ` + a + `.` + s.id
	owned, err := s.returnedIDs(ctx, "finalize", q, append([]any{id, lockParam(lock), visibility(visibleAfter)}, args...)...)
	if err != nil {
		return false, err
	}
	return len(owned) == 1, nil
}

// lockParam is a lock id as a parameter. pgtype.UUID carries its type, so
// it also travels as text in a statement without a cast.
func lockParam(lock workrow.LockID) pgtype.UUID { return pgtype.UUID{Bytes: lock, Valid: true} }

// visibility is the lock expiry a finalize writes: NULL for "at once".
func visibility(t time.Time) pgtype.Timestamptz {
	return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()}
}

// finalColumn is one column FinalizeMany sets, with the kinds of change the
// rows of the call make to it.
type finalColumn struct {
	name string
	adds bool
	refs []string // columns copied into it
}

// Set kinds in FinalizeMany's per-row arrays.
const (
	finalKeep   int16 = 0
	finalAssign int16 = 1
	finalAdd    int16 = 2
	finalRef    int16 = 3 // + index in finalColumn.refs
)

// FinalizeMany implements workrow.Store in one statement, whatever the
// number of rows: the rows' ids, lock ids, visibilities and set values
// travel as arrays (unnest), and each row is matched by id and lock id.
// Columns a row does not set keep their value. Array-typed columns cannot
// be set here; use Finalize for them.
func (s *WorkRows[K, R]) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[K]) ([]bool, error) {
	if err := workrow.CheckFinalize(lock, finals); err != nil {
		return nil, err
	}
	owned, err := s.finalizeClaims(ctx, []workrow.ClaimFinals[K]{{Lock: lock, Finals: finals}})
	if err != nil {
		return nil, err
	}
	return owned[0], nil
}

// FinalizeClaims implements workrow.ClaimsFinalizer with FinalizeMany's
// statement: every row carries its own claim's lock id in the arrays.
func (s *WorkRows[K, R]) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[K]) ([][]bool, error) {
	if err := workrow.CheckClaims(claims); err != nil {
		return nil, err
	}
	return s.finalizeClaims(ctx, claims)
}

func (s *WorkRows[K, R]) finalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[K]) ([][]bool, error) {
	var finals []workrow.Final[K]
	var locks []pgtype.UUID
	for _, c := range claims {
		for i, f := range c.Finals {
			if err := s.checkSets(fmt.Sprintf("Final[%d].Set", i), f.Set); err != nil {
				return nil, err
			}
			finals = append(finals, f)
			locks = append(locks, lockParam(c.Lock))
		}
	}
	owned := make([][]bool, len(claims))
	for c := range claims {
		owned[c] = make([]bool, len(claims[c].Finals))
	}
	if len(finals) == 0 {
		return owned, nil
	}
	info, err := s.describe(ctx)
	if err != nil {
		return nil, err
	}

	// The columns set by any row, in name order, so equal shapes give
	// equal statements (and reuse one prepared statement).
	byName := map[string]*finalColumn{}
	for _, f := range finals {
		for _, set := range f.Set {
			c := byName[set.Column()]
			if c == nil {
				c = &finalColumn{name: set.Column()}
				byName[set.Column()] = c
			}
			if set.Kind() == workrow.SetAdd {
				c.adds = true
			}
			if r, ok := set.Value().(workrow.ColumnRef); ok && !slices.Contains(c.refs, string(r)) {
				c.refs = append(c.refs, string(r))
			}
		}
	}
	cols := make([]*finalColumn, 0, len(byName))
	for _, c := range byName {
		slices.Sort(c.refs)
		cols = append(cols, c)
	}
	slices.SortFunc(cols, func(a, b *finalColumn) int { return strings.Compare(a.name, b.name) })

	ids := make([]K, len(finals))
	vis := make([]pgtype.Timestamptz, len(finals))
	kinds := make([][]int16, len(cols))
	values := make([][]any, len(cols))
	for j := range cols {
		kinds[j] = make([]int16, len(finals))
		values[j] = make([]any, len(finals))
	}
	for i, f := range finals {
		ids[i], vis[i] = f.ID, visibility(f.VisibleAfter)
		for _, set := range f.Set {
			j, _ := slices.BinarySearchFunc(cols, set.Column(), func(c *finalColumn, name string) int { return strings.Compare(c.name, name) })
			switch r, isRef := set.Value().(workrow.ColumnRef); {
			case isRef:
				kinds[j][i] = finalRef + int16(slices.Index(cols[j].refs, string(r)))
			case set.Kind() == workrow.SetAdd:
				kinds[j][i], values[j][i] = finalAdd, sqlArg(set.Value())
			default:
				kinds[j][i], values[j][i] = finalAssign, sqlArg(set.Value())
			}
		}
	}

	a := s.c.Alias
	idType := info.types[s.c.IDColumn].typ
	b := &sqlBuilder{}
	from := []string{b.param(ids) + "::" + idType + "[]", b.param(locks) + "::uuid[]", b.param(vis) + "::timestamptz[]"}
	names := []string{"id", "lock", "visible_after"}
	sets := []string{s.lockID + " = NULL", s.lockedTo + " = f.visible_after"}
	for j, c := range cols {
		ct, ok := info.types[c.name]
		if !ok {
			return nil, s.c.Adapter.errorf("work table %s: finalize: %w: no column %q", s.table, ErrSchemaMismatch, c.name)
		}
		if ct.isArray {
			return nil, fmt.Errorf("%w: FinalizeMany cannot set the array column %q; use Finalize", workrow.ErrInvalidSpec, c.name)
		}
		k, v := fmt.Sprintf("k%d", j), fmt.Sprintf("v%d", j)
		from = append(from, b.param(kinds[j])+"::smallint[]", b.param(values[j])+"::"+ct.typ+"[]")
		names = append(names, k, v)
		col := quote(c.name)
		expr := "CASE f." + k + " WHEN 1 THEN f." + v
		if c.adds {
			expr += " WHEN 2 THEN " + a + "." + col + " + f." + v
		}
		for r, ref := range c.refs {
			expr += fmt.Sprintf(" WHEN %d THEN %s.%s", finalRef+int16(r), a, quote(ref))
		}
		sets = append(sets, col+" = "+expr+" ELSE "+a+"."+col+" END")
	}
	q := `UPDATE ` + s.table + ` AS ` + a + `
SET ` + strings.Join(sets, ",\n    ") + `
FROM unnest(` + strings.Join(from, ", ") + `) AS f (` + strings.Join(names, ", ") + `)
WHERE ` + a + `.` + s.id + ` = f.id AND ` + a + `.` + s.lockID + ` = f.lock
RETURNING ` + a + `.` + s.id + `, f.lock`
	type done struct {
		id   K
		lock pgtype.UUID
	}
	applied, err := resend(ctx, &s.conflicts, func() ([]done, error) {
		rows, err := s.db.Query(ctx, q, b.args...)
		return collect(rows, err, func(r Rows) (done, error) {
			var d done
			return d, r.Scan(&d.id, &d.lock)
		})
	})
	if err != nil {
		return nil, s.mapErr("finalize", err)
	}
	set := make(map[done]bool, len(applied))
	for _, d := range applied {
		set[d] = true
	}
	j := 0
	for c := range claims {
		for i := range owned[c] {
			owned[c][i] = set[done{ids[j], locks[j]}]
			j++
		}
	}
	return owned, nil
}

// Renew extends the lease of one row if it still carries lock.
func (s *WorkRows[K, R]) Renew(ctx context.Context, lock workrow.LockID, id K, until time.Time) (bool, error) {
	owned, err := s.RenewMany(ctx, lock, until, []K{id})
	if err != nil {
		return false, err
	}
	return owned[0], nil
}

// RenewMany implements workrow.Store in one statement.
func (s *WorkRows[K, R]) RenewMany(ctx context.Context, lock workrow.LockID, until time.Time, ids []K) ([]bool, error) {
	if err := workrow.CheckRenew(lock, until, ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	a := s.c.Alias
	q := `UPDATE ` + s.table + ` AS ` + a + ` SET ` + s.lockedTo + ` = $2
WHERE ` + a + `.` + s.lockID + ` = $1 AND ` + a + `.` + s.id + ` = ANY ($3) RETURNING ` + a + `.` + s.id
	owned, err := s.returnedIDs(ctx, "renew", q, lockParam(lock), until, ids)
	if err != nil {
		return nil, err
	}
	return ownedFlags(ids, owned), nil
}

// Release hands one row back if it still carries lock: its lock id and
// expiry are cleared, so it is claimable at once.
func (s *WorkRows[K, R]) Release(ctx context.Context, lock workrow.LockID, id K) (bool, error) {
	owned, err := s.ReleaseMany(ctx, lock, []K{id})
	if err != nil {
		return false, err
	}
	return owned[0], nil
}

// ReleaseMany implements workrow.Store in one statement.
func (s *WorkRows[K, R]) ReleaseMany(ctx context.Context, lock workrow.LockID, ids []K) ([]bool, error) {
	if err := workrow.CheckRelease(lock, ids); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, nil
	}
	a := s.c.Alias
	q := `UPDATE ` + s.table + ` AS ` + a + ` SET ` + s.lockID + ` = NULL, ` + s.lockedTo + ` = NULL
WHERE ` + a + `.` + s.lockID + ` = $1 AND ` + a + `.` + s.id + ` = ANY ($2) RETURNING ` + a + `.` + s.id
	owned, err := s.returnedIDs(ctx, "release", q, lockParam(lock), ids)
	if err != nil {
		return nil, err
	}
	return ownedFlags(ids, owned), nil
}

func (s *WorkRows[K, R]) returnedIDs(ctx context.Context, op, q string, args ...any) ([]K, error) {
	ids, err := resend(ctx, &s.conflicts, func() ([]K, error) {
		rows, err := s.db.Query(ctx, q, args...)
		return collect(rows, err, func(r Rows) (K, error) {
			var id K
			return id, r.Scan(&id)
		})
	})
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	return ids, nil
}

// resend runs one statement of its own (a finalize, renewal or release)
// and sends it again, up to claimAttempts times in all, when PostgreSQL
// rolled it back whole as a deadlock victim or on a serialization failure:
// none of it was applied, so sending it again is safe, where giving up
// would leave decided rows to the end of their lease and their work to be
// done again. A claim that takes rows another claim is re-checking, and a
// finalize of those rows, can deadlock (LockFreeCandidates).
func resend[T any](ctx context.Context, conflicts *atomic.Uint64, run func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := run()
		if err != nil && isConflict(err) && attempt < claimAttempts && ctx.Err() == nil {
			conflicts.Add(1)
			continue
		}
		return v, err
	}
}

func ownedFlags[K comparable](ids, owned []K) []bool {
	set := make(map[K]bool, len(owned))
	for _, id := range owned {
		set[id] = true
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		out[i] = set[id]
	}
	return out
}

func (s *WorkRows[K, R]) mapErr(op string, err error) error {
	return s.c.Adapter.MapError(AreaWorkRow, s.table+": "+op, err)
}
