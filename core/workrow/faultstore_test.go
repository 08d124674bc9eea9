package workrow_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/workrow"
)

// memStore is the reference memory store with what this package's tests
// need around it: injected failures, and a record of the calls made.
type memStore[R any] struct {
	*memory.WorkRowStore[int64, R]

	mu          sync.Mutex
	claimErr    error
	renewErr    error
	finalizeErr error
	claims      int
	finalizes   [][]workrow.Final[int64] // one per claim finalized, by either method
	claimsCalls []int                    // FinalizeClaims calls: claims in each
	// onFinalizeClaims, when set, runs in each FinalizeClaims call before
	// it applies anything, with the call's claim count.
	onFinalizeClaims func(claims int)
	renews           [][]int64
	releases         [][]int64
}

var (
	_ workrow.Store[int64, job]      = (*memStore[job])(nil)
	_ workrow.ClaimsFinalizer[int64] = (*memStore[job])(nil)
)

// perClaim is a Store that is no ClaimsFinalizer: a Worker over it
// finalizes each claim on its own.
type perClaim[R any] struct{ workrow.Store[int64, R] }

func newMemStore[R any]() *memStore[R] {
	st, err := memory.NewWorkRowStore[int64, R](memory.WorkRowStoreOptions{})
	if err != nil {
		panic(err)
	}
	return &memStore[R]{WorkRowStore: st}
}

func (s *memStore[R]) insert(r R) {
	if err := s.Insert(context.Background(), r); err != nil {
		panic(err)
	}
}

// get returns a row and its lock columns.
func (s *memStore[R]) get(id int64) (R, workrow.LockID, time.Time) {
	r, found, err := s.Row(context.Background(), id)
	if err != nil || !found {
		panic(fmt.Sprintf("no row %d (%v)", id, err))
	}
	return r.Row, r.LockID, r.LockedUntil
}

// steal puts another worker's lock on a row, as a claim after its lease
// ran out would, and returns that lock.
func (s *memStore[R]) steal(id int64, until time.Time) workrow.LockID {
	r, _, err := s.Row(context.Background(), id)
	if err != nil {
		panic(err)
	}
	lock := workrow.NewLockID()
	got, err := s.WorkRowStore.Claim(context.Background(), workrow.ClaimSpec{
		LockID: lock, Now: r.LockedUntil, LeaseUntil: until, BatchSize: 1, Eligible: workrow.Eq("id", id),
	})
	if err != nil || len(got) != 1 {
		panic("steal: the row could not be claimed")
	}
	return lock
}

func (s *memStore[R]) Claim(ctx context.Context, spec workrow.ClaimSpec) ([]workrow.Claimed[int64, R], error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.claims++
	err := s.claimErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.WorkRowStore.Claim(ctx, spec)
}

func (s *memStore[R]) FinalizeMany(ctx context.Context, lock workrow.LockID, finals []workrow.Final[int64]) ([]bool, error) {
	if err := workrow.CheckFinalize(lock, finals); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.finalizes = append(s.finalizes, slices.Clone(finals))
	err := s.finalizeErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.WorkRowStore.FinalizeMany(ctx, lock, finals)
}

// FinalizeClaims records each claim's part as a finalize of its own, and
// the call's claim count in finalizeCalls.
func (s *memStore[R]) FinalizeClaims(ctx context.Context, claims []workrow.ClaimFinals[int64]) ([][]bool, error) {
	if err := workrow.CheckClaims(claims); err != nil {
		return nil, err
	}
	s.mu.Lock()
	for _, c := range claims {
		s.finalizes = append(s.finalizes, slices.Clone(c.Finals))
	}
	s.claimsCalls = append(s.claimsCalls, len(claims))
	err, hook := s.finalizeErr, s.onFinalizeClaims
	s.mu.Unlock()
	if hook != nil {
		hook(len(claims))
	}
	if err != nil {
		return nil, err
	}
	return s.WorkRowStore.FinalizeClaims(ctx, claims)
}

func (s *memStore[R]) RenewMany(ctx context.Context, lock workrow.LockID, until time.Time, ids []int64) ([]bool, error) {
	if err := workrow.CheckRenew(lock, until, ids); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.renews = append(s.renews, slices.Clone(ids))
	err := s.renewErr
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return s.WorkRowStore.RenewMany(ctx, lock, until, ids)
}

func (s *memStore[R]) ReleaseMany(ctx context.Context, lock workrow.LockID, ids []int64) ([]bool, error) {
	if err := workrow.CheckRelease(lock, ids); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.releases = append(s.releases, slices.Clone(ids))
	s.mu.Unlock()
	return s.WorkRowStore.ReleaseMany(ctx, lock, ids)
}

// counts returns the number of claims and of finalize calls so far.
func (s *memStore[R]) counts() (claims, finalizes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claims, len(s.finalizes)
}
