package conformance_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/workrow"
)

// memWorkRows is an in-memory store over the suite's table, written as
// plainly as possible with the core evaluation helpers: the reference the
// suite is checked against, and the base of the broken stores.
type memWorkRows struct {
	mu   sync.Mutex
	rows map[int64]*conformance.WorkRowState
}

func newMemWorkRows() *memWorkRows { return &memWorkRows{rows: map[int64]*conformance.WorkRowState{}} }

var _ workrow.Store[int64, conformance.WorkRow] = (*memWorkRows)(nil)

func wrColumns(r *conformance.WorkRowState) workrow.RowFunc {
	return func(col string) (any, bool) {
		switch col {
		case "id":
			return r.ID, true
		case "seq":
			return r.Seq, true
		case "attempts":
			return r.Attempts, true
		case "completed_at":
			return r.CompletedAt, true
		case "last_error":
			return r.LastError, true
		}
		return nil, false
	}
}

func wrAssign(r *conformance.WorkRowState, col string, v any) error {
	switch col {
	case "seq":
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("seq: %T", v)
		}
		r.Seq = n
	case "attempts":
		n, ok := v.(int)
		if !ok {
			return fmt.Errorf("attempts: %T", v)
		}
		r.Attempts = n
	case "completed_at":
		switch t := v.(type) {
		case nil:
			r.CompletedAt = nil
		case time.Time:
			r.CompletedAt = &t
		default:
			return fmt.Errorf("completed_at: %T", v)
		}
	case "last_error":
		switch s := v.(type) {
		case nil:
			r.LastError = nil
		case string:
			r.LastError = &s
		default:
			return fmt.Errorf("last_error: %T", v)
		}
	default:
		return fmt.Errorf("no column %q", col)
	}
	return nil
}

// apply applies sets to a copy of r, all computed from the old values.
func wrApply(r *conformance.WorkRowState, sets []workrow.Set, now time.Time) error {
	next := *r
	for _, s := range sets {
		v, err := s.Apply(wrColumns(r), now)
		if err != nil {
			return err
		}
		if err := wrAssign(&next, s.Column(), v); err != nil {
			return err
		}
	}
	*r = next
	return nil
}

func (m *memWorkRows) Claim(_ context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	return m.claimUnchecked(spec)
}

func (m *memWorkRows) claimUnchecked(spec workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var due []*conformance.WorkRowState
	for _, r := range m.rows {
		if !r.LockedUntil.IsZero() && r.LockedUntil.After(spec.Now) {
			continue
		}
		ok, err := spec.Eligible.Eval(wrColumns(r), spec.Now)
		if err != nil {
			return nil, err
		}
		if ok {
			due = append(due, r)
		}
	}
	slices.SortFunc(due, func(a, b *conformance.WorkRowState) int {
		n, _ := workrow.CompareOrder(spec.Order, wrColumns(a), wrColumns(b))
		if n == 0 {
			n = int(a.ID - b.ID)
		}
		return n
	})
	due = due[:min(len(due), spec.BatchSize)]
	out := make([]workrow.Claimed[int64, conformance.WorkRow], 0, len(due))
	for _, r := range due {
		if err := wrApply(r, spec.OnClaim, spec.Now); err != nil {
			return nil, err
		}
		r.LockID, r.LockedUntil = spec.LockID, spec.LeaseUntil
		out = append(out, workrow.Claimed[int64, conformance.WorkRow]{ID: r.ID, Row: r.WorkRow})
	}
	return out, nil
}

func (m *memWorkRows) FinalizeMany(_ context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	if err := workrow.CheckFinalize(lock, finals); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	owned := make([]bool, len(finals))
	for i, f := range finals {
		r := m.rows[f.ID]
		if r == nil || r.LockID != lock {
			continue
		}
		if err := wrApply(r, f.Set, time.Time{}); err != nil {
			return nil, err
		}
		r.LockID, r.LockedUntil = workrow.LockID{}, f.VisibleAfter
		owned[i] = true
	}
	return owned, nil
}

func (m *memWorkRows) RenewMany(_ context.Context, lock workrow.LockID, until time.Time, ids []int64) ([]bool, error) {
	if err := workrow.CheckRenew(lock, until, ids); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	owned := make([]bool, len(ids))
	for i, id := range ids {
		if r := m.rows[id]; r != nil && r.LockID == lock {
			r.LockedUntil, owned[i] = until, true
		}
	}
	return owned, nil
}

func (m *memWorkRows) ReleaseMany(_ context.Context, lock workrow.LockID, ids []int64) ([]bool, error) {
	if err := workrow.CheckRelease(lock, ids); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	owned := make([]bool, len(ids))
	for i, id := range ids {
		if r := m.rows[id]; r != nil && r.LockID == lock {
			r.LockID, r.LockedUntil, owned[i] = workrow.LockID{}, time.Time{}, true
		}
	}
	return owned, nil
}

// harness returns the suite's harness over m, with store as the store
// under test (m itself or a broken wrapper of it).
func (m *memWorkRows) harness(store workrow.Store[int64, conformance.WorkRow]) conformance.WorkRowsHarness {
	return conformance.WorkRowsHarness{
		Store: store,
		Insert: func(_ context.Context, rows []conformance.WorkRow) error {
			m.mu.Lock()
			defer m.mu.Unlock()
			for _, r := range rows {
				if _, dup := m.rows[r.ID]; dup {
					return fmt.Errorf("row %d exists", r.ID)
				}
				m.rows[r.ID] = &conformance.WorkRowState{WorkRow: r}
			}
			return nil
		},
		Read: func(context.Context) ([]conformance.WorkRowState, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			out := make([]conformance.WorkRowState, 0, len(m.rows))
			for _, r := range m.rows {
				out = append(out, *r)
			}
			return out, nil
		},
		ClaimIndexed: func(context.Context) ([]int64, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			var ids []int64
			for id, r := range m.rows {
				if ok, err := conformance.WorkRowsLive.Eval(wrColumns(r), time.Time{}); err != nil {
					return nil, err
				} else if ok {
					ids = append(ids, id)
				}
			}
			return ids, nil
		},
	}
}
