// Package redis is a lock.Provider on Redis, using go-redis v9.
//
// A lock is a key holding a random value with a TTL. The shared keepalive
// of core/lock refreshes it every TTL/3 and fails closed: the holder trusts
// the lock only until the start of its last successful refresh plus TTL
// minus SafetyMargin, so a Redis outage or a paused process ends in Lost
// closing rather than in two holders. A refresh answered "not ours" (the
// key was deleted or expired and taken) closes Lost at once.
//
// Three scripts of the provider's own do the work, each one round trip:
// acquire sets the lock key only if it is absent and, in the same script,
// draws the next fencing token from the counter key, so a token is only
// ever issued with the lock and an acquisition costs one call; refresh
// extends and release deletes the lock key only while it still holds this
// acquisition's value. A token is never below the server's clock in
// microseconds, so tokens keep rising when the server loses the counter: a
// restart without persistence, or a failover to a replica that lagged. Such
// a restart also forgets the lock key while its holder still trusts it, so
// an acquisition within TTL of a server's start that finds the fence
// counter gone waits, holding the key, until the server has been up for
// TTL (see Provider.Acquire). A server that forgot the scripts (restarted,
// SCRIPT FLUSH) is sent their
// source again. Both keys share a hash tag, so the provider works on Redis
// Cluster; a lock name beginning with '}', which would empty that tag, is
// refused.
package redis

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/core/config"
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

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o Options) withDefaults() Options {
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
	return o
}

// validate checks options that have their defaults.
func (o Options) validate() error {
	switch {
	case strings.ContainsAny(o.Prefix, "{}"):
		return config.Invalid(lock.ErrInvalidOptions, "redis.Options.Prefix", "%q contains a brace; braces are reserved for hash tags", o.Prefix)
	case o.TTL < 3*time.Millisecond:
		return config.Invalid(lock.ErrInvalidOptions, "redis.Options.TTL", "is %v; it must be at least 3ms (Redis expiries are in milliseconds)", o.TTL)
	}
	if err := lock.CheckSafetyMargin("redis.Options.SafetyMargin", o.TTL, o.SafetyMargin); err != nil {
		return err
	}
	return o.Backoff.Validate()
}

// acquireScript takes the lock key for this acquisition's value, if
// absent, and then issues the next fencing token, in one atomic step. It
// answers {token, uptime}, or {0, -1} when the lock is held. KEYS: lock,
// fence. ARGV: value, TTL in milliseconds.
//
// The token is the counter plus one, raised to the server's clock in
// microseconds when that is larger, and becomes the counter: a server that
// lost the counter (a restart without persistence, a failover to a replica
// that had not seen the last increments) resumes above every token it
// issued before, as long as its clock did not go back. Lua's numbers are
// doubles, exact below 2^53, which the clock in microseconds reaches in the
// year 2255; %d writes the counter back as an integer.
//
// uptime is the server's uptime in whole seconds when the counter was
// missing, and -1 when it was there: a missing counter is a lock never
// taken on this server, or one whose server forgot it, and only then may a
// holder from before a restart still trust a lock this server no longer
// knows (see Acquire).
//
// redis.replicate_commands, first, lets Redis before 5 write after reading
// TIME; later versions always replicate a script's effects.
var acquireScript = goredis.NewScript(`
redis.replicate_commands()
if not redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return {0, -1}
end
local counter = redis.call("get", KEYS[2])
local t = redis.call("time")
local n = math.max(tonumber(counter or "0") + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call("set", KEYS[2], string.format("%d", n))
local uptime = -1
if not counter then
	uptime = tonumber(string.match(redis.call("info", "server"), "uptime_in_seconds:(%d+)"))
end
return {n, uptime}`)

// refreshScript extends the lock key's TTL while it holds this
// acquisition's value, answering 1, and 0 otherwise.
// KEYS: lock. ARGV: value, TTL in milliseconds.
var refreshScript = goredis.NewScript(`
if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0`)

// releaseScript deletes the lock key while it holds this acquisition's
// value, answering 1, and 0 otherwise. KEYS: lock. ARGV: value.
var releaseScript = goredis.NewScript(`
if redis.call("get", KEYS[1]) == ARGV[1] then
	return redis.call("del", KEYS[1])
end
return 0`)

// Provider hands out Redis locks. Create it with NewProvider.
type Provider struct {
	client goredis.UniversalClient
	opts   Options
}

var _ lock.Provider = (*Provider)(nil)

// NewProvider returns a Provider over client (a *redis.Client, *redis.ClusterClient
// or any other go-redis client), or an error naming the first invalid option.
func NewProvider(client goredis.UniversalClient, opts Options) (*Provider, error) {
	if client == nil {
		return nil, config.Invalid(lock.ErrInvalidOptions, "redis.NewProvider: client", "is nil")
	}
	opts = opts.withDefaults()
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
// and the lock key and its fence key land in different slots (the acquire
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
//
// Within TTL of the server's start, an acquisition that finds the name's
// fence counter missing returns only once the server has been up for TTL,
// keeping the key meanwhile: a holder from before a restart without
// persistence may trust its lock until then. That wait is not part of
// opts.Wait; a cancelled ctx ends it and deletes the key.
func (p *Provider) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	if err := lock.CheckAcquire(name, opts); err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	l := &Lock{client: p.client, name: name, key: p.LockKey(name)}
	keys := []string{l.key, p.FenceKey(name)}
	ttl := p.opts.TTL.Milliseconds()
	var started time.Time
	var uptime int64
	err := lock.WaitFor(ctx, opts.Wait, p.opts.Backoff, func(ctx context.Context) (bool, <-chan struct{}, error) {
		started = time.Now()
		value, err := randomValue()
		if err != nil {
			return false, nil, err
		}
		answer, err := acquireScript.Run(ctx, p.client, keys, value, ttl).Int64Slice()
		if err != nil {
			return false, nil, err
		}
		if answer[0] == 0 {
			return false, nil, nil
		}
		// A server whose INFO has no uptime line answers {token}: its
		// uptime is unknown, and taken as zero.
		uptime = 0
		if len(answer) > 1 {
			uptime = answer[1]
		}
		l.value, l.token = value, uint64(answer[0])
		return true, nil, nil
	})
	if err != nil {
		return nil, err
	}
	l.ka, err = lock.NewKeepalive(lock.KeepaliveConfig{
		TTL:          p.opts.TTL,
		SafetyMargin: p.opts.SafetyMargin,
		Refresh: func(ctx context.Context) error {
			ok, err := refreshScript.Run(ctx, p.client, keys[:1], l.value, ttl).Bool()
			switch {
			case err != nil:
				return err
			case !ok:
				return fmt.Errorf("%w: the lock key no longer holds this acquisition's value", lock.ErrNotHeld)
			}
			return nil
		},
		Logger: p.opts.Logger,
		Name:   name,
	}, started)
	if err != nil {
		_, _ = l.del(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := l.waitOutRestart(ctx, p.opts.TTL, uptime); err != nil {
		return nil, err
	}
	return l, nil
}

// waitOutRestart returns once no holder from before the server's last
// start can still trust the lock. A server without persistence forgets the
// lock key when it restarts, and the holder from before goes on trusting
// its lock until a refresh finds the key gone, or, while its refreshes
// fail, until its trust ends: at most TTL after its last successful
// refresh began, which was before the restart. So an acquisition that
// found the fence counter missing (uptime >= 0) within TTL of the server's
// start keeps the key, refreshed, until the server has been up for TTL.
// Everywhere else (uptime -1, or a server up longer than TTL) it returns
// at once.
func (l *Lock) waitOutRestart(ctx context.Context, ttl time.Duration, uptime int64) error {
	if uptime < 0 {
		return nil
	}
	left := restartWait(ttl, uptime)
	if left <= 0 {
		return nil
	}
	wait := time.NewTimer(left)
	defer wait.Stop()
	select {
	case <-wait.C:
		return nil
	case <-l.ka.Lost():
		l.ka.Stop()
		return fmt.Errorf("acquire %q: %w: the lock was lost while waiting out the trust of holders from before the server's start", l.name, lock.ErrNotAcquired)
	case <-ctx.Done():
		l.ka.Stop()
		_, _ = l.del(context.WithoutCancel(ctx))
		return ctx.Err()
	}
}

// restartWait is how long an acquisition that found the fence counter
// missing waits, on a server that reported uptime seconds (>= 0), until
// the server has surely been up for ttl. Redis computes uptime_in_seconds
// as the difference of two clock readings each cut to whole seconds, so it
// can read 1 a few milliseconds after the start: the server has been up
// more than uptime − 1 seconds, and no longer surely uptime.
func restartWait(ttl time.Duration, uptime int64) time.Duration {
	up := max(uptime-1, 0)
	return ttl - time.Duration(up)*time.Second
}

// randomValue is the unique value an acquisition stores in the lock key.
func randomValue() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Lock is a held Redis lock.
type Lock struct {
	client goredis.UniversalClient
	name   string
	key    string
	value  string // this acquisition's value in the lock key
	token  uint64
	ka     *lock.Keepalive
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

// del deletes the lock key if it still holds this acquisition's value and
// reports whether it did.
func (l *Lock) del(ctx context.Context) (bool, error) {
	return releaseScript.Run(ctx, l.client, []string{l.key}, l.value).Bool()
}

// Release implements lock.Lock. It stops trusting the lock first, then
// deletes the key only if it still holds this acquisition's value.
func (l *Lock) Release(ctx context.Context) error {
	trusted := l.ka.Stop()
	deleted, err := l.del(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("release %q: %w", l.name, err)
	case !deleted:
		return fmt.Errorf("release %q: %w (the lock key no longer held this acquisition's value)", l.name, lock.ErrNotHeld)
	case !trusted:
		return fmt.Errorf("release %q: %w (its trust had run out before the release)", l.name, lock.ErrNotHeld)
	}
	return nil
}
