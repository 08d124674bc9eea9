package lock

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Hooks observe the locks of a Provider wrapped by WithHooks: every
// Acquire, and the end of every lock it handed out.
//
// They are called synchronously: AcquireEnded on the caller's goroutine as
// Acquire returns, LockEnded on the releasing goroutine, or, for a lock
// lost, on a goroutine the lock owns, which ends with it. Keep them quick
// and never block. They report; they never decide: check Trusted before
// each step done under a lock, not a hook.
type Hooks interface {
	// AcquireEnded is called as every Acquire returns.
	AcquireEnded(ctx context.Context, a Acquire)
	// LockEnded is called once per lock acquired, when it was released or
	// lost.
	LockEnded(e End)
}

// NopHooks implements Hooks with methods that do nothing; embed it to
// implement only some of them.
type NopHooks struct{}

// AcquireEnded implements Hooks.
func (NopHooks) AcquireEnded(context.Context, Acquire) {}

// LockEnded implements Hooks.
func (NopHooks) LockEnded(End) {}

var _ Hooks = NopHooks{}

// Acquire describes one Acquire call.
type Acquire struct {
	Name string
	// Wait is the wait asked for (AcquireOptions.Wait).
	Wait time.Duration
	// Took is how long the call took.
	Took time.Duration
	// Token is the lock's fencing token when it was acquired.
	Token uint64
	// Err is nil when the lock was acquired, ErrNotAcquired when it was
	// held elsewhere for the whole wait, or the failure.
	Err error
}

// End describes the end of a lock.
type End struct {
	Name  string
	Token uint64
	// Released is true when its holder released it while it was still
	// held, false when it was lost (taken away, expired, connection gone).
	Released bool
	// Held is how long it was held, from the end of its Acquire.
	Held time.Duration
}

// WithHooks returns p with every Acquire and every lock's end reported to
// h. A nil h returns p itself: no wrapper, no cost.
func WithHooks(p Provider, h Hooks) Provider {
	if h == nil {
		return p
	}
	return &hookedProvider{p: p, h: h}
}

type hookedProvider struct {
	p Provider
	h Hooks
}

func (hp *hookedProvider) Acquire(ctx context.Context, name string, opts AcquireOptions) (Lock, error) {
	began := time.Now()
	l, err := hp.p.Acquire(ctx, name, opts)
	a := Acquire{Name: name, Wait: opts.Wait, Took: time.Since(began), Err: err}
	if err != nil {
		hp.h.AcquireEnded(ctx, a)
		return nil, err
	}
	a.Token = l.Token()
	hp.h.AcquireEnded(ctx, a)
	hl := &hookedLock{Lock: l, h: hp.h, at: time.Now()}
	go hl.watch() // owned by the lock: it ends when Lost closes, which Release does too
	return hl, nil
}

// hookedLock reports its end once: Release reports it, unless the lock
// was lost first, which watch reports.
type hookedLock struct {
	Lock
	h         Hooks
	at        time.Time
	releasing atomic.Bool
	once      sync.Once
}

func (l *hookedLock) watch() {
	<-l.Lock.Lost()
	if !l.releasing.Load() {
		l.end(false)
	}
}

func (l *hookedLock) end(released bool) {
	l.once.Do(func() {
		l.h.LockEnded(End{Name: l.Name(), Token: l.Token(), Released: released, Held: time.Since(l.at)})
	})
}

func (l *hookedLock) Release(ctx context.Context) error {
	l.releasing.Store(true)
	err := l.Lock.Release(ctx)
	l.end(err == nil)
	return err
}
