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
// factory returns. Subtest names are stable, so a failure names the broken
// rule: MutualExclusion, TokensStrictlyIncrease, WaitElapses,
// ZeroWaitTriesOnce, ContextCancelEndsWait, ReleaseLetsWaiterIn,
// ReleaseClosesLost, LostClosesAfterTakeAway, ReleaseAfterLoss,
// TrustedEndsWithTheHold, InvalidNames, InvalidOptions.
func RunLockProvider(t *testing.T, factory func(t *testing.T) LockHarness, features LockFeatures) {
	f := features.withDefaults()
	s := &lockSuite{factory: factory, f: f}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"MutualExclusion", s.mutualExclusion},
		{"TokensStrictlyIncrease", s.tokensIncrease},
		{"WaitElapses", s.waitElapses},
		{"ZeroWaitTriesOnce", s.zeroWait},
		{"ContextCancelEndsWait", s.contextCancel},
		{"ReleaseLetsWaiterIn", s.releaseLetsWaiterIn},
		{"ReleaseClosesLost", s.releaseClosesLost},
		{"LostClosesAfterTakeAway", s.lostAfterTakeAway},
		{"ReleaseAfterLoss", s.releaseAfterLoss},
		{"TrustedEndsWithTheHold", s.trustedEndsWithTheHold},
		{"InvalidNames", s.invalidNames},
		{"InvalidOptions", s.invalidOptions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

type lockSuite struct {
	factory func(t *testing.T) LockHarness
	f       LockFeatures
}

func (s *lockSuite) harness(t *testing.T) LockHarness {
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
	return h
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
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

// mutualExclusion: many goroutines on two providers take the same lock over
// and over; a shared counter proves no two were ever inside at once, and the
// tokens, recorded inside, must rise in the order the holders came in.
func (s *lockSuite) mutualExclusion(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *lockSuite) tokensIncrease(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *lockSuite) waitElapses(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *lockSuite) zeroWait(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *lockSuite) contextCancel(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *lockSuite) releaseLetsWaiterIn(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	name := uniqueName(t, "handoff")
	held := mustAcquire(t, ctx, h.Provider, name, 0)

	type result struct {
		l   lock.Lock
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		l, err := h.Second.Acquire(ctx, name, lock.AcquireOptions{Wait: 10*time.Second + s.f.Handoff})
		got <- result{l, err, time.Now()}
	}()
	time.Sleep(200 * time.Millisecond) // let the waiter start waiting
	released := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("the waiter did not get the released lock: %v", r.err)
	}
	defer releaseQuietly(r.l)
	if d := r.at.Sub(released); d > s.f.Handoff {
		t.Fatalf("the waiter got the lock %v after release, want within %v", d, s.f.Handoff)
	}
	if !s.f.NoFencing && r.l.Token() <= held.Token() {
		t.Fatalf("the waiter's token %d is not above the released holder's %d", r.l.Token(), held.Token())
	}
}

func (s *lockSuite) releaseClosesLost(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	name := uniqueName(t, "release")
	l := mustAcquire(t, ctx, h.Provider, name, 0)
	if l.Name() != name {
		t.Fatalf("Name() = %q, want %q", l.Name(), name)
	}
	if isClosed(l.Lost()) {
		t.Fatal("Lost is closed on a freshly acquired lock")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if !closedWithin(l.Lost(), time.Second) {
		t.Fatal("Lost still open after Release")
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release: err = %v, want ErrNotHeld", err)
	}
	// Released means free: a zero-wait acquire succeeds at once.
	again := mustAcquire(t, ctx, h.Second, name, 0)
	releaseQuietly(again)
}

func (s *lockSuite) lostAfterTakeAway(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	name := uniqueName(t, "takeaway")
	l := mustAcquire(t, ctx, h.Provider, name, 0)
	defer releaseQuietly(l)
	if err := h.TakeAway(ctx, name); err != nil {
		t.Fatalf("TakeAway: %v", err)
	}
	start := time.Now()
	if !closedWithin(l.Lost(), s.f.LossDetection) {
		t.Fatalf("Lost did not close within %v of the lock being taken away", s.f.LossDetection)
	}
	t.Logf("loss noticed after %v", time.Since(start).Round(time.Millisecond))
}

func (s *lockSuite) releaseAfterLoss(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	name := uniqueName(t, "stale")
	old := mustAcquire(t, ctx, h.Provider, name, 0)
	if err := h.TakeAway(ctx, name); err != nil {
		t.Fatalf("TakeAway: %v", err)
	}
	if !closedWithin(old.Lost(), s.f.LossDetection) {
		t.Fatalf("Lost did not close within %v of the lock being taken away", s.f.LossDetection)
	}
	successor := mustAcquire(t, ctx, h.Second, name, 10*time.Second)
	defer releaseQuietly(successor)

	if err := old.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release after loss: err = %v, want ErrNotHeld", err)
	}
	if isClosed(successor.Lost()) {
		t.Fatal("the stale holder's Release disturbed the new holder: its Lost closed")
	}
	if l, err := h.Provider.Acquire(ctx, name, lock.AcquireOptions{}); err == nil {
		releaseQuietly(l)
		t.Fatal("the stale holder's Release freed the new holder's lock")
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire while the successor holds: err = %v, want ErrNotAcquired", err)
	}
	if !s.f.NoFencing && successor.Token() <= old.Token() {
		t.Fatalf("successor token %d is not above the lost holder's %d", successor.Token(), old.Token())
	}
	if err := successor.Release(ctx); err != nil {
		t.Fatalf("the successor's Release: %v", err)
	}
}

// trustedEndsWithTheHold: Trusted is the synchronous form of Lost. A
// fresh lock is trusted; once Lost has closed (the hold was taken away) or
// the lock was released, Trusted is false, and stays false.
func (s *lockSuite) trustedEndsWithTheHold(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	name := uniqueName(t, "trusted")
	l := mustAcquire(t, ctx, h.Provider, name, 0)
	if !l.Trusted() {
		t.Fatal("Trusted() is false on a freshly acquired lock")
	}
	if err := h.TakeAway(ctx, name); err != nil {
		t.Fatalf("TakeAway: %v", err)
	}
	if !closedWithin(l.Lost(), s.f.LossDetection) {
		t.Fatalf("Lost did not close within %v of the lock being taken away", s.f.LossDetection)
	}
	if l.Trusted() {
		t.Fatal("Trusted() is true although Lost has closed; work guarded by it would go on")
	}
	releaseQuietly(l)
	if l.Trusted() {
		t.Fatal("Trusted() is true after Release of a lost lock")
	}

	again := mustAcquire(t, ctx, h.Second, name, 10*time.Second)
	if !again.Trusted() {
		t.Fatal("Trusted() is false on the next holder's fresh lock")
	}
	if err := again.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if again.Trusted() {
		t.Fatal("Trusted() is true after Release")
	}
}

func (s *lockSuite) invalidNames(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	for what, name := range map[string]string{
		"empty":     "",
		"oversized": strings.Repeat("n", lock.MaxNameLength+1),
		"nul byte":  "a\x00b",
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

func (s *lockSuite) invalidOptions(t *testing.T) {
	h := s.harness(t)
	l, err := h.Provider.Acquire(testCtx(t), uniqueName(t, "opts"), lock.AcquireOptions{Wait: -time.Second})
	if err == nil {
		releaseQuietly(l)
		t.Fatal("a negative Wait was accepted")
	}
	if !errors.Is(err, lock.ErrInvalidOptions) {
		t.Fatalf("err = %v, want ErrInvalidOptions", err)
	}
}
