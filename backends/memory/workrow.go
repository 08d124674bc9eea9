package memory

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/workrow"
)

// DefaultWorkRowIDColumn is the id column of a WorkRowStore whose options
// name none.
const DefaultWorkRowIDColumn = "id"

// WorkRowStoreOptions describe the table a WorkRowStore keeps. The zero
// value uses the defaults.
type WorkRowStoreOptions struct {
	// IDColumn is the primary key (default "id"). R's field for it must be
	// of the store's id type K.
	IDColumn string
	// Live is the live-row filter, for example
	// workrow.IsNull("completed_at"): the rows a database's claim index
	// would hold (ClaimIndex). Every claim adds it to its own predicate, as
	// the PostgreSQL adapter does. The zero Cond counts every row as live.
	Live workrow.Cond
	// Order is the queue order of a ClaimSpec that has none; the id breaks
	// ties either way.
	Order []workrow.Order
}

// WorkRowStore is a workrow.Store kept in memory: one table of R rows
// keyed by a K id, with the two lock columns beside them. Create it with
// NewWorkRowStore. It is safe for concurrent use, and every method is one
// step under its lock, so nothing can slip between a guard and its write.
//
// The columns are R's exported fields, each named by its db tag, or else
// by its name in snake case (CompletedAt is completed_at); a field tagged
// db:"-" is no column, and an embedded struct's fields are columns of their
// own. Conditions, sets and orders are evaluated with core's rules
// (workrow.Cond.Eval), which are SQL's: NULL is a nil pointer, and a
// comparison with it is never true. A set converts its value to the
// field's type, a nil to a nil pointer; a value the field cannot hold is an
// error and writes nothing.
type WorkRowStore[K comparable, R any] struct {
	codec *workRowCodec
	live  workrow.Cond
	order []workrow.Order

	mu   sync.Mutex
	rows map[K]*workRowEntry[R]
	// bus holds the listeners (Listen) that inserts signal.
	bus bus
}

var _ workrow.Store[int64, struct{ ID int64 }] = (*WorkRowStore[int64, struct{ ID int64 }])(nil)
var _ workrow.ClaimsFinalizer[int64] = (*WorkRowStore[int64, struct{ ID int64 }])(nil)

// WorkRowState is one row of a WorkRowStore with its lock columns.
type WorkRowState[K comparable, R any] struct {
	ID  K
	Row R
	// LockID is the claim's lock id; zero when the row is not locked.
	LockID workrow.LockID
	// LockedUntil is the lock expiry, or the retry visibility of a failed
	// row; zero is NULL.
	LockedUntil time.Time
}

type workRowEntry[R any] struct {
	row   R
	lock  workrow.LockID
	until time.Time
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o WorkRowStoreOptions) withDefaults() WorkRowStoreOptions {
	if o.IDColumn == "" {
		o.IDColumn = DefaultWorkRowIDColumn
	}
	return o
}

// NewWorkRowStore returns an empty store of R rows keyed by K, or an error
// naming the option, or the field of R, that cannot work.
func NewWorkRowStore[K comparable, R any](opts WorkRowStoreOptions) (*WorkRowStore[K, R], error) {
	opts = opts.withDefaults()
	codec, err := newWorkRowCodec(reflect.TypeFor[R](), opts.IDColumn, reflect.TypeFor[K]())
	if err != nil {
		return nil, err
	}
	var zero K
	if _, err := workrow.CompareValues(zero, zero); err != nil {
		return nil, fmt.Errorf("baton/memory: work rows: ids of type %T cannot be ordered: %v", zero, err)
	}
	for _, c := range opts.Live.Columns() {
		if !codec.has(c) {
			return nil, config.Invalid(workrow.ErrInvalidConfig, "memory.WorkRowStoreOptions.Live", "mentions %q, which is no column of %s", c, codec.typ)
		}
	}
	for i, o := range opts.Order {
		if !codec.has(o.Column) {
			return nil, config.Invalid(workrow.ErrInvalidConfig, fmt.Sprintf("memory.WorkRowStoreOptions.Order[%d]", i), "is %q, which is no column of %s", o.Column, codec.typ)
		}
	}
	return &WorkRowStore[K, R]{
		codec: codec,
		live:  opts.Live,
		order: slices.Clone(opts.Order),
		rows:  make(map[K]*workRowEntry[R]),
	}, nil
}

// Insert adds rows, unlocked, and signals the store's idle listeners
// (Listen), as a database producer signals in its transaction. A row whose
// id is taken, by the store or by an earlier row of the same call, is an
// error, and then nothing is added.
func (s *WorkRowStore[K, R]) Insert(ctx context.Context, rows ...R) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[K]bool, len(rows))
	for i, r := range rows {
		id := s.id(r)
		if _, taken := s.rows[id]; taken || seen[id] {
			return fmt.Errorf("baton/memory: work rows: insert: rows[%d]: id %v is taken; nothing was inserted", i, id)
		}
		seen[id] = true
	}
	for _, r := range rows {
		s.rows[s.id(r)] = &workRowEntry[R]{row: s.codec.clone(r).(R)}
	}
	if len(rows) > 0 {
		s.bus.signal(0)
	}
	return nil
}

// Row returns the row with id and its lock columns; found is false when
// there is none.
func (s *WorkRowStore[K, R]) Row(ctx context.Context, id K) (row WorkRowState[K, R], found bool, err error) {
	if err := ctx.Err(); err != nil {
		return WorkRowState[K, R]{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.rows[id]
	if e == nil {
		return WorkRowState[K, R]{}, false, nil
	}
	return s.state(id, e), true, nil
}

// Rows returns every row with its lock columns, in id order.
func (s *WorkRowStore[K, R]) Rows(ctx context.Context) ([]WorkRowState[K, R], error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WorkRowState[K, R], 0, len(s.rows))
	for _, id := range s.sortedIDs() {
		out = append(out, s.state(id, s.rows[id]))
	}
	return out, nil
}

// ClaimIndex returns, in id order, the ids of the rows that satisfy
// WorkRowStoreOptions.Live: what a database's partial claim index would
// hold.
func (s *WorkRowStore[K, R]) ClaimIndex(ctx context.Context) ([]K, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []K
	for _, id := range s.sortedIDs() {
		live, err := s.isLive(s.rows[id], time.Time{})
		if err != nil {
			return nil, err
		}
		if live {
			out = append(out, id)
		}
	}
	return out, nil
}

// Claim implements workrow.Store.
func (s *WorkRowStore[K, R]) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[K, R], error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := s.checkSets("ClaimSpec.OnClaim", spec.OnClaim); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	order := spec.Order
	if len(order) == 0 {
		order = s.order
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	type candidate struct {
		id K
		e  *workRowEntry[R]
	}
	var due []candidate
	for id, e := range s.rows {
		if !e.until.IsZero() && e.until.After(spec.Now) {
			continue // locked, or a failed row not yet visible again
		}
		ok, err := spec.Eligible.Eval(s.codec.columns(e.row), spec.Now)
		if err != nil {
			return nil, fmt.Errorf("baton/memory: work rows: claim: %w", err)
		}
		if ok {
			ok, err = s.isLive(e, spec.Now)
		}
		if err != nil {
			return nil, err
		}
		if ok {
			due = append(due, candidate{id, e})
		}
	}
	var orderErr error
	slices.SortFunc(due, func(a, b candidate) int {
		n, err := workrow.CompareOrder(order, s.codec.columns(a.e.row), s.codec.columns(b.e.row))
		if err != nil {
			orderErr = err
		}
		return cmp.Or(n, compareIDs(a.id, b.id))
	})
	if orderErr != nil {
		return nil, fmt.Errorf("baton/memory: work rows: claim: %w", orderErr)
	}
	due = due[:min(len(due), spec.BatchSize)]
	// Every row's new value first, so a set that fails writes nothing.
	next := make([]R, len(due))
	for i, c := range due {
		r, err := s.codec.apply(c.e.row, spec.OnClaim, spec.Now)
		if err != nil {
			return nil, fmt.Errorf("baton/memory: work rows: claim: row %v: %w; nothing was claimed", c.id, err)
		}
		next[i] = r.(R)
	}
	out := make([]workrow.Claimed[K, R], len(due))
	for i, c := range due {
		c.e.row, c.e.lock, c.e.until = next[i], spec.LockID, spec.LeaseUntil
		out[i] = workrow.Claimed[K, R]{ID: c.id, Row: s.codec.clone(next[i]).(R)}
	}
	return out, nil
}

// FinalizeMany implements workrow.Store.
func (s *WorkRowStore[K, R]) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[K]) ([]bool, error) {
	if err := workrow.CheckFinalize(lock, finals); err != nil {
		return nil, err
	}
	owned, err := s.finalizeClaims(ctx, []workrow.ClaimFinals[K]{{Lock: lock, Finals: finals}})
	if err != nil {
		return nil, err
	}
	return owned[0], nil
}

// FinalizeClaims implements workrow.ClaimsFinalizer.
func (s *WorkRowStore[K, R]) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[K]) ([][]bool, error) {
	if err := workrow.CheckClaims(claims); err != nil {
		return nil, err
	}
	return s.finalizeClaims(ctx, claims)
}

// finalizeClaims applies every claim's finals under one hold of the mutex,
// each guarded by its own claim's lock, or none when one fails.
func (s *WorkRowStore[K, R]) finalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[K]) ([][]bool, error) {
	for _, c := range claims {
		for i, f := range c.Finals {
			if err := s.checkSets(fmt.Sprintf("Final[%d].Set", i), f.Set); err != nil {
				return nil, err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owned := make([][]bool, len(claims))
	next := make([][]R, len(claims))
	for c, cl := range claims {
		owned[c], next[c] = make([]bool, len(cl.Finals)), make([]R, len(cl.Finals))
		for i, f := range cl.Finals {
			e := s.rows[f.ID]
			if e == nil || e.lock != cl.Lock {
				continue
			}
			r, err := s.codec.apply(e.row, f.Set, time.Time{})
			if err != nil {
				return nil, fmt.Errorf("baton/memory: work rows: finalize: row %v: %w; nothing was finalized", f.ID, err)
			}
			owned[c][i], next[c][i] = true, r.(R)
		}
	}
	for c, cl := range claims {
		for i, f := range cl.Finals {
			if owned[c][i] {
				e := s.rows[f.ID]
				e.row, e.lock, e.until = next[c][i], workrow.LockID{}, f.VisibleAfter
			}
		}
	}
	return owned, nil
}

// RenewMany implements workrow.Store.
func (s *WorkRowStore[K, R]) RenewMany(ctx context.Context, lock workrow.LockID, until time.Time, ids []K) ([]bool, error) {
	if err := workrow.CheckRenew(lock, until, ids); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owned := make([]bool, len(ids))
	for i, id := range ids {
		if e := s.rows[id]; e != nil && e.lock == lock {
			e.until, owned[i] = until, true
		}
	}
	return owned, nil
}

// ReleaseMany implements workrow.Store.
func (s *WorkRowStore[K, R]) ReleaseMany(ctx context.Context, lock workrow.LockID, ids []K) ([]bool, error) {
	if err := workrow.CheckRelease(lock, ids); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	owned := make([]bool, len(ids))
	for i, id := range ids {
		if e := s.rows[id]; e != nil && e.lock == lock {
			e.lock, e.until, owned[i] = workrow.LockID{}, time.Time{}, true
		}
	}
	return owned, nil
}

// id is a row's id; the codec checked the field's type.
func (s *WorkRowStore[K, R]) id(r R) K {
	return s.codec.id(r).(K)
}

func (s *WorkRowStore[K, R]) state(id K, e *workRowEntry[R]) WorkRowState[K, R] {
	return WorkRowState[K, R]{ID: id, Row: s.codec.clone(e.row).(R), LockID: e.lock, LockedUntil: e.until}
}

// sortedIDs returns the ids in order; the caller holds the mutex.
func (s *WorkRowStore[K, R]) sortedIDs() []K {
	ids := make([]K, 0, len(s.rows))
	for id := range s.rows {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareIDs)
	return ids
}

func (s *WorkRowStore[K, R]) isLive(e *workRowEntry[R], now time.Time) (bool, error) {
	if s.live.IsZero() {
		return true, nil
	}
	ok, err := s.live.Eval(s.codec.columns(e.row), now)
	if err != nil {
		return false, fmt.Errorf("baton/memory: work rows: the live filter: %w", err)
	}
	return ok, nil
}

// checkSets refuses sets of a column R does not have, or of the id, with
// workrow.ErrInvalidSpec, before anything is looked at.
func (s *WorkRowStore[K, R]) checkSets(what string, sets []workrow.Set) error {
	for i, set := range sets {
		switch c := set.Column(); {
		case c == s.codec.idColumn:
			return fmt.Errorf("baton/memory: work rows: %w: %s[%d] sets the id column %q; a row keeps its id", workrow.ErrInvalidSpec, what, i, c)
		case !s.codec.has(c):
			return fmt.Errorf("baton/memory: work rows: %w: %s[%d] sets %q, which is no column of %s", workrow.ErrInvalidSpec, what, i, c, s.codec.typ)
		}
	}
	return nil
}

// compareIDs orders ids; NewWorkRowStore checked that CompareValues can.
func compareIDs[K comparable](a, b K) int {
	n, _ := workrow.CompareValues(a, b)
	return n
}
