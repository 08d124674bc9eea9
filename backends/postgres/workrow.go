package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/internal/pgrules"
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
// a deadlock.
const claimAttempts = 4

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
	// and batches of 100), and most claims stamp fewer rows than they read.
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
// claimers that picked the same candidates. Conflicts happen only above
// READ COMMITTED.
type WorkRowsStats struct {
	Claims      uint64 // claim statements sent
	Selected    uint64 // candidate rows those statements selected
	Stamped     uint64 // rows they stamped
	ShortClaims uint64 // statements that stamped fewer rows than they selected
	Conflicts   uint64 // statements rolled back by a serialization failure or deadlock
}

// WorkRows is the workrow.Store of one application table, over pgx. Create
// it with NewWorkRows. K is the id's type, R the row's.
//
// Every method is one statement, so one transaction of its own: a claim,
// finalize, renew or release holds its row locks only while it runs, and
// nothing is held while the work happens. The statements expect READ
// COMMITTED (PostgreSQL's default): under REPEATABLE READ or SERIALIZABLE,
// a claim that meets a concurrent claim on the same row fails with a
// serialization error instead of skipping the row (see docs/work-rows.md).
type WorkRows[K comparable, R any] struct {
	pool *pgxpool.Pool
	opts WorkRowsOptions[R]

	table                string // quoted, schema-qualified when Schema is set
	id, lockID, lockedTo string // quoted
	live                 string // the live filter over alias w, literal

	infoMu sync.Mutex
	info   *workTableInfo

	claims, selected, stamped, short, conflicts atomic.Uint64
}

var _ workrow.Store[int64, struct{}] = (*WorkRows[int64, struct{}])(nil)

// workTableInfo is what WorkRows reads from the catalog on first use.
type workTableInfo struct {
	types   map[string]workColumn
	columns []string // read into R, in table order
	selects string   // the columns as "s"."col", ...
}

type workColumn struct {
	typ     string // format_type
	isArray bool
}

// NewWorkRows returns a WorkRows over pool, or an error naming the first
// invalid option. It sends nothing to the database; the first call reads
// the table's columns from the catalog (Check does so at once).
func NewWorkRows[K comparable, R any](pool *pgxpool.Pool, opts WorkRowsOptions[R]) (*WorkRows[K, R], error) {
	if pool == nil {
		return nil, errors.New("baton/postgres: NewWorkRows: the pool is nil")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	live, err := literalCond("w", opts.Live)
	if err != nil {
		return nil, fmt.Errorf("baton/postgres: WorkRowsOptions.Live: %w", err)
	}
	return &WorkRows[K, R]{
		pool:     pool,
		opts:     opts,
		table:    workTable(opts.Schema, opts.Table),
		id:       quote(opts.IDColumn),
		lockID:   quote(opts.LockIDColumn),
		lockedTo: quote(opts.LockedUntilColumn),
		live:     live,
	}, nil
}

func workTable(schema, table string) string {
	if schema == "" {
		return pgx.Identifier{table}.Sanitize()
	}
	return pgx.Identifier{schema, table}.Sanitize()
}

func (o *WorkRowsOptions[R]) validate() error {
	if o.IDColumn == "" {
		o.IDColumn = DefaultWorkRowIDColumn
	}
	if o.LockIDColumn == "" {
		o.LockIDColumn = DefaultWorkRowLockIDColumn
	}
	if o.LockedUntilColumn == "" {
		o.LockedUntilColumn = DefaultWorkRowLockedUntilColumn
	}
	if o.Scan == nil {
		o.Scan = pgx.RowToStructByNameLax[R]
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("baton/postgres: WorkRowsOptions.%s", fmt.Sprintf(format, args...))
	}
	if o.Schema != "" {
		if err := validateSchemaName("WorkRowsOptions.Schema", o.Schema); err != nil {
			return err
		}
	}
	for field, name := range map[string]string{"Table": o.Table, "IDColumn": o.IDColumn,
		"LockIDColumn": o.LockIDColumn, "LockedUntilColumn": o.LockedUntilColumn} {
		if p := identifierProblem(name); p != "" {
			return bad("%s %q: %s", field, name, p)
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
	for i, c := range o.Columns {
		if p := identifierProblem(c); p != "" {
			return bad("Columns[%d] %q: %s", i, c, p)
		}
	}
	return nil
}

// identifierProblem describes what keeps name from being a PostgreSQL
// identifier as written, or returns "" (pgrules.IdentifierProblem).
func identifierProblem(name string) string { return pgrules.IdentifierProblem(name) }

// Stats returns the claim counters since the store was created.
func (s *WorkRows[K, R]) Stats() WorkRowsStats {
	return WorkRowsStats{
		Claims: s.claims.Load(), Selected: s.selected.Load(), Stamped: s.stamped.Load(), ShortClaims: s.short.Load(),
		Conflicts: s.conflicts.Load(),
	}
}

// ClaimIndex describes the claim index this store's claims ride: the
// Order columns then the id, partial over Live.
func (s *WorkRows[K, R]) ClaimIndex() ClaimIndex {
	return ClaimIndex{
		Schema: s.opts.Schema, Table: s.opts.Table, IDColumn: s.opts.IDColumn, Order: s.opts.Order, Live: s.opts.Live,
		LockColumns: []string{s.opts.LockIDColumn, s.opts.LockedUntilColumn},
	}
}

// Check reads the table's columns, then checks its claim index (see
// ClaimIndex.Check). It suits a readiness check.
func (s *WorkRows[K, R]) Check(ctx context.Context) error {
	if _, err := s.describe(ctx); err != nil {
		return err
	}
	return s.ClaimIndex().Check(ctx, s.pool)
}

// describe reads the table's columns once.
func (s *WorkRows[K, R]) describe(ctx context.Context) (*workTableInfo, error) {
	s.infoMu.Lock()
	defer s.infoMu.Unlock()
	if s.info != nil {
		return s.info, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory = 'A'
FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, s.table)
	if err != nil {
		return nil, s.mapErr("describe the table", err)
	}
	info := &workTableInfo{types: map[string]workColumn{}}
	var all []string
	for rows.Next() {
		var name string
		var c workColumn
		if err := rows.Scan(&name, &c.typ, &c.isArray); err != nil {
			rows.Close()
			return nil, s.mapErr("describe the table", err)
		}
		info.types[name] = c
		all = append(all, name)
	}
	if err := rows.Err(); err != nil {
		return nil, s.mapErr("describe the table", err)
	}
	mismatch := func(format string, args ...any) error {
		return fmt.Errorf("baton/postgres: work table %s: %w: %s", s.table, ErrSchemaMismatch, fmt.Sprintf(format, args...))
	}
	if len(all) == 0 {
		return nil, mismatch("it has no columns")
	}
	if _, ok := info.types[s.opts.IDColumn]; !ok {
		return nil, mismatch("no id column %q (WorkRowsOptions.IDColumn)", s.opts.IDColumn)
	}
	for _, want := range []struct{ col, typ, field string }{
		{s.opts.LockIDColumn, "uuid", "LockIDColumn"},
		{s.opts.LockedUntilColumn, "timestamp with time zone", "LockedUntilColumn"},
	} {
		c, ok := info.types[want.col]
		switch {
		case !ok:
			return nil, mismatch("no column %q (WorkRowsOptions.%s); add it as a nullable %s", want.col, want.field, want.typ)
		case c.typ != want.typ:
			return nil, mismatch("column %q is %s; it must be a nullable %s", want.col, c.typ, want.typ)
		}
	}
	info.columns = s.opts.Columns
	if len(info.columns) == 0 {
		info.columns = fieldColumns(reflect.TypeFor[R](), all)
		if len(info.columns) == 0 {
			return nil, fmt.Errorf("baton/postgres: work table %s: no column maps to a field of %v; set WorkRowsOptions.Columns (and Scan, if it is not a struct)",
				s.table, reflect.TypeFor[R]())
		}
	}
	sel := make([]string, len(info.columns))
	for i, c := range info.columns {
		if _, ok := info.types[c]; !ok {
			return nil, mismatch("no column %q (WorkRowsOptions.Columns)", c)
		}
		sel[i] = "s." + quote(c)
	}
	info.selects = strings.Join(sel, ", ")
	s.info = info
	return info, nil
}

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

// checkSets refuses sets that would touch the id or the lock columns.
func (s *WorkRows[K, R]) checkSets(where string, sets []workrow.Set) error {
	for i, set := range sets {
		switch set.Column() {
		case s.opts.IDColumn, s.opts.LockIDColumn, s.opts.LockedUntilColumn:
			return fmt.Errorf("%w: %s[%d] sets %q, which the store manages", workrow.ErrInvalidSpec, where, i, set.Column())
		}
	}
	return nil
}

// claimSQL renders a claim. Parameters: $1 now, $2 batch size, $3 lock
// id, $4 lease end, then the predicate's and the sets' values.
//
// The statement is the whole claim: the candidate CTE reads the first
// eligible, free rows in queue order, skipping rows that another statement
// is writing at this moment (FOR NO KEY UPDATE SKIP LOCKED: the row locks
// last as long as this statement, never across the work); the UPDATE
// restates the live filter, the eligibility predicate and the lock check
// on each candidate (under READ COMMITTED it re-evaluates them on the
// latest version of a row changed since the statement's snapshot) and
// stamps the lock; the final SELECT reads back exactly the rows this
// statement stamped, with the number of candidates in front (one row of
// NULLs when none was stamped).
//
// With LockFreeCandidates the candidate read takes no lock at all and the
// UPDATE alone arbitrates; see WorkRowsOptions.LockFreeCandidates for why
// that is not the default.
func (s *WorkRows[K, R]) claimSQL(spec workrow.ClaimSpec, info *workTableInfo) (string, []any, error) {
	order := spec.Order
	if len(order) == 0 {
		order = s.opts.Order
	}
	b := &sqlBuilder{}
	b.param(spec.Now)
	b.param(int64(spec.BatchSize))
	b.param(pgtype.UUID{Bytes: spec.LockID, Valid: true})
	b.param(spec.LeaseUntil)
	eligible, err := b.cond("w", spec.Eligible)
	if err != nil {
		return "", nil, fmt.Errorf("%w: ClaimSpec.Eligible: %w", workrow.ErrInvalidSpec, err)
	}
	sets := []string{s.lockID + " = $3", s.lockedTo + " = $4"}
	for _, set := range spec.OnClaim {
		r, err := b.set("w", set)
		if err != nil {
			return "", nil, fmt.Errorf("%w: ClaimSpec.OnClaim: %w", workrow.ErrInvalidSpec, err)
		}
		sets = append(sets, r)
	}
	where := s.live + "\n      AND " + eligible + "\n      AND (w." + s.lockedTo + " IS NULL OR w." + s.lockedTo + " <= $1)"
	lock := "\n    FOR NO KEY UPDATE OF w SKIP LOCKED"
	if s.opts.LockFreeCandidates {
		lock = ""
	}
	q := `WITH candidate AS MATERIALIZED (
    SELECT w.` + s.id + ` AS id FROM ` + s.table + ` AS w
    WHERE ` + where + `
    ORDER BY ` + orderBy("w", order, s.opts.IDColumn) + `
    LIMIT $2` + lock + `
), stamped AS (
    UPDATE ` + s.table + ` AS w
    SET ` + strings.Join(sets, ", ") + `
    FROM candidate
    WHERE w.` + s.id + ` = candidate.id
      AND ` + where + `
    RETURNING w.*
)
SELECT n.selected, s.` + s.id + `, ` + info.selects + `
FROM (SELECT count(*) AS selected FROM candidate) AS n
LEFT JOIN stamped AS s ON true
ORDER BY ` + orderBy("s", order, s.opts.IDColumn)
	return q, b.args, nil
}

// Claim implements workrow.Store in one statement (see claimSQL). When
// concurrent claimers stamped every candidate first, it tries again with a
// fresh snapshot, a few times, rather than report an empty queue; so it
// does after a serialization failure or deadlock, which rolled the
// statement back whole.
func (s *WorkRows[K, R]) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[K, R], error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkSets("ClaimSpec.OnClaim", spec.OnClaim); err != nil {
		return nil, err
	}
	info, err := s.describe(ctx)
	if err != nil {
		return nil, err
	}
	q, args, err := s.claimSQL(spec, info)
	if err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		claimed, selected, err := s.claimOnce(ctx, q, args)
		if err != nil {
			if isConflict(err) {
				s.conflicts.Add(1)
				if attempt < claimAttempts && ctx.Err() == nil {
					continue // rolled back whole: safe to send again
				}
			}
			return nil, err
		}
		s.claims.Add(1)
		s.selected.Add(uint64(selected))
		s.stamped.Add(uint64(len(claimed)))
		if len(claimed) < selected {
			s.short.Add(1)
		}
		if len(claimed) > 0 || selected == 0 || attempt == claimAttempts {
			return claimed, nil
		}
	}
}

func (s *WorkRows[K, R]) claimOnce(ctx context.Context, q string, args []any) ([]workrow.Claimed[K, R], int, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, 0, s.mapErr("claim", err)
	}
	defer rows.Close()
	var (
		out      []workrow.Claimed[K, R]
		selected int64
		id       K
	)
	inner := skipColumns{Rows: rows, skip: 2, head: []any{&selected, &id}}
	for rows.Next() {
		if rows.RawValues()[1] == nil { // nothing stamped
			dest := make([]any, len(rows.FieldDescriptions()))
			dest[0] = &selected
			if err := rows.Scan(dest...); err != nil {
				return nil, 0, s.mapErr("claim", err)
			}
			continue
		}
		r, err := s.opts.Scan(inner)
		if err != nil {
			return nil, 0, s.mapErr("claim: scan a row", err)
		}
		out = append(out, workrow.Claimed[K, R]{ID: id, Row: r})
	}
	if err := rows.Err(); err != nil {
		return nil, 0, s.mapErr("claim", err)
	}
	return out, int(selected), nil
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
	b := &sqlBuilder{}
	b.param(f.ID)
	b.param(pgtype.UUID{Bytes: lock, Valid: true})
	sets := []string{s.lockID + " = NULL", s.lockedTo + " = " + b.param(visibility(f.VisibleAfter))}
	for _, set := range f.Set {
		r, err := b.set("w", set)
		if err != nil {
			return false, fmt.Errorf("%w: Final.Set: %w", workrow.ErrInvalidSpec, err)
		}
		sets = append(sets, r)
	}
	q := `UPDATE ` + s.table + ` AS w SET ` + strings.Join(sets, ", ") +
		` WHERE w.` + s.id + ` = $1 AND w.` + s.lockID + ` = $2 RETURNING w.` + s.id
	owned, err := s.returnedIDs(ctx, "finalize", q, b.args...)
	if err != nil {
		return false, err
	}
	return len(owned) == 1, nil
}

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
// number of rows: the rows' ids, visibilities and set values travel as
// arrays (unnest), and each row is matched by id and lock id. Columns a row
// does not set keep their value. Array-typed columns cannot be set here;
// use Finalize for them.
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

	idType := info.types[s.opts.IDColumn].typ
	b := &sqlBuilder{}
	b.param(pgtype.UUID{Bytes: lock, Valid: true})
	from := []string{b.param(ids) + "::" + idType + "[]", b.param(vis) + "::timestamptz[]"}
	names := []string{"id", "visible_after"}
	sets := []string{s.lockID + " = NULL", s.lockedTo + " = f.visible_after"}
	for j, c := range cols {
		ct, ok := info.types[c.name]
		if !ok {
			return nil, fmt.Errorf("baton/postgres: work table %s: finalize: %w: no column %q", s.table, ErrSchemaMismatch, c.name)
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
			expr += " WHEN 2 THEN w." + col + " + f." + v
		}
		for r, ref := range c.refs {
			expr += fmt.Sprintf(" WHEN %d THEN w.%s", finalRef+int16(r), quote(ref))
		}
		sets = append(sets, col+" = "+expr+" ELSE w."+col+" END")
	}
	q := `UPDATE ` + s.table + ` AS w
SET ` + strings.Join(sets, ",\n    ") + `
FROM unnest(` + strings.Join(from, ", ") + `) AS f (` + strings.Join(names, ", ") + `)
WHERE w.` + s.id + ` = f.id AND w.` + s.lockID + ` = $1
RETURNING w.` + s.id
	owned, err := s.returnedIDs(ctx, "finalize", q, b.args...)
	if err != nil {
		return nil, err
	}
	return ownedFlags(ids, owned), nil
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
	q := `UPDATE ` + s.table + ` AS w SET ` + s.lockedTo + ` = $2
WHERE w.` + s.lockID + ` = $1 AND w.` + s.id + ` = ANY ($3) RETURNING w.` + s.id
	owned, err := s.returnedIDs(ctx, "renew", q, pgtype.UUID{Bytes: lock, Valid: true}, until, ids)
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
	q := `UPDATE ` + s.table + ` AS w SET ` + s.lockID + ` = NULL, ` + s.lockedTo + ` = NULL
WHERE w.` + s.lockID + ` = $1 AND w.` + s.id + ` = ANY ($2) RETURNING w.` + s.id
	owned, err := s.returnedIDs(ctx, "release", q, pgtype.UUID{Bytes: lock, Valid: true}, ids)
	if err != nil {
		return nil, err
	}
	return ownedFlags(ids, owned), nil
}

func (s *WorkRows[K, R]) returnedIDs(ctx context.Context, op, q string, args ...any) ([]K, error) {
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[K])
	if err != nil {
		return nil, s.mapErr(op, err)
	}
	return ids, nil
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

// mapErr is the one place where the work-row store's driver errors are
// mapped: a missing table or column wraps ErrSchemaMismatch; a
// serialization failure or deadlock says that work-row statements need
// READ COMMITTED and may be retried; context errors stay recognizable with
// errors.Is.
func isConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

func (s *WorkRows[K, R]) mapErr(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "42703": // undefined_table, undefined_column
			return fmt.Errorf("baton/postgres: work table %s: %s: %w (check WorkRowsOptions and the search_path): %w", s.table, op, ErrSchemaMismatch, err)
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return fmt.Errorf("baton/postgres: work table %s: %s met a concurrent change and was rolled back; it may be retried "+
				"(work-row statements expect READ COMMITTED: check default_transaction_isolation): %w", s.table, op, err)
		}
	}
	return fmt.Errorf("baton/postgres: work table %s: %s: %w", s.table, op, err)
}
