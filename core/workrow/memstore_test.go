package workrow_test

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// memStore is a small in-memory workrow.Store for the tests and examples of
// this package: rows are column maps keyed by an int64 id, converted to and
// from R by two functions. It evaluates conditions and sets with the core
// helpers, the way a reference store would.
type memStore[R any] struct {
	toCols   func(R) map[string]any
	fromCols func(id int64, cols map[string]any) R

	mu   sync.Mutex
	rows map[int64]*memRow

	// Faults and counters, for tests.
	claimErr    error
	renewErr    error
	finalizeErr error
	claims      int
	finalizes   [][]workrow.Final[int64]
	renews      [][]int64
	releases    [][]int64
}

type memRow struct {
	cols  map[string]any
	lock  workrow.LockID
	until time.Time // zero is NULL
}

func newMemStore[R any](toCols func(R) map[string]any, fromCols func(int64, map[string]any) R) *memStore[R] {
	return &memStore[R]{toCols: toCols, fromCols: fromCols, rows: map[int64]*memRow{}}
}

var _ workrow.Store[int64, int] = (*memStore[int])(nil)

func (s *memStore[R]) insert(id int64, r R) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows[id] = &memRow{cols: s.toCols(r)}
}

// get returns a row's columns and lock.
func (s *memStore[R]) get(id int64) (R, workrow.LockID, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[id]
	return s.fromCols(id, maps.Clone(r.cols)), r.lock, r.until
}

// steal puts another worker's lock on a row, as a claim after expiry would.
func (s *memStore[R]) steal(id int64, until time.Time) workrow.LockID {
	s.mu.Lock()
	defer s.mu.Unlock()
	lock := workrow.NewLockID()
	s.rows[id].lock, s.rows[id].until = lock, until
	return lock
}

func (r *memRow) fn(id int64) workrow.RowFunc {
	return func(col string) (any, bool) {
		if col == "id" {
			return id, true
		}
		v, ok := r.cols[col]
		return v, ok
	}
}

func (s *memStore[R]) Claim(_ context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, R], error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims++
	if s.claimErr != nil {
		return nil, s.claimErr
	}
	var ids []int64
	for id, r := range s.rows {
		if !r.until.IsZero() && r.until.After(spec.Now) {
			continue
		}
		ok, err := spec.Eligible.Eval(r.fn(id), spec.Now)
		if err != nil {
			return nil, err
		}
		if ok {
			ids = append(ids, id)
		}
	}
	var sortErr error
	slices.SortFunc(ids, func(a, b int64) int {
		n, err := workrow.CompareOrder(spec.Order, s.rows[a].fn(a), s.rows[b].fn(b))
		if err != nil {
			sortErr = err
		}
		if n != 0 {
			return n
		}
		return int(a - b)
	})
	if sortErr != nil {
		return nil, sortErr
	}
	ids = ids[:min(len(ids), spec.BatchSize)]
	out := make([]workrow.Claimed[int64, R], 0, len(ids))
	for _, id := range ids {
		r := s.rows[id]
		if err := apply(r, id, spec.OnClaim, spec.Now); err != nil {
			return nil, err
		}
		r.lock, r.until = spec.LockID, spec.LeaseUntil
		out = append(out, workrow.Claimed[int64, R]{ID: id, Row: s.fromCols(id, maps.Clone(r.cols))})
	}
	return out, nil
}

func apply(r *memRow, id int64, sets []workrow.Set, now time.Time) error {
	next := maps.Clone(r.cols)
	for _, set := range sets {
		v, err := set.Apply(r.fn(id), now)
		if err != nil {
			return err
		}
		next[set.Column()] = v
	}
	r.cols = next
	return nil
}

func (s *memStore[R]) FinalizeMany(_ context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	if err := workrow.CheckFinalize(lock, finals); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finalizes = append(s.finalizes, slices.Clone(finals))
	if s.finalizeErr != nil {
		return nil, s.finalizeErr
	}
	owned := make([]bool, len(finals))
	for i, f := range finals {
		r := s.rows[f.ID]
		if r == nil || r.lock != lock {
			continue
		}
		if err := apply(r, f.ID, f.Set, time.Time{}); err != nil {
			return nil, err
		}
		r.lock, r.until = workrow.LockID{}, f.VisibleAfter
		owned[i] = true
	}
	return owned, nil
}

func (s *memStore[R]) RenewMany(_ context.Context, lock workrow.LockID, until time.Time, ids []int64) ([]bool, error) {
	if err := workrow.CheckRenew(lock, until, ids); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renews = append(s.renews, slices.Clone(ids))
	if s.renewErr != nil {
		return nil, s.renewErr
	}
	owned := make([]bool, len(ids))
	for i, id := range ids {
		if r := s.rows[id]; r != nil && r.lock == lock {
			r.until = until
			owned[i] = true
		}
	}
	return owned, nil
}

func (s *memStore[R]) ReleaseMany(_ context.Context, lock workrow.LockID, ids []int64) ([]bool, error) {
	if err := workrow.CheckRelease(lock, ids); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = append(s.releases, slices.Clone(ids))
	owned := make([]bool, len(ids))
	for i, id := range ids {
		if r := s.rows[id]; r != nil && r.lock == lock {
			r.lock, r.until = workrow.LockID{}, time.Time{}
			owned[i] = true
		}
	}
	return owned, nil
}

// counts returns the number of claims and of finalize calls so far.
func (s *memStore[R]) counts() (claims, finalizes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims, len(s.finalizes)
}
