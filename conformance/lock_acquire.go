package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lock"
)

// Acquiring: exclusion, fencing tokens, waiting, and what Acquire refuses.

func (s *lockSuite) acquireChecks() []check {
	return area(s.setup,
		subtest[lockBundle]{"AcquireHoldsAFreeLock", s.acquiresAFreeLock},
		subtest[lockBundle]{"MutualExclusion", s.mutualExclusion},
		subtest[lockBundle]{"TokensStrictlyIncrease", s.tokensIncrease},
		subtest[lockBundle]{"WaitElapses", s.waitElapses},
		subtest[lockBundle]{"ZeroWaitTriesOnce", s.zeroWait},
		subtest[lockBundle]{"ContextCancelEndsWait", s.contextCancel},
		subtest[lockBundle]{"InvalidNames", s.invalidNames},
		subtest[lockBundle]{"InvalidOptions", s.invalidOptions},
	)
}

// acquiresAFreeLock: a free lock is held at once, under its name, and is
// trusted until something ends it.
func (s *lockSuite) acquiresAFreeLock(t *testing.T, env lockBundle) {
	name := uniqueName(t, "free")
	l := mustAcquire(t, env.ctx, env.h.Provider, name, 0)
	defer releaseQuietly(l)
	if l.Name() != name {
		t.Errorf("Name() = %q, want the name acquired, %q", l.Name(), name)
	}
	if isClosed(l.Lost()) {
		t.Error("Lost is closed on a freshly acquired lock")
	}
	if !l.Trusted() {
		t.Error("Trusted() is false on a freshly acquired lock")
	}
	// Another name is another lock, free too.
	other := uniqueName(t, "other")
	o := mustAcquire(t, env.ctx, env.h.Second, other, 0)
	defer releaseQuietly(o)
	if o.Name() != other {
		t.Errorf("Name() = %q, want %q", o.Name(), other)
	}
}

// mutualExclusion: many goroutines on two providers take the same lock over
// and over; a shared counter proves no two were ever inside at once, and the
// tokens, recorded inside, must rise in the order the holders came in.
func (s *lockSuite) mutualExclusion(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
	name := uniqueName(t, "mutex")

	var (
		inside     atomic.Int32
		violations atomic.Int32
		mu         sync.Mutex
		tokens     []uint64
		wg         sync.WaitGroup
		errs       = make(chan error, lockContenders)
	)
	for g := range lockContenders {
		p := h.Provider
		if g%2 == 1 {
			p = h.Second
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range lockAcquisitions {
				l, err := p.Acquire(ctx, name, lock.AcquireOptions{Wait: contentionWait})
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, acquisition %d: %w", g, i, err)
					return
				}
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				time.Sleep(20 * time.Microsecond) // a critical section long enough to overlap
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					errs <- fmt.Errorf("goroutine %d, release %d: %w", g, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := violations.Load(); n > 0 {
		t.Fatalf("two holders were inside the critical section at once, %d times", n)
	}
	if t.Failed() {
		return
	}
	if len(tokens) != lockContenders*lockAcquisitions {
		t.Fatalf("%d acquisitions recorded, want %d", len(tokens), lockContenders*lockAcquisitions)
	}
	if !s.f.NoFencing {
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("token of acquisition %d is %d, not above the previous holder's %d", i, tokens[i], tokens[i-1])
			}
		}
	}
}

func (s *lockSuite) tokensIncrease(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
	name := uniqueName(t, "tokens")
	var prev uint64
	for i := range 20 {
		p := h.Provider
		if i%2 == 1 {
			p = h.Second
		}
		l := mustAcquire(t, ctx, p, name, 0)
		tok := l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if s.f.NoFencing {
			if tok != 0 {
				t.Fatalf("a provider declared NoFencing issued token %d", tok)
			}
			continue
		}
		if tok == 0 {
			t.Fatalf("acquisition %d got token 0; a fencing provider must issue tokens from 1", i)
		}
		if tok <= prev {
			t.Fatalf("acquisition %d got token %d, not above the previous %d", i, tok, prev)
		}
		prev = tok
	}
	// Another name has its own sequence, but must fence as well.
	other := mustAcquire(t, ctx, h.Provider, uniqueName(t, "tokens-other"), 0)
	defer releaseQuietly(other)
	if !s.f.NoFencing && other.Token() == 0 {
		t.Fatal("a second name got token 0")
	}
}

func (s *lockSuite) waitElapses(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
	name := uniqueName(t, "wait")
	held := mustAcquire(t, ctx, h.Provider, name, 0)
	defer releaseQuietly(held)

	const wait = 300 * time.Millisecond
	start := time.Now()
	l, err := h.Second.Acquire(ctx, name, lock.AcquireOptions{Wait: wait})
	took := time.Since(start)
	if err == nil {
		releaseQuietly(l)
		t.Fatal("acquired a lock that was held")
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	if took < wait {
		t.Fatalf("gave up after %v, before Wait (%v) elapsed", took, wait)
	}
	if limit := wait + 2*time.Second; took > limit {
		t.Fatalf("gave up after %v, want within %v", took, limit)
	}
	if isClosed(held.Lost()) {
		t.Fatal("the holder's Lost closed because someone else waited")
	}
}

func (s *lockSuite) zeroWait(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
	name := uniqueName(t, "zero")
	held := mustAcquire(t, ctx, h.Provider, name, 0)
	defer releaseQuietly(held)

	start := time.Now()
	_, err := h.Second.Acquire(ctx, name, lock.AcquireOptions{})
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("err = %v, want ErrNotAcquired", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a zero-Wait Acquire took %v; it must try once and return", took)
	}
}

func (s *lockSuite) contextCancel(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
	name := uniqueName(t, "cancel")
	held := mustAcquire(t, ctx, h.Provider, name, 0)

	wctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	l, err := h.Second.Acquire(wctx, name, lock.AcquireOptions{Wait: lock.WaitForever})
	took := time.Since(start)
	if err == nil {
		releaseQuietly(l)
		t.Fatal("acquired a held lock")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want one wrapping context.Canceled", err)
	}
	if took > 100*time.Millisecond+time.Second {
		t.Fatalf("Acquire returned %v after start, long after its ctx was cancelled at 100ms", took)
	}
	// The cancelled waiter must have left nothing behind.
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	l = mustAcquire(t, ctx, h.Provider, name, s.f.Handoff)
	releaseQuietly(l)
}

func (s *lockSuite) invalidNames(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
	for what, name := range map[string]string{
		"empty":     "",
		"oversized": strings.Repeat("n", lock.MaxNameLength+1),
		"nul byte":  "a\x00b",
		"not UTF-8": "a\xffb",
	} {
		l, err := h.Provider.Acquire(ctx, name, lock.AcquireOptions{})
		if err == nil {
			releaseQuietly(l)
			t.Errorf("%s name: acquired", what)
			continue
		}
		if !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("%s name: err = %v, want ErrInvalidName", what, err)
		}
	}
	// The longest valid name works.
	longest := uniqueName(t, "")
	longest += strings.Repeat("x", lock.MaxNameLength-len(longest))
	l := mustAcquire(t, ctx, h.Provider, longest, 0)
	releaseQuietly(l)
}

func (s *lockSuite) invalidOptions(t *testing.T, env lockBundle) {
	h := env.h
	l, err := h.Provider.Acquire(testCtx(t), uniqueName(t, "opts"), lock.AcquireOptions{Wait: -time.Second})
	if err == nil {
		releaseQuietly(l)
		t.Fatal("a negative Wait was accepted")
	}
	if !errors.Is(err, lock.ErrInvalidOptions) {
		t.Fatalf("err = %v, want ErrInvalidOptions", err)
	}
}
