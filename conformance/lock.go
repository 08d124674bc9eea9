package conformance

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lock"
)

// LockHarness is what a lock provider's factory returns for one subtest.
type LockHarness struct {
	// Provider is the provider under test.
	Provider lock.Provider
	// Second, if set, is another provider over the same store, as a second
	// node would have it (its own client or pool). Contention subtests
	// spread their goroutines over both. nil means Provider alone.
	Second lock.Provider
	// TakeAway removes the current hold on name behind its holder's back,
	// the way an outage or an operator would: delete the key, terminate
	// the backend holding the session. Required.
	TakeAway func(ctx context.Context, name string) error
}

// LockFeatures declares what a provider cannot do or how slow it may be.
// The zero value expects everything, with default bounds.
type LockFeatures struct {
	// NoFencing means Token is always 0; the token subtests check that
	// instead of monotonicity.
	NoFencing bool
	// LossDetection bounds how long after TakeAway the holder's Lost must
	// close. 0 means 5s.
	LossDetection time.Duration
	// Handoff bounds how long a waiting Acquire takes to get a lock after
	// its holder releases it. 0 means 1s.
	Handoff time.Duration
}

func (f LockFeatures) withDefaults() LockFeatures {
	if f.LossDetection == 0 {
		f.LossDetection = 5 * time.Second
	}
	if f.Handoff == 0 {
		f.Handoff = time.Second
	}
	return f
}

// Contention parameters of the mutual-exclusion subtest.
const (
	lockContenders   = 8
	lockAcquisitions = 200
	// contentionWait bounds one acquisition under contention; a provider
	// that never lets go fails here instead of hanging the suite.
	contentionWait = 10 * time.Second
)

// RunLockProvider runs the lock.Provider contract against the providers the
// factory returns: one subtest per rule written on lock.Provider and
// lock.Lock (K1, K2, ...), named as docs/adapters.md lists them.
func RunLockProvider(t *testing.T, factory func(t *testing.T) LockHarness, features LockFeatures) {
	runChecks(t, newLockSuite(factory, features).checks())
}

type lockSuite struct {
	factory func(t *testing.T) LockHarness
	f       LockFeatures
}

func newLockSuite(factory func(t *testing.T) LockHarness, features LockFeatures) *lockSuite {
	return &lockSuite{factory: factory, f: features.withDefaults()}
}

// checks lists the suite's subtests, area by area.
func (s *lockSuite) checks() []check {
	return concat(s.acquireChecks(), s.releaseChecks())
}

// lockBundle is what every lock subtest starts from.
type lockBundle struct {
	h   LockHarness
	ctx context.Context
}

// setup is the setup of both lock areas: a fresh harness.
func (s *lockSuite) setup(t *testing.T) lockBundle {
	t.Helper()
	h := s.factory(t)
	if h.Provider == nil {
		t.Fatal("conformance: the factory returned no Provider")
	}
	if h.TakeAway == nil {
		t.Fatal("conformance: the factory returned no TakeAway")
	}
	if h.Second == nil {
		h.Second = h.Provider
	}
	// Every lock a subtest is handed is released when the subtest ends,
	// however it ends. A lock may hold a resource the harness's own
	// cleanup waits for (a pool's Close waits for the session an advisory
	// lock keeps), so a subtest failing before its Release would otherwise
	// hang there instead of reporting. This cleanup runs before the
	// factory's, which were registered first.
	held := &heldLocks{}
	t.Cleanup(held.releaseAll)
	h.Provider = trackedProvider{h.Provider, held}
	h.Second = trackedProvider{h.Second, held}
	return lockBundle{h: h, ctx: testCtx(t)}
}

// heldLocks records every lock handed out in one subtest.
type heldLocks struct {
	mu    sync.Mutex
	locks []lock.Lock
}

func (h *heldLocks) add(l lock.Lock) {
	h.mu.Lock()
	h.locks = append(h.locks, l)
	h.mu.Unlock()
}

// releaseAll releases each recorded lock; one already released answers
// ErrNotHeld, which is ignored like every other error here.
func (h *heldLocks) releaseAll() {
	h.mu.Lock()
	locks := h.locks
	h.locks = nil
	h.mu.Unlock()
	for _, l := range locks {
		releaseQuietly(l)
	}
}

// trackedProvider records the locks its provider hands out, and hands
// them out unchanged.
type trackedProvider struct {
	lock.Provider
	held *heldLocks
}

func (p trackedProvider) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	l, err := p.Provider.Acquire(ctx, name, opts)
	if l != nil {
		p.held.add(l)
	}
	return l, err
}

func mustAcquire(t *testing.T, ctx context.Context, p lock.Provider, name string, wait time.Duration) lock.Lock {
	t.Helper()
	l, err := p.Acquire(ctx, name, lock.AcquireOptions{Wait: wait})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	if l == nil {
		t.Fatalf("Acquire(%q) returned a nil Lock and no error", name)
	}
	return l
}

func releaseQuietly(l lock.Lock) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = l.Release(ctx)
}

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
