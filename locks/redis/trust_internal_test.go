package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/internal/testenv"
)

// scriptHook acts on the calls of one script (EVALSHA of its hash, or
// EVAL of its source) and passes every other command through.
type scriptHook struct {
	script *goredis.Script
	// before runs ahead of each call of the script; a non-nil error
	// refuses the call without sending it.
	before func() error
}

func (h scriptHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h scriptHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		if h.calls(cmd.Args()) {
			if err := h.before(); err != nil {
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h scriptHook) calls(args []any) bool {
	if len(args) < 2 {
		return false
	}
	body, _ := args[1].(string)
	switch args[0] {
	case "evalsha":
		return body == h.script.Hash()
	case "eval":
		sum := sha1.Sum([]byte(body))
		return hex.EncodeToString(sum[:]) == h.script.Hash()
	}
	return false
}

func (h scriptHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return next
}

// hookedProvider is a provider on a client of its own, on env's server and
// under env's prefix, with hooks installed.
func hookedProvider(t *testing.T, env *testenv.RedisEnv, opts Options, hooks ...goredis.Hook) *Provider {
	t.Helper()
	client := goredis.NewClient(&goredis.Options{Addr: env.Addr})
	t.Cleanup(func() { client.Close() })
	for _, h := range hooks {
		client.AddHook(h)
	}
	opts.Prefix = env.Prefix
	p, err := NewProvider(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func acquire(t *testing.T, p *Provider, name string) *Lock {
	t.Helper()
	l, err := p.Acquire(context.Background(), name, lock.AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	t.Cleanup(func() { l.Release(context.Background()) })
	return l.(*Lock)
}

// A crashed holder blocks the lock for at most TTL: the key expires with
// the acquisition itself, not only from the first refresh on.
func TestAcquire_TheLockKeyExpiresWithinTTLFromTheStart(t *testing.T) {
	env := testenv.Redis(t)
	const ttl = 10 * time.Second
	p, err := NewProvider(env.Client, Options{Prefix: env.Prefix, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	l := acquire(t, p, "expiring")
	left, err := env.Client.PTTL(context.Background(), l.key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if left <= 0 || left > ttl {
		t.Fatalf("the lock key's time to live is %v right after Acquire, want within (0, %v]", left, ttl)
	}
}

// A refresh that finds the key gone, or holding another value, ends the
// lock at once with ErrNotHeld; it is not a failure that may pass, retried
// until trust runs out while another holder may already have the lock.
func TestRefresh_AKeyNoLongerOursEndsTheLockAsNotHeld(t *testing.T) {
	env := testenv.Redis(t)
	p, err := NewProvider(env.Client, Options{Prefix: env.Prefix, TTL: 3 * time.Second, SafetyMargin: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	l := acquire(t, p, "taken")
	if err := env.Client.Set(context.Background(), l.key, "another holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(30 * time.Second): // a liveness bound
		t.Fatal("Lost still open 30s after the key changed hands")
	}
	if err := l.ka.Err(); !errors.Is(err, lock.ErrNotHeld) || errors.Is(err, lock.ErrTrustExpired) {
		t.Fatalf("the loss is %v; want one wrapping ErrNotHeld, found by a refresh, not the end of trust", err)
	}
}

// Release after the trust ran out answers ErrNotHeld, even when the key
// still held this acquisition's value and was deleted: the work the lock
// guarded was not covered to its end.
func TestRelease_AfterTrustRanOutIsNotHeldThoughTheKeyWasOurs(t *testing.T) {
	env := testenv.Redis(t)
	var refuse atomic.Bool
	p := hookedProvider(t, env, Options{TTL: 1500 * time.Millisecond, SafetyMargin: 200 * time.Millisecond},
		scriptHook{script: refreshScript, before: func() error {
			if refuse.Load() {
				return errors.New("refresh refused by the test")
			}
			return nil
		}})
	l := acquire(t, p, "lapsed")
	refuse.Store(true)
	// The server keeps the key: no expiry, so only the holder's trust ends.
	if err := env.Client.Persist(context.Background(), l.key).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(30 * time.Second): // a liveness bound
		t.Fatal("Lost still open 30s after refreshes began to fail")
	}
	if err := l.Release(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release after trust ran out: err = %v, want ErrNotHeld", err)
	}
	if n, err := env.Client.Exists(context.Background(), l.key).Result(); err != nil || n != 0 {
		t.Fatalf("the key is still there after Release (%d, %v); it held this acquisition's value", n, err)
	}
}

// The lock's trust counts from the start of the acquiring request, as the
// server's TTL does, not from its answer: a slow answer must not stretch
// trust past the key's expiry. With every refresh refused, the lock is
// untrusted TTL - SafetyMargin after the request went out, although the
// answer came a second later.
func TestAcquire_TrustCountsFromTheStartOfTheRequest(t *testing.T) {
	env := testenv.Redis(t)
	const (
		ttl    = 3 * time.Second
		margin = 300 * time.Millisecond
	)
	var sent atomic.Int64 // when the acquire script went out, in UnixNano
	p := hookedProvider(t, env, Options{TTL: ttl, SafetyMargin: margin},
		scriptHook{script: acquireScript, before: func() error {
			sent.Store(time.Now().UnixNano())
			time.Sleep(time.Second) // a slow round trip
			return nil
		}},
		scriptHook{script: refreshScript, before: func() error {
			return errors.New("refresh refused by the test")
		}})
	l := acquire(t, p, "slow")
	time.Sleep(time.Until(time.Unix(0, sent.Load()).Add(ttl - margin)))
	if l.Trusted() {
		t.Fatalf("trusted %v after the acquiring request went out; trust must end TTL - SafetyMargin after it",
			time.Since(time.Unix(0, sent.Load())).Round(time.Millisecond))
	}
}
