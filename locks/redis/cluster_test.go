package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/internal/testenv"
	batonredis "github.com/baton-go/baton/locks/redis"
)

// emptyTagNames begin with '}': the key "prefix:lock:{}x}" has an empty hash
// tag, so Redis Cluster hashes the whole key, and the lock key and the
// fence key land in different slots.
var emptyTagNames = []string{"}", "}x", "}}", "}a{b}"}

func TestAcquire_RefusesANameThatEmptiesTheHashTagWithoutTouchingRedis(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer client.Close()
	p, err := batonredis.NewProvider(client, batonredis.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range emptyTagNames {
		if _, err := p.Acquire(context.Background(), name, lock.AcquireOptions{}); !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("Acquire(%q) = %v; want ErrInvalidName, before any command is sent", name, err)
		}
	}
}

func TestProvider_OnRedisClusterLockAndFenceShareASlot(t *testing.T) {
	env := testenv.RedisCluster(t)
	p, err := batonredis.NewProvider(env.Client, batonredis.Options{TTL: 1500 * time.Millisecond, SafetyMargin: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"plain", "with}brace", "{lead", "a{b}c", "{}", "x}"} {
		a, b := p.LockKey(name), p.FenceKey(name)
		sa, err := env.Client.ClusterKeySlot(ctx, a).Result()
		if err != nil {
			t.Fatal(err)
		}
		if sb, _ := env.Client.ClusterKeySlot(ctx, b).Result(); sa != sb {
			t.Errorf("%q: lock key %q in slot %d, fence key %q in slot %d", name, a, sa, b, sb)
		}
		l, err := p.Acquire(ctx, name, lock.AcquireOptions{Wait: 2 * time.Second})
		if err != nil {
			t.Errorf("Acquire(%q) on the cluster: %v", name, err)
			continue
		}
		if l.Token() == 0 {
			t.Errorf("Acquire(%q): no fencing token", name)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release(%q): %v", name, err)
		}
	}
	for _, name := range emptyTagNames {
		start := time.Now()
		_, err := p.Acquire(ctx, name, lock.AcquireOptions{Wait: 2 * time.Second})
		if !errors.Is(err, lock.ErrInvalidName) {
			t.Errorf("Acquire(%q) on the cluster after %v: %v; want ErrInvalidName at once", name, time.Since(start).Round(time.Millisecond), err)
		}
	}
}
