package conformance_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/memory"
)

// Each case below wraps the memory lock provider with one defect; see
// brokenChild for how the suite is run against it.

const brokenEnv = "BATON_CONFORMANCE_BROKEN"

var brokenProviders = map[string]struct {
	wrap       func(*memory.Provider) lock.Provider
	mustCatch  []string // subtests that must fail
	mustPassAt []string // subtests that must still pass (the harness itself works)
}{
	"release-does-nothing": {
		wrap:       func(p *memory.Provider) lock.Provider { return noopRelease{p} },
		mustCatch:  []string{"ReleaseLetsWaiterIn", "ReleaseClosesLost"},
		mustPassAt: []string{"InvalidNames", "WaitElapses"},
	},
	"tokens-repeat": {
		wrap:       func(p *memory.Provider) lock.Provider { return repeatTokens{p} },
		mustCatch:  []string{"TokensStrictlyIncrease", "MutualExclusion"},
		mustPassAt: []string{"LostClosesAfterTakeAway", "WaitElapses"},
	},
	"lost-never-closes": {
		wrap:       func(p *memory.Provider) lock.Provider { return neverLost{p} },
		mustCatch:  []string{"LostClosesAfterTakeAway", "ReleaseAfterLoss"},
		mustPassAt: []string{"TokensStrictlyIncrease", "MutualExclusion"},
	},
	"trusted-ignores-the-hold": {
		wrap:       func(p *memory.Provider) lock.Provider { return alwaysTrusted{p} },
		mustCatch:  []string{"TrustedEndsWithTheHold"},
		mustPassAt: []string{"LostClosesAfterTakeAway", "ReleaseClosesLost", "MutualExclusion"},
	},
	"no-exclusion": {
		wrap:       func(p *memory.Provider) lock.Provider { return noExclusion{p} },
		mustCatch:  []string{"MutualExclusion", "WaitElapses", "ZeroWaitTriesOnce"},
		mustPassAt: []string{"InvalidNames"},
	},
}

// TestBrokenProviderChild is the child half: it runs only when the parent
// sets brokenEnv, and is expected to fail.
func TestBrokenProviderChild(t *testing.T) {
	kind := os.Getenv(brokenEnv)
	if kind == "" {
		t.Skip("runs only as the child of TestRunLockProvider_CatchesBrokenProviders")
	}
	bp, ok := brokenProviders[kind]
	if !ok {
		t.Fatalf("unknown broken provider %q", kind)
	}
	conformance.RunLockProvider(t, func(t *testing.T) conformance.LockHarness {
		p, err := memory.New(memory.Options{TTL: 600 * time.Millisecond, SafetyMargin: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return conformance.LockHarness{
			Provider: bp.wrap(p),
			TakeAway: func(_ context.Context, name string) error {
				p.TakeAway(name)
				return nil
			},
		}
	}, conformance.LockFeatures{LossDetection: time.Second})
}

func TestRunLockProvider_CatchesBrokenProviders(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("child process")
	}
	for kind, bp := range brokenProviders {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			brokenChild{
				Test: "TestBrokenProviderChild", Env: brokenEnv, Kind: kind, What: "provider",
				MustCatch: bp.mustCatch, MustPassAt: bp.mustPassAt,
			}.run(t)
		})
	}
}

// noopRelease reports success from Release but keeps holding.
type noopRelease struct{ p *memory.Provider }

func (b noopRelease) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := b.p.Acquire(ctx, name, o)
	if err != nil {
		return nil, err
	}
	return noopReleaseLock{l}, nil
}

type noopReleaseLock struct{ lock.Lock }

func (noopReleaseLock) Release(context.Context) error { return nil }

// repeatTokens hands every holder the same token.
type repeatTokens struct{ p *memory.Provider }

func (b repeatTokens) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := b.p.Acquire(ctx, name, o)
	if err != nil {
		return nil, err
	}
	return repeatTokenLock{l}, nil
}

type repeatTokenLock struct{ lock.Lock }

func (repeatTokenLock) Token() uint64 { return 7 }

// neverLost returns a Lost channel that never closes.
type neverLost struct{ p *memory.Provider }

func (b neverLost) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := b.p.Acquire(ctx, name, o)
	if err != nil {
		return nil, err
	}
	return neverLostLock{l, make(chan struct{})}, nil
}

type neverLostLock struct {
	lock.Lock
	never chan struct{}
}

func (l neverLostLock) Lost() <-chan struct{} { return l.never }

// alwaysTrusted reports Trusted whatever became of the hold.
type alwaysTrusted struct{ p *memory.Provider }

func (b alwaysTrusted) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := b.p.Acquire(ctx, name, o)
	if err != nil {
		return nil, err
	}
	return alwaysTrustedLock{l}, nil
}

type alwaysTrustedLock struct{ lock.Lock }

func (alwaysTrustedLock) Trusted() bool { return true }

// noExclusion grants every Acquire at once, with a fresh provider per call.
type noExclusion struct{ p *memory.Provider }

func (b noExclusion) Acquire(ctx context.Context, name string, o lock.AcquireOptions) (lock.Lock, error) {
	l, err := b.p.Acquire(ctx, name, lock.AcquireOptions{Wait: 0})
	if errors.Is(err, lock.ErrNotAcquired) {
		fresh, _ := memory.New(memory.Options{})
		return fresh.Acquire(ctx, name, o)
	}
	return l, err
}
