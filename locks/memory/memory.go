// Package memory is an in-process lock.Provider: the embedded default for a
// single process, and the provider baton's own timing tests run on.
//
// It behaves like the networked providers rather than like a sync.Mutex: a
// lock has a TTL kept alive by the shared keepalive (core/lock), fencing
// tokens increase per name, and TakeAway removes a hold the way an operator
// deleting a Redis key would, so the holder finds out on its next refresh.
// Locks are shared only between users of the same *Provider.
package memory

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/lock"
)

// Defaults for Options.
const (
	DefaultTTL          = 3 * time.Second
	DefaultSafetyMargin = 300 * time.Millisecond
)

// Options configure a Provider. The zero value uses the defaults.
type Options struct {
	// TTL is how long a hold lasts without a refresh (default DefaultTTL).
	// The keepalive refreshes every TTL/3.
	TTL time.Duration
	// SafetyMargin shortens the holder's trust window (default
	// DefaultSafetyMargin); see lock.KeepaliveConfig.
	SafetyMargin time.Duration
	// Backoff paces attempts while waiting; waiters are also woken when the
	// lock is released, so this matters only for expiries.
	Backoff lock.Backoff
	// Logger receives lock losses. nil discards.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o Options) withDefaults() Options {
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.SafetyMargin == 0 {
		o.SafetyMargin = DefaultSafetyMargin
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validate checks options that have their defaults.
func (o Options) validate() error {
	if o.TTL < 0 {
		return config.Invalid(lock.ErrInvalidOptions, "memory.Options.TTL", "is %v; it must be positive", o.TTL)
	}
	if err := lock.CheckSafetyMargin("memory.Options.SafetyMargin", o.TTL, o.SafetyMargin); err != nil {
		return err
	}
	return o.Backoff.Validate()
}

// Provider hands out in-memory locks. Create it with NewProvider.
type Provider struct {
	opts Options

	mu     sync.Mutex
	holds  map[string]*hold
	fences map[string]uint64
}

// hold is the "server side" record of a held lock.
type hold struct {
	owner     *Lock
	expiresAt time.Time
	freed     chan struct{} // closed when the hold ends
}

var _ lock.Provider = (*Provider)(nil)

// NewProvider returns a Provider, or an error naming the first invalid option.
func NewProvider(opts Options) (*Provider, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Provider{opts: opts, holds: map[string]*hold{}, fences: map[string]uint64{}}, nil
}

// Acquire implements lock.Provider.
func (p *Provider) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	if err := lock.CheckAcquire(name, opts); err != nil {
		return nil, err
	}
	l := &Lock{p: p, name: name}
	var started time.Time
	err := lock.WaitFor(ctx, opts.Wait, p.opts.Backoff, func(context.Context) (bool, <-chan struct{}, error) {
		started = time.Now()
		return p.tryTake(l, started)
	})
	if err != nil {
		return nil, err
	}
	ka, err := lock.NewKeepalive(lock.KeepaliveConfig{
		TTL:          p.opts.TTL,
		SafetyMargin: p.opts.SafetyMargin,
		Refresh:      l.refresh,
		Logger:       p.opts.Logger,
		Name:         name,
	}, started)
	if err != nil {
		p.drop(l)
		return nil, err
	}
	l.ka = ka
	return l, nil
}

func (p *Provider) tryTake(l *Lock, now time.Time) (bool, <-chan struct{}, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.holds[l.name]; ok {
		if now.Before(h.expiresAt) {
			return false, h.freed, nil
		}
		close(h.freed) // expired: the hold ends here
	}
	p.fences[l.name]++
	l.token = p.fences[l.name]
	p.holds[l.name] = &hold{owner: l, expiresAt: now.Add(p.opts.TTL), freed: make(chan struct{})}
	return true, nil, nil
}

// drop ends l's hold if it is still l's. It reports whether it was.
func (p *Provider) drop(l *Lock) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.holds[l.name]
	if !ok || h.owner != l {
		return false
	}
	delete(p.holds, l.name)
	close(h.freed)
	return time.Now().Before(h.expiresAt)
}

// TakeAway ends whatever hold exists on name, as an operator deleting the
// key would. The holder learns of it at its next refresh, when Lost closes.
// It reports whether there was a hold.
func (p *Provider) TakeAway(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.holds[name]
	if ok {
		delete(p.holds, name)
		close(h.freed)
	}
	return ok
}

// Lock is a held in-memory lock.
type Lock struct {
	p     *Provider
	name  string
	token uint64
	ka    *lock.Keepalive
}

var _ lock.Lock = (*Lock)(nil)

func (l *Lock) refresh(context.Context) error {
	now := time.Now()
	l.p.mu.Lock()
	defer l.p.mu.Unlock()
	h, ok := l.p.holds[l.name]
	if !ok || h.owner != l || !now.Before(h.expiresAt) {
		return lock.ErrNotHeld
	}
	h.expiresAt = now.Add(l.p.opts.TTL)
	return nil
}

// Name implements lock.Lock.
func (l *Lock) Name() string { return l.name }

// Token implements lock.Lock.
func (l *Lock) Token() uint64 { return l.token }

// Lost implements lock.Lock.
func (l *Lock) Lost() <-chan struct{} { return l.ka.Lost() }

// Trusted implements lock.Lock: the keepalive's trust window, read on the
// monotonic clock.
func (l *Lock) Trusted() bool { return l.ka.Trusted() }

// Release implements lock.Lock.
func (l *Lock) Release(context.Context) error {
	trusted := l.ka.Stop()
	held := l.p.drop(l)
	if !trusted || !held {
		return fmt.Errorf("release %q: %w", l.name, lock.ErrNotHeld)
	}
	return nil
}
