package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/core/config"
)

// ErrTrustExpired is the reason a keepalive gives when no refresh succeeded
// before the lock's trust ran out.
var ErrTrustExpired = errors.New("baton/lock: no refresh succeeded before the lock's trust ran out")

// errStopped is the reason of a keepalive ended by its owner.
var errStopped = fmt.Errorf("%w: released by its holder", ErrNotHeld)

// KeepaliveConfig configures the refresh loop of a TTL-based lock.
type KeepaliveConfig struct {
	// TTL is how long one successful refresh extends the lock at the server.
	TTL time.Duration
	// SafetyMargin is subtracted from TTL when computing how long the holder
	// trusts the lock, to absorb timer latency and clock-rate drift between
	// this process and the server. It must be below TTL minus Interval.
	SafetyMargin time.Duration
	// Interval is the pause between refreshes; 0 means TTL/3.
	Interval time.Duration
	// Refresh extends the lock by TTL at the server. It returns nil on
	// success, an error wrapping ErrNotHeld when the server says the lock is
	// no longer ours (Lost then closes at once), or any other error for a
	// failure that may pass (the loop retries until trust runs out). The ctx
	// it gets ends when trust does.
	Refresh func(ctx context.Context) error
	// Logger receives refresh failures and the loss. nil discards them.
	Logger *slog.Logger
	// Name labels log lines.
	Name string
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c KeepaliveConfig) withDefaults() KeepaliveConfig {
	if c.Interval == 0 {
		c.Interval = c.TTL / 3
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks a KeepaliveConfig that has its defaults.
func (c KeepaliveConfig) validate() error {
	bad := func(field, format string, args ...any) error {
		return config.Invalid(ErrInvalidOptions, field, format, args...)
	}
	switch {
	case c.TTL <= 0:
		return bad("TTL", "is %v; it must be positive", c.TTL)
	case c.SafetyMargin < 0:
		return bad("SafetyMargin", "is %v; it must not be negative", c.SafetyMargin)
	case c.Interval <= 0:
		return bad("Interval", "is %v; it must be positive", c.Interval)
	case c.Interval+c.SafetyMargin >= c.TTL:
		return bad("TTL", "(%v) must exceed Interval (%v) + SafetyMargin (%v), or trust ends before the next refresh",
			c.TTL, c.Interval, c.SafetyMargin)
	case c.Refresh == nil:
		return bad("Refresh", "is nil")
	}
	return nil
}

// Keepalive refreshes a TTL lock in the background and decides, on the
// monotonic clock, until when the holder may trust it:
//
//	trusted until = start of the last successful refresh + TTL − SafetyMargin
//
// The start of the request counts, not its answer, because the server's TTL
// began no earlier than the request did. When that moment passes without a
// newer success (refreshes stall, error or the process was paused), or a
// refresh is answered "not ours", Lost closes. It never reopens.
type Keepalive struct {
	cfg  KeepaliveConfig
	base time.Time // monotonic origin for validUntil

	validUntil atomic.Int64 // nanoseconds since base

	mu      sync.Mutex
	lost    chan struct{}
	lostErr error
	expiry  *time.Timer // set under mu: its callback may run before NewKeepalive returns
	next    *time.Timer // the next refresh; it runs on the timer's own goroutine
	stopped bool

	ctx      context.Context // of the refreshes; cancelled by Stop
	cancel   context.CancelFunc
	inFlight sync.WaitGroup // a refresh running
}

// NewKeepalive starts refreshing a lock that the server granted for
// cfg.TTL in a request that started at acquiredAt. The caller owns the
// returned Keepalive and must call Stop. It is no long-running component
// with a Run of its own: it lives as long as the lock it keeps, from the
// acquisition to the Release that calls Stop, on timers and with no
// goroutine between refreshes.
func NewKeepalive(cfg KeepaliveConfig, acquiredAt time.Time) (*Keepalive, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &Keepalive{
		cfg:    cfg,
		base:   acquiredAt,
		lost:   make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
	trust := cfg.TTL - cfg.SafetyMargin
	k.validUntil.Store(int64(trust))
	// Two timers and no goroutine of its own: a lock that is acquired and
	// released within one interval costs no more than that. The expiry
	// fires at once when trust ran out before the keepalive started (a slow
	// obtain, a pause): holding mu until both fields are set makes onExpiry
	// and markLost find them.
	k.mu.Lock()
	k.expiry = time.AfterFunc(time.Until(acquiredAt.Add(trust)), k.onExpiry)
	k.next = time.AfterFunc(cfg.Interval, k.tick)
	k.mu.Unlock()
	return k, nil
}

// Lost is closed once the lock can no longer be trusted. It is closed by
// the time anyone looks after the trust window ended, even when the expiry
// timer has not run yet (a process that resumes after a pause looks first).
func (k *Keepalive) Lost() <-chan struct{} {
	if int64(time.Since(k.base)) >= k.validUntil.Load() {
		k.markLost(ErrTrustExpired)
	}
	return k.lost
}

// Trusted reports, without blocking, whether the lock is still within its
// trust window and not lost.
func (k *Keepalive) Trusted() bool {
	select {
	case <-k.lost:
		return false
	default:
	}
	return int64(time.Since(k.base)) < k.validUntil.Load()
}

// Err returns why Lost closed, or nil while it is open.
func (k *Keepalive) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lostErr
}

// Stop ends refreshing, closes Lost (if it was still open, Err then wraps
// ErrNotHeld) and waits for the loop to exit. It is safe to call more than once.
// It returns whether the lock was still trusted when stopped, so a caller can
// tell a release from a release-after-loss.
func (k *Keepalive) Stop() (wasTrusted bool) {
	wasTrusted = k.Trusted()
	k.markLost(errStopped)
	k.mu.Lock()
	k.stopped = true
	k.next.Stop()
	k.mu.Unlock()
	k.cancel()
	k.inFlight.Wait()
	return wasTrusted
}

func (k *Keepalive) markLost(reason error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lostErr != nil {
		return
	}
	k.lostErr = reason
	k.expiry.Stop()
	k.next.Stop()
	close(k.lost)
	if reason != errStopped {
		k.cfg.Logger.Warn("lock lost", "lock", k.cfg.Name, "reason", reason)
	}
}

// onExpiry runs when the trust window may have ended. A refresh that
// succeeded meanwhile moves validUntil forward, and then it is not lost.
func (k *Keepalive) onExpiry() {
	k.mu.Lock()
	left := time.Duration(k.validUntil.Load() - int64(time.Since(k.base)))
	if left > 0 {
		k.expiry.Reset(left)
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	k.markLost(ErrTrustExpired)
}

// tick runs one refresh when its timer fires and sets the timer for the
// next, unless the keepalive was stopped or the lock lost meanwhile.
func (k *Keepalive) tick() {
	k.mu.Lock()
	if k.stopped || k.lostErr != nil {
		k.mu.Unlock()
		return
	}
	k.inFlight.Add(1) // under mu, so a Stop that follows waits for it
	k.mu.Unlock()
	defer k.inFlight.Done()

	next, again := k.refresh()
	if !again {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.stopped && k.lostErr == nil {
		k.next.Reset(max(next, 0))
	}
}

// refresh calls Refresh once, within the trust window, and says when to
// call it next; again is false once the lock is lost or stopped.
func (k *Keepalive) refresh() (next time.Duration, again bool) {
	start := time.Since(k.base)
	deadline := k.base.Add(time.Duration(k.validUntil.Load()))
	rctx, cancel := context.WithDeadline(k.ctx, deadline)
	err := k.cfg.Refresh(rctx)
	cancel()

	switch {
	case k.ctx.Err() != nil:
		return 0, false
	case err == nil:
		k.extend(start + k.cfg.TTL - k.cfg.SafetyMargin)
		return k.cfg.Interval - (time.Since(k.base) - start), true
	case errors.Is(err, ErrNotHeld):
		k.markLost(err)
		return 0, false
	default:
		left := time.Duration(k.validUntil.Load()) - time.Since(k.base)
		k.cfg.Logger.Warn("lock refresh failed", "lock", k.cfg.Name, "err", err, "trust_left", left)
		if left <= 0 {
			k.markLost(fmt.Errorf("%w: last refresh error: %w", ErrTrustExpired, err))
			return 0, false
		}
		// Retry sooner than a full interval, but not in a tight loop.
		return min(k.cfg.Interval, max(left/4, time.Millisecond)), true
	}
}

// extend moves the trust window forward when the new end is later, unless
// the window already closed: a success that arrives after trust ran out must
// not resurrect the lock.
func (k *Keepalive) extend(until time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lostErr != nil {
		return
	}
	now := time.Since(k.base)
	if now >= time.Duration(k.validUntil.Load()) {
		return // onExpiry will run (or is running) and mark it lost
	}
	if int64(until) > k.validUntil.Load() {
		k.validUntil.Store(int64(until))
	}
}

// CheckSafetyMargin is the rule every TTL lock's options keep: the
// keepalive refreshes every TTL/3, so the margin must be at least 0 and
// below the two thirds of TTL left after one interval, or trust would end
// before the next refresh. field names the margin in the error.
func CheckSafetyMargin(field string, ttl, margin time.Duration) error {
	if margin < 0 || margin >= ttl-ttl/3 {
		return config.Invalid(ErrInvalidOptions, field, "is %v; it must be at least 0 and below two thirds of TTL (%v)", margin, ttl)
	}
	return nil
}
