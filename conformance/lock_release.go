package conformance

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lock"
)

// Releasing and losing: what Release, TakeAway, Lost and Trusted do to a
// held lock and to whoever comes next.

func (s *lockSuite) releaseChecks() []check {
	return area(s.setup,
		subtest[lockBundle]{"ReleaseLetsWaiterIn", s.releaseLetsWaiterIn},
		subtest[lockBundle]{"ReleaseClosesLost", s.releaseClosesLost},
		subtest[lockBundle]{"LostClosesAfterTakeAway", s.lostAfterTakeAway},
		subtest[lockBundle]{"ReleaseAfterLoss", s.releaseAfterLoss},
		subtest[lockBundle]{"TrustedEndsWithTheHold", s.trustedEndsWithTheHold},
	)
}

func (s *lockSuite) releaseLetsWaiterIn(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
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

func (s *lockSuite) releaseClosesLost(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
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

func (s *lockSuite) lostAfterTakeAway(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
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

func (s *lockSuite) releaseAfterLoss(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
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
func (s *lockSuite) trustedEndsWithTheHold(t *testing.T, env lockBundle) {
	h, ctx := env.h, env.ctx
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
