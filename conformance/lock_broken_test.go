package conformance_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/memory"
)

// The suite is only worth something if it fails broken providers. Each case
// below wraps the memory provider with one defect; the suite runs against it
// in a child process (a failing suite must not fail this test binary), and
// the parent asserts the defect was caught by the subtest named for it.

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

var subtestResult = regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): TestBrokenProviderChild/(\w+)`)

func TestRunLockProvider_CatchesBrokenProviders(t *testing.T) {
	if os.Getenv(brokenEnv) != "" {
		t.Skip("child process")
	}
	for kind, bp := range brokenProviders {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenProviderChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+kind)
			out, err := cmd.CombinedOutput()
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) {
				t.Fatalf("the suite passed a provider whose %s (err=%v); output:\n%s", kind, err, out)
			}
			results := map[string]string{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				if m := subtestResult.FindStringSubmatch(sc.Text()); m != nil {
					results[m[2]] = m[1]
				}
			}
			for _, name := range bp.mustCatch {
				if results[name] != "FAIL" {
					t.Errorf("subtest %s did not catch %s (result %q)", name, kind, results[name])
				}
			}
			for _, name := range bp.mustPassAt {
				if results[name] != "PASS" {
					t.Errorf("subtest %s should pass for %s but got %q", name, kind, results[name])
				}
			}
			if t.Failed() {
				names := make([]string, 0, len(results))
				for n, r := range results {
					names = append(names, n+"="+r)
				}
				sort.Strings(names)
				t.Logf("child results: %v\noutput:\n%s", names, out)
			}
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
