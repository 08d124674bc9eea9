// Package redis is a lock.Provider on Redis, built on github.com/bsm/redislock
// and go-redis v9.
//
// A lock is a key holding a random value with a TTL (redislock's
// compare-and-set scripts). The shared keepalive of core/lock refreshes it
// every TTL/3 and fails closed: the holder trusts the lock only until the
// start of its last successful refresh plus TTL minus SafetyMargin, so a
// Redis outage or a paused process ends in Lost closing rather than in two
// holders. A refresh answered "not ours" (the key was deleted or expired and
// taken) closes Lost at once.
//
// Fencing tokens come from a counter key incremented by a script that first
// checks the lock key still holds this acquisition's value, so a token is
// only ever issued to the current holder. A token is never below the
// server's clock in microseconds, so tokens keep rising when the server
// loses the counter: a restart without persistence, or a failover to a
// replica that lagged. The script travels in the same pipeline as the
// obtain, so an acquisition costs one round trip like a bare redislock
// Obtain. Both keys share a hash tag, so the provider works on Redis
// Cluster; a lock name beginning with '}', which would empty that tag, is
// refused.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/bsm/redislock"
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/core/lock"
)

// Defaults for Options.
const (
	DefaultPrefix       = "baton:"
	DefaultTTL          = 10 * time.Second
	DefaultSafetyMargin = time.Second
)

// Options configure a Provider. The zero value uses the defaults.
type Options struct {
	// Prefix starts every key the provider writes (default DefaultPrefix).
	// It may not contain '{' or '}', which would break the hash tags that
	// keep a lock and its fence counter in one cluster slot.
	Prefix string
	// TTL is the key's expiry, renewed every TTL/3 (default DefaultTTL). It
	// bounds how long a crashed holder blocks the lock.
	TTL time.Duration
	// SafetyMargin shortens the holder's trust window below TTL (default
	// DefaultSafetyMargin). It must be below two thirds of TTL.
	SafetyMargin time.Duration
	// Backoff paces attempts while waiting for a held lock.
	Backoff lock.Backoff
	// Logger receives refresh failures and losses. nil discards.
	Logger *slog.Logger
}

func (o *Options) validate() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.TTL == 0 {
		o.TTL = DefaultTTL
	}
	if o.SafetyMargin == 0 {
		o.SafetyMargin = DefaultSafetyMargin
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case strings.ContainsAny(o.Prefix, "{}"):
		return fmt.Errorf("%w: redis.Options.Prefix %q contains a brace; braces are reserved for hash tags", lock.ErrInvalidOptions, o.Prefix)
	case o.TTL < 3*time.Millisecond:
		return fmt.Errorf("%w: redis.Options.TTL is %v; it must be at least 3ms (Redis expiries are in milliseconds)", lock.ErrInvalidOptions, o.TTL)
	case o.SafetyMargin < 0 || o.SafetyMargin >= o.TTL-o.TTL/3:
		return fmt.Errorf("%w: redis.Options.SafetyMargin is %v; it must be at least 0 and below two thirds of TTL (%v)",
			lock.ErrInvalidOptions, o.SafetyMargin, o.TTL)
	}
	return o.Backoff.Validate()
}

// fenceScript issues a token only if the lock key still holds this
// acquisition's value, and answers 0 otherwise. The token is the counter
// plus one, raised to the server's clock in microseconds when that is
// larger, and becomes the counter: a server that lost the counter (a
// restart without persistence, a failover to a replica that had not seen
// the last increments) resumes above every token it issued before, as long
// as its clock did not go back. Lua's numbers are doubles, exact below
// 2^53, which the clock in microseconds reaches in the year 2255; %d writes
// the counter back as an integer. redis.replicate_commands lets Redis
// before 5 write after reading TIME; later versions always replicate a
// script's effects.
var fenceScript = goredis.NewScript(`
if redis.call("get", KEYS[1]) ~= ARGV[1] then
	return 0
end
redis.replicate_commands()
local t = redis.call("time")
local n = math.max(tonumber(redis.call("get", KEYS[2]) or "0") + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call("set", KEYS[2], string.format("%d", n))
return n`)

// fencingClient is the client redislock talks through during one
// acquisition attempt. Until a token has been issued, it sends each script
// call redislock makes (the obtain) in one pipeline together with
// fenceScript, so obtaining the lock and drawing its token cost a single
// round trip; the script's value check makes the pair safe even though a
// pipeline is not atomic. Once the token is issued it passes calls through
// (refreshes and the release).
type fencingClient struct {
	goredis.UniversalClient
	keys  []string // lock key, fence key
	value string   // this attempt's lock value
	token uint64   // set by the call that obtained the lock
}

func (f *fencingClient) Eval(ctx context.Context, script string, keys []string, args ...any) *goredis.Cmd {
	return f.withFence(ctx, func(c goredis.Scripter) *goredis.Cmd { return c.Eval(ctx, script, keys, args...) })
}

func (f *fencingClient) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *goredis.Cmd {
	return f.withFence(ctx, func(c goredis.Scripter) *goredis.Cmd { return c.EvalSha(ctx, sha, keys, args...) })
}

func (f *fencingClient) withFence(ctx context.Context, call func(goredis.Scripter) *goredis.Cmd) *goredis.Cmd {
	if f.token != 0 {
		return call(f.UniversalClient)
	}
	pipe := f.Pipeline()
	cmd := call(pipe)
	fence := fenceScript.EvalSha(ctx, pipe, f.keys, f.value)
	_, _ = pipe.Exec(ctx) // each command carries its own error
	if goredis.HasErrorPrefix(fence.Err(), "NOSCRIPT") {
		// The server does not know the script yet (first use, or after a
		// restart): send it whole, once, outside the pipeline.
		fence = fenceScript.Eval(ctx, f.UniversalClient, f.keys, f.value)
	}
	if tok, err := fence.Uint64(); err == nil {
		f.token = tok
	}
	return cmd
}

// Provider hands out Redis locks. Create it with New.
type Provider struct {
	client goredis.UniversalClient
	opts   Options
}

var _ lock.Provider = (*Provider)(nil)

// New returns a Provider over client (a *redis.Client, *redis.ClusterClient
// or any other go-redis client), or an error naming the first invalid option.
func New(client goredis.UniversalClient, opts Options) (*Provider, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: redis.New: the client is nil", lock.ErrInvalidOptions)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Provider{client: client, opts: opts}, nil
}

// LockKey is the key that holds the named lock, for operators and tests.
func (p *Provider) LockKey(name string) string { return p.opts.Prefix + "lock:{" + name + "}" }

// FenceKey is the key that counts the named lock's fencing tokens.
func (p *Provider) FenceKey(name string) string { return p.opts.Prefix + "fence:{" + name + "}" }

// checkName refuses a name beginning with '}'. The keys wrap the name in a
// hash tag, "lock:{name}", and Redis Cluster takes the tag to end at the
// first '}': such a name leaves it empty, Cluster then hashes whole keys,
// and the lock key and its fence key land in different slots (the fence
// script is refused, and Acquire would retry until its deadline). A brace
// anywhere else is harmless: both keys get the same tag.
func checkName(name string) error {
	if strings.HasPrefix(name, "}") {
		return fmt.Errorf("%w: %q begins with '}', which would empty the Redis Cluster hash tag "+
			"that keeps the lock and its fence counter in one slot", lock.ErrInvalidName, name)
	}
	return nil
}

// Acquire implements lock.Provider. Besides core's name rule it refuses a
// name beginning with '}' (see docs/locks.md), with lock.ErrInvalidName.
func (p *Provider) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	if err := lock.CheckAcquire(name, opts); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	l := &Lock{name: name}
	var started time.Time
	err := lock.WaitFor(ctx, opts.Wait, p.opts.Backoff, func(ctx context.Context) (bool, <-chan struct{}, error) {
		started = time.Now()
		value, err := randomValue()
		if err != nil {
			return false, nil, err
		}
		fc := &fencingClient{UniversalClient: p.client, keys: []string{p.LockKey(name), p.FenceKey(name)}, value: value}
		rl, err := redislock.New(fc).Obtain(ctx, p.LockKey(name), p.opts.TTL, &redislock.Options{Token: value})
		if err != nil {
			if errors.Is(err, redislock.ErrNotObtained) {
				return false, nil, nil
			}
			return false, nil, mapErr(err)
		}
		if fc.token == 0 {
			// Obtained, but the key changed hands before the fence ran (it
			// expired at once, or was deleted): a hold without a token is
			// useless, so give it back and keep waiting.
			_ = rl.Release(context.WithoutCancel(ctx))
			return false, nil, nil
		}
		l.rl, l.token = rl, fc.token
		return true, nil, nil
	})
	if err != nil {
		return nil, err
	}
	l.ka, err = lock.StartKeepalive(lock.KeepaliveConfig{
		TTL:          p.opts.TTL,
		SafetyMargin: p.opts.SafetyMargin,
		Refresh: func(ctx context.Context) error {
			return mapErr(l.rl.Refresh(ctx, p.opts.TTL, nil))
		},
		Logger: p.opts.Logger,
		Name:   name,
	}, started)
	if err != nil {
		_ = l.rl.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	return l, nil
}

// randomValue is the unique value an acquisition stores in the lock key.
func randomValue() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// mapErr translates redislock's errors to core's sentinels; it is the only
// place this package does so.
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redislock.ErrNotObtained), errors.Is(err, redislock.ErrLockNotHeld):
		return fmt.Errorf("%w: %w", lock.ErrNotHeld, err)
	default:
		return err
	}
}

// Lock is a held Redis lock.
type Lock struct {
	name  string
	token uint64
	rl    *redislock.Lock
	ka    *lock.Keepalive
}

var _ lock.Lock = (*Lock)(nil)

// Name implements lock.Lock.
func (l *Lock) Name() string { return l.name }

// Token implements lock.Lock.
func (l *Lock) Token() uint64 { return l.token }

// Lost implements lock.Lock.
func (l *Lock) Lost() <-chan struct{} { return l.ka.Lost() }

// Trusted implements lock.Lock: the keepalive's trust window, read on the
// monotonic clock.
func (l *Lock) Trusted() bool { return l.ka.Trusted() }

// Release implements lock.Lock. It stops trusting the lock first, then
// deletes the key only if it still holds this acquisition's value.
func (l *Lock) Release(ctx context.Context) error {
	trusted := l.ka.Stop()
	err := mapErr(l.rl.Release(ctx))
	switch {
	case err != nil:
		return fmt.Errorf("release %q: %w", l.name, err)
	case !trusted:
		return fmt.Errorf("release %q: %w (its trust had run out before the release)", l.name, lock.ErrNotHeld)
	}
	return nil
}
