package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/internal/testenv"
	batonredis "github.com/baton-go/baton/locks/redis"
	goredis "github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newProvider(t testing.TB, env *testenv.RedisEnv, opts batonredis.Options) *batonredis.Provider {
	t.Helper()
	opts.Prefix = env.Prefix
	p, err := batonredis.NewProvider(env.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	conformance.RunLockProvider(t, func(t *testing.T) conformance.LockHarness {
		env := testenv.Redis(t)
		opts := batonredis.Options{TTL: 1500 * time.Millisecond, SafetyMargin: 200 * time.Millisecond}
		p := newProvider(t, env, opts)
		// A second node: its own client on the same server.
		other := goredis.NewClient(&goredis.Options{Addr: env.Addr})
		t.Cleanup(func() { other.Close() })
		opts.Prefix = env.Prefix
		second, err := batonredis.NewProvider(other, opts)
		if err != nil {
			t.Fatal(err)
		}
		return conformance.LockHarness{
			Provider: p,
			Second:   second,
			TakeAway: func(ctx context.Context, name string) error {
				n, err := env.Client.Del(ctx, p.LockKey(name)).Result()
				if err == nil && n != 1 {
					err = errors.New("no lock key to delete")
				}
				return err
			},
		}
	}, conformance.LockFeatures{LossDetection: 2 * time.Second})
}

func TestNew_RejectsInvalidOptions(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	for name, opts := range map[string]batonredis.Options{
		"brace in prefix":  {Prefix: "app{x}:"},
		"tiny TTL":         {TTL: time.Millisecond},
		"margin too large": {TTL: 3 * time.Second, SafetyMargin: 2 * time.Second},
		"negative margin":  {SafetyMargin: -time.Second},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := batonredis.NewProvider(client, opts); !errors.Is(err, lock.ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
		})
	}
	if _, err := batonredis.NewProvider(nil, batonredis.Options{}); !errors.Is(err, lock.ErrInvalidOptions) {
		t.Fatalf("nil client: err = %v", err)
	}
}

func TestLockAndFenceKeysShareAHashSlot(t *testing.T) {
	env := testenv.Redis(t)
	p := newProvider(t, env, batonredis.Options{})
	for _, name := range []string{"plain", "with}brace", "{lead", "a:b/c"} {
		a, b := p.LockKey(name), p.FenceKey(name)
		sa, err := env.Client.ClusterKeySlot(context.Background(), a).Result()
		if err != nil {
			t.Skipf("CLUSTER KEYSLOT unavailable: %v", err)
		}
		sb, _ := env.Client.ClusterKeySlot(context.Background(), b).Result()
		if sa != sb {
			t.Errorf("%q: lock key slot %d, fence key slot %d", name, sa, sb)
		}
	}
}

func TestAcquire_FailsClosedWhenRedisIsUnreachable(t *testing.T) {
	env := testenv.Redis(t)
	// A client of its own, so closing it cuts only this holder off.
	client := goredis.NewClient(&goredis.Options{Addr: env.Addr, MaxRetries: -1})
	p, err := batonredis.NewProvider(client, batonredis.Options{Prefix: env.Prefix, TTL: 900 * time.Millisecond, SafetyMargin: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := p.Acquire(ctx, "outage", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	client.Close() // every refresh now errors
	// The trust window (TTL − SafetyMargin) began at the last good refresh,
	// before the outage, so Trusted must answer false to any call made later
	// than 800ms after it. Trusted is a clock check and each call's time is
	// read before the call: a late poll on a loaded machine reads a later
	// time, never a false violation. Lost, closed by a timer, only has to
	// follow.
	const window = 800 * time.Millisecond
	for {
		asked := time.Since(start)
		trusted := l.Trusted()
		if trusted && asked > window {
			t.Fatalf("Trusted answered true %v after the outage began, beyond the trust window (%v)", asked, window)
		}
		if !trusted {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-l.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("Lost did not close while Redis was unreachable")
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) && err == nil {
		t.Fatal("Release after an outage reported success")
	}
}

func TestAcquire_IssuesTokensAfterTheServerForgetsItsScripts(t *testing.T) {
	env := testenv.Redis(t)
	p := newProvider(t, env, batonredis.Options{})
	ctx := context.Background()
	var prev uint64
	for i := range 3 {
		// A restarted server knows no scripts; both the obtain and the
		// fence must fall back to sending their source.
		if err := env.Client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := p.Acquire(ctx, "flushed", lock.AcquireOptions{})
		if err != nil {
			t.Fatalf("acquisition %d: %v", i, err)
		}
		if l.Token() <= prev {
			t.Fatalf("acquisition %d: token %d, want above %d", i, l.Token(), prev)
		}
		prev = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := env.Client.Get(ctx, p.FenceKey("flushed")).Uint64(); got != prev {
		t.Fatalf("fence counter %d, last token %d: a token was drawn without being issued", got, prev)
	}
}

// A Redis without persistence forgets the fence counter when it restarts.
// The tokens issued after the restart must still be above every token
// issued before it, or a resource that saw the old tokens refuses every new
// holder, and new terms carry tokens old ones had.
func TestAcquire_TokensKeepRisingAcrossARestartWithoutPersistence(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	p, err := batonredis.NewProvider(client, batonredis.Options{TTL: time.Second, SafetyMargin: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	acquire := func() uint64 {
		t.Helper()
		var l lock.Lock
		var err error
		for range 3 { // the first call after a restart may meet a dead pooled connection
			if l, err = p.Acquire(ctx, "restarted", lock.AcquireOptions{}); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return l.Token()
	}
	var highest uint64
	for range 3 {
		highest = max(highest, acquire())
	}
	for restart := range 2 {
		srv.Restart()
		if n, _ := client.Exists(ctx, p.FenceKey("restarted")).Result(); n != 0 {
			t.Fatal("the fence counter survived the restart; the test proves nothing")
		}
		tok := acquire()
		if tok <= highest {
			t.Fatalf("after restart %d the token is %d, not above %d issued before it", restart+1, tok, highest)
		}
		highest = tok
		if next := acquire(); next <= tok {
			t.Fatalf("after restart %d tokens went from %d to %d", restart+1, tok, next)
		}
		highest = max(highest, acquire())
	}
}

// The server's clock only raises a token: a counter already above it (two
// acquisitions within one microsecond, or a clock that went back) goes on
// counting by one.
func TestAcquire_ACounterAboveTheClockCountsOnByOne(t *testing.T) {
	env := testenv.Redis(t)
	p := newProvider(t, env, batonredis.Options{})
	ctx := context.Background()
	const ahead = 1 << 52 // far above the clock in microseconds, still exact in Lua
	if err := env.Client.Set(ctx, p.FenceKey("ahead"), ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 2; i++ {
		l, err := p.Acquire(ctx, "ahead", lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() != ahead+i {
			t.Fatalf("token %d, want %d: the counter plus one", l.Token(), ahead+i)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A Redis without persistence forgets the lock key when it restarts. The
// holder from before the restart goes on trusting its lock until a refresh
// finds the key gone, or until its trust runs out when its refreshes fail:
// an Acquire after the restart must not return while that holder may still
// trust its lock, or two holders act at once.
func TestAcquire_AfterARestartNotGrantedWhileAHolderFromBeforeStillTrusts(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	opts := batonredis.Options{TTL: 3 * time.Second, SafetyMargin: 300 * time.Millisecond}
	newNode := func() *batonredis.Provider {
		client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { client.Close() })
		p, err := batonredis.NewProvider(client, opts)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	first, second := newNode(), newNode()
	// A counter already there stands for a lock taken long ago: the first
	// holder is granted at once, its first refresh TTL/3 away.
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	if err := client.Set(ctx, first.FenceKey("failover"), 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	old, err := first.Acquire(ctx, "failover", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Release(context.Background()) })
	srv.Restart()
	if !old.Trusted() {
		t.Fatal("the old holder stopped trusting its lock during the restart; the test proves nothing")
	}
	taken, err := second.Acquire(ctx, "failover", lock.AcquireOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Release(ctx)
	if old.Trusted() {
		t.Fatal("the lock was granted after the restart while the holder from before it still trusted its lock")
	}
	if taken.Token() <= old.Token() {
		t.Fatalf("token %d after the restart, not above %d", taken.Token(), old.Token())
	}
}

// While an acquisition waits out the trust of holders from before a
// restart, it holds the key: nobody else is granted the lock meanwhile, and
// a cancelled wait gives the key back.
func TestAcquire_WaitingOutARestartHoldsTheKeyAndACancelGivesItBack(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	p, err := batonredis.NewProvider(client, batonredis.Options{TTL: 3 * time.Second, SafetyMargin: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Acquire(ctx, "quarantine", lock.AcquireOptions{})
		done <- err
	}()
	// Wait until the waiting acquisition has set the key.
	untilWaiting(t, done, func() (int64, error) {
		return client.Exists(context.Background(), p.LockKey("quarantine")).Result()
	})
	if _, err := p.Acquire(context.Background(), "quarantine", lock.AcquireOptions{}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("a second Acquire during the wait: %v, want lock.ErrNotAcquired", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v, want context.Canceled", err)
	}
	if n, _ := client.Exists(context.Background(), p.LockKey("quarantine")).Result(); n != 0 {
		t.Fatal("a cancelled wait left its key behind")
	}
}

// An acquisition that loses its key while it waits out a restart (deleted
// by hand, or the server restarted again) is not granted.
func TestAcquire_ALockLostWhileWaitingOutARestartIsNotGranted(t *testing.T) {
	srv := testenv.StartRedisServer(t)
	client := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { client.Close() })
	p, err := batonredis.NewProvider(client, batonredis.Options{TTL: 3 * time.Second, SafetyMargin: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Acquire(context.Background(), "lost", lock.AcquireOptions{})
		done <- err
	}()
	untilWaiting(t, done, func() (int64, error) {
		return client.Del(context.Background(), p.LockKey("lost")).Result()
	})
	if err := <-done; !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire after its key was deleted during the wait: %v, want lock.ErrNotAcquired", err)
	}
}

// untilWaiting calls keyOp until it answers 1 (the waiting acquisition's
// key was there), failing if the acquisition returned (on done) first.
func untilWaiting(t *testing.T, done <-chan error, keyOp func() (int64, error)) {
	t.Helper()
	for {
		n, err := keyOp()
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("Acquire returned %v before the server had been up a TTL", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
