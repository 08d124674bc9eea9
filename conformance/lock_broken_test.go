package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lock"
	lockmem "github.com/baton-go/baton/locks/memory"
)

// lockVariant is the memory lock provider with one rule of lock.Provider
// or lock.Lock broken.
type lockVariant struct {
	variant
	wrap func(p *lockmem.Provider) lock.Provider
}

var lockVariants = []lockVariant{
	{variant{"name-not-kept", "K1", "AcquireHoldsAFreeLock"},
		func(p *lockmem.Provider) lock.Provider {
			return lockWrap{p: p, lock: func(l lock.Lock) lock.Lock { return namelessLock{l} }}
		}},
	{variant{"no-exclusion", "K2", "MutualExclusion"},
		func(p *lockmem.Provider) lock.Provider { return noExclusion{p} }},
	{variant{"tokens-repeat", "K3", "TokensStrictlyIncrease"},
		func(p *lockmem.Provider) lock.Provider {
			return lockWrap{p: p, lock: func(l lock.Lock) lock.Lock { return repeatTokenLock{l} }}
		}},
	{variant{"wait-ignored", "K4", "WaitElapses"},
		func(p *lockmem.Provider) lock.Provider {
			return waitAs{p, func(time.Duration) time.Duration { return 0 }}
		}},
	{variant{"zero-wait-waits", "K5", "ZeroWaitTriesOnce"},
		func(p *lockmem.Provider) lock.Provider {
			return waitAs{p, func(w time.Duration) time.Duration {
				if w == 0 {
					return 2 * time.Second
				}
				return w
			}}
		}},
	{variant{"cancel-loses-the-cause", "K6", "ContextCancelEndsWait"},
		func(p *lockmem.Provider) lock.Provider { return causeLost{p} }},
	{variant{"release-frees-late", "K9", "ReleaseLetsWaiterIn"},
		func(p *lockmem.Provider) lock.Provider {
			return lockWrap{p: p, lock: func(l lock.Lock) lock.Lock { return lateRelease{l} }}
		}},
	{variant{"release-leaves-lost-open", "K10", "ReleaseClosesLost"},
		func(p *lockmem.Provider) lock.Provider {
			return lockWrap{p: p, lock: func(l lock.Lock) lock.Lock { return &lostOpenAfterRelease{Lock: l} }}
		}},
	{variant{"second-release-succeeds", "K10", "ReleaseClosesLost"},
		func(p *lockmem.Provider) lock.Provider {
			return lockWrap{p: p, lock: func(l lock.Lock) lock.Lock { return &releaseTwice{Lock: l} }}
		}},
	{variant{"lost-never-closes", "K11", "LostClosesAfterTakeAway"},
		func(p *lockmem.Provider) lock.Provider {
			return lockWrap{p: p, lock: func(l lock.Lock) lock.Lock { return neverLostLock{l, make(chan struct{})} }}
		}},
	{variant{"stale-release-frees-the-successor", "K12", "ReleaseAfterLoss"},
		func(p *lockmem.Provider) lock.Provider {
			return lockWrap{p: p, lock: func(l lock.Lock) lock.Lock { return forcefulRelease{l, p} }}
		}},
	{variant{"trusted-ignores-the-hold", "K13", "TrustedEndsWithTheHold"},
		func(p *lockmem.Provider) lock.Provider {
			return lockWrap{p: p, lock: func(l lock.Lock) lock.Lock { return alwaysTrusted{l} }}
		}},
	{variant{"invalid-name-without-the-sentinel", "K7", "InvalidNames"},
		func(p *lockmem.Provider) lock.Provider { return plainErrors{p, lock.ErrInvalidName} }},
	{variant{"invalid-options-without-the-sentinel", "K8", "InvalidOptions"},
		func(p *lockmem.Provider) lock.Provider { return plainErrors{p, lock.ErrInvalidOptions} }},
}

func lockBroken() brokenSuite {
	return newBrokenSuite("RunLockProvider", "TestBrokenLockProviderChild", "BATON_CONFORMANCE_BROKEN_LOCK", lockVariants)
}

func TestRunLockProvider_FailsEveryBrokenProvider(t *testing.T) { lockBroken().run(t) }

// TestBrokenLockProviderChild runs the suite against the variant its
// parent names, and is expected to fail.
func TestBrokenLockProviderChild(t *testing.T) {
	v := chosen(t, lockBroken().env, lockVariants)
	conformance.RunLockProvider(t, func(t *testing.T) conformance.LockHarness {
		p := newLockProvider(t)
		return lockHarness(p, v.wrap(p))
	}, lockFeatures)
}

// lockWrap hands out the provider's locks through lock.
type lockWrap struct {
	p    lock.Provider
	lock func(lock.Lock) lock.Lock
}

func (w lockWrap) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := w.p.Acquire(ctx, name, o)
	if err != nil {
		return nil, err
	}
	return w.lock(l), nil
}

// namelessLock forgets the name it was acquired under.
type namelessLock struct{ lock.Lock }

func (namelessLock) Name() string { return "" }

// noExclusion grants every Acquire at once, from a fresh provider when the
// lock is held.
type noExclusion struct{ p *lockmem.Provider }

func (b noExclusion) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := b.p.Acquire(ctx, name, lock.AcquireOptions{})
	if errors.Is(err, lock.ErrNotAcquired) {
		fresh, _ := lockmem.NewProvider(lockmem.Options{})
		return fresh.Acquire(ctx, name, o)
	}
	return l, err
}

// repeatTokenLock hands every holder the same token.
type repeatTokenLock struct{ lock.Lock }

func (repeatTokenLock) Token() uint64 { return 7 }

// waitAs replaces the caller's Wait.
type waitAs struct {
	p    lock.Provider
	wait func(time.Duration) time.Duration
}

func (b waitAs) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	o.Wait = b.wait(o.Wait)
	return b.p.Acquire(ctx, name, o)
}

// causeLost gives up when the context ends, but with an error of its own
// that no longer says why.
type causeLost struct{ p lock.Provider }

func (b causeLost) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := b.p.Acquire(ctx, name, o)
	if ctx.Err() != nil && err != nil {
		return nil, errors.New("gave up waiting")
	}
	return l, err
}

// lateRelease reports the release at once and lets go three seconds later.
type lateRelease struct{ lock.Lock }

func (l lateRelease) Release(context.Context) error {
	time.AfterFunc(3*time.Second, func() { _ = l.Lock.Release(context.Background()) })
	return nil
}

// lostOpenAfterRelease releases, but its Lost, asked for afterwards, is a
// channel that never closes.
type lostOpenAfterRelease struct {
	lock.Lock
	mu       sync.Mutex
	released bool
}

func (l *lostOpenAfterRelease) Release(ctx context.Context) error {
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	return l.Lock.Release(ctx)
}

func (l *lostOpenAfterRelease) Lost() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return make(chan struct{})
	}
	return l.Lock.Lost()
}

// releaseTwice answers a second Release of its own with success.
type releaseTwice struct {
	lock.Lock
	mu       sync.Mutex
	released bool
}

func (l *releaseTwice) Release(ctx context.Context) error {
	l.mu.Lock()
	again := l.released
	l.released = true
	l.mu.Unlock()
	if again {
		return nil
	}
	return l.Lock.Release(ctx)
}

// neverLostLock returns a Lost channel that never closes.
type neverLostLock struct {
	lock.Lock
	never chan struct{}
}

func (l neverLostLock) Lost() <-chan struct{} { return l.never }

// forcefulRelease, when its own hold is gone, frees the name anyway, and
// with it whoever holds it now.
type forcefulRelease struct {
	lock.Lock
	p *lockmem.Provider
}

func (l forcefulRelease) Release(ctx context.Context) error {
	err := l.Lock.Release(ctx)
	if errors.Is(err, lock.ErrNotHeld) {
		l.p.TakeAway(l.Name())
	}
	return err
}

// alwaysTrusted reports Trusted whatever became of the hold.
type alwaysTrusted struct{ lock.Lock }

func (alwaysTrusted) Trusted() bool { return true }

// plainErrors refuses what the provider refuses with sentinel, but with an
// error of its own: callers cannot tell bad input from a failure.
type plainErrors struct {
	p        lock.Provider
	sentinel error
}

func (b plainErrors) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := b.p.Acquire(ctx, name, o)
	if errors.Is(err, b.sentinel) {
		return nil, fmt.Errorf("refused: %v", err)
	}
	return l, err
}
