package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/locks/pglock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// setup gives the test a migrated schema and a pool on it.
func setup(t testing.TB) *testenv.PostgresEnv {
	t.Helper()
	env := testenv.Postgres(t)
	if err := pgxstore.Migrate(context.Background(), env.Pool, pgxstore.MigrateOptions{}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return env
}

func newPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func newProvider(t testing.TB, pool *pgxpool.Pool, opts pglock.Options) *pglock.Provider {
	t.Helper()
	p, err := pglock.NewProvider(pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// terminateHolder ends the server session holding name's advisory lock.
func terminateHolder(ctx context.Context, pool *pgxpool.Pool, name string) error {
	return terminateHolderOf(ctx, pool, "", name)
}

// terminateHolderOf ends the server session holding the advisory lock of
// name in namespace ("" for none).
func terminateHolderOf(ctx context.Context, pool *pgxpool.Pool, namespace, name string) error {
	key := uint64(pglock.Key(name))
	if namespace != "" {
		key = uint64(pglock.KeyIn(namespace, name))
	}
	var n int
	err := pool.QueryRow(ctx, `
SELECT count(pg_terminate_backend(pid)) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid::text::bigint = $1 AND objid::text::bigint = $2`,
		int64(key>>32), int64(key&0xffffffff)).Scan(&n)
	if err == nil && n != 1 {
		err = fmt.Errorf("%d sessions hold %q", n, name)
	}
	return err
}

func TestConformance(t *testing.T) {
	runConformance(t, pglock.Options{PingInterval: 200 * time.Millisecond})
}

// With a namespace every statement must use the namespaced key: taking,
// unlocking and the harness's TakeAway alike.
func TestConformance_WithANamespace(t *testing.T) {
	runConformance(t, pglock.Options{PingInterval: 200 * time.Millisecond, Namespace: "tenant-a"})
}

func runConformance(t *testing.T, opts pglock.Options) {
	conformance.RunLockProvider(t, func(t *testing.T) conformance.LockHarness {
		env := setup(t)
		return conformance.LockHarness{
			Provider: newProvider(t, newPool(t, env.URL), opts),
			Second:   newProvider(t, newPool(t, env.URL), opts),
			TakeAway: func(ctx context.Context, name string) error {
				return terminateHolderOf(ctx, env.Pool, opts.Namespace, name)
			},
		}
	}, conformance.LockFeatures{LossDetection: time.Second})
}

func TestKey_IsFNV1aOfTheName(t *testing.T) {
	// The vectors published in docs/locks.md.
	for name, want := range map[string]int64{
		"":                    -3750763034362895579,
		"a":                   -5808556873153909620,
		"baton-outbox-driver": 200015145182114730,
	} {
		if got := pglock.Key(name); got != want {
			t.Errorf("Key(%q) = %d, want %d", name, got, want)
		}
	}
}

func TestAcquire_TakesTheAdvisoryLockUnderKey(t *testing.T) {
	env := setup(t)
	p := newProvider(t, newPool(t, env.URL), pglock.Options{})
	ctx := context.Background()
	l, err := p.Acquire(ctx, "visible", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var free bool
	if err := env.Pool.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", pglock.Key("visible")).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if free {
		t.Fatal("another session could take the advisory lock under Key(name) while the lock was held")
	}
	var token int64
	if err := env.Pool.QueryRow(ctx, "SELECT token FROM baton_lock_fences WHERE name = $1", "visible").Scan(&token); err != nil {
		t.Fatal(err)
	}
	if uint64(token) != l.Token() {
		t.Fatalf("fence row holds %d, the lock reports %d", token, l.Token())
	}
}

func TestAcquire_WithoutFenceTableFailsAndLeavesNoLockBehind(t *testing.T) {
	env := testenv.Postgres(t) // not migrated
	pool := newPool(t, env.URL)
	p := newProvider(t, pool, pglock.Options{})
	ctx := context.Background()
	if l, err := p.Acquire(ctx, "nofence", lock.AcquireOptions{}); err == nil {
		l.Release(ctx) // hands its connection back, or the pool's Close waits for it
		t.Fatal("acquired without a fence table")
	}
	var free bool
	if err := env.Pool.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", pglock.Key("nofence")).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if !free {
		t.Fatal("a failed acquisition left the advisory lock held")
	}
	env.Pool.Exec(ctx, "SELECT pg_advisory_unlock_all()")
}

func TestNew_RejectsInvalidOptions(t *testing.T) {
	env := testenv.Postgres(t)
	if _, err := pglock.NewProvider(nil, pglock.Options{}); !errors.Is(err, lock.ErrInvalidOptions) {
		t.Fatalf("nil pool: err = %v", err)
	}
	for name, opts := range map[string]pglock.Options{
		"negative ping":    {PingInterval: -time.Second},
		"schema too long":  {Schema: string(make([]byte, 64))},
		"inverted backoff": {Backoff: lock.Backoff{Min: time.Second, Max: time.Millisecond}},
	} {
		if _, err := pglock.NewProvider(env.Pool, opts); !errors.Is(err, lock.ErrInvalidOptions) {
			t.Errorf("%s: err = %v, want ErrInvalidOptions", name, err)
		}
	}
}

func TestSchemaOption_QualifiesTheFenceTable(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := context.Background()
	schema := env.Schema + "_Locks"
	if err := pgxstore.Migrate(ctx, env.Pool, pgxstore.MigrateOptions{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { env.Pool.Exec(context.Background(), `DROP SCHEMA "`+schema+`" CASCADE`) })
	p := newProvider(t, newPool(t, env.ServerURL), pglock.Options{Schema: schema})
	l, err := p.Acquire(ctx, "qualified", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Token() != 1 {
		t.Fatalf("token %d, want 1 from the schema's own counter", l.Token())
	}
}

func TestNamespace_KeepsDeploymentsInOneDatabaseApart(t *testing.T) {
	env := setup(t)
	ctx := context.Background()
	a := newProvider(t, newPool(t, env.URL), pglock.Options{Namespace: "tenant-a"})
	b := newProvider(t, newPool(t, env.URL), pglock.Options{Namespace: "tenant-b"})
	plain := newProvider(t, newPool(t, env.URL), pglock.Options{})
	la, err := a.Acquire(ctx, "baton-outbox-driver", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	lb, err := b.Acquire(ctx, "baton-outbox-driver", lock.AcquireOptions{})
	if err != nil {
		t.Fatalf("another namespace was blocked by the same lock name: %v", err)
	}
	defer lb.Release(ctx)
	lp, err := plain.Acquire(ctx, "baton-outbox-driver", lock.AcquireOptions{})
	if err != nil {
		t.Fatalf("no namespace was blocked: %v", err)
	}
	defer lp.Release(ctx)
	a2 := newProvider(t, newPool(t, env.URL), pglock.Options{Namespace: "tenant-a"})
	if l, err := a2.Acquire(ctx, "baton-outbox-driver", lock.AcquireOptions{}); err == nil {
		l.Release(ctx) // hands its connection back, or the pool's Close waits for it
		t.Fatal("a second node of the same namespace acquired a lock its first node holds")
	} else if !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("a second node of the same namespace: %v, want ErrNotAcquired", err)
	}
	if pglock.KeyIn("tenant-a", "x") == pglock.Key("x") || pglock.KeyIn("a", "bx") == pglock.KeyIn("ab", "x") {
		t.Fatal("namespaced keys collide with plain or shifted ones")
	}
	// Release unlocks the namespaced key: it succeeds, and the next node
	// of the namespace takes the lock at once.
	if err := la.Release(ctx); err != nil {
		t.Fatalf("Release of a namespaced lock: %v", err)
	}
	l, err := a2.Acquire(ctx, "baton-outbox-driver", lock.AcquireOptions{})
	if err != nil {
		t.Fatalf("the namespace's next node after Release: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// A session advisory lock taken by a statement that then fails outlives
// the statement's rollback. The acquiring statement takes the lock before
// it writes the fence row, so a failed write (here a trigger refusing it;
// a statement timeout or a full disk would do the same) must end the
// session, or the lock stays held by a pooled connection nobody owns.
func TestAcquire_AFailedFenceWriteLeavesNoLockBehind(t *testing.T) {
	env := setup(t)
	ctx := context.Background()
	if _, err := env.Pool.Exec(ctx, `
CREATE FUNCTION refuse_fences() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'fence writes refused'; END$$;
CREATE TRIGGER refuse_fences BEFORE INSERT OR UPDATE ON baton_lock_fences
FOR EACH ROW EXECUTE FUNCTION refuse_fences()`); err != nil {
		t.Fatal(err)
	}
	p := newProvider(t, newPool(t, env.URL), pglock.Options{})
	if l, err := p.Acquire(ctx, "refused", lock.AcquireOptions{}); err == nil {
		l.Release(ctx)
		t.Fatal("acquired although the fence row could not be written")
	}
	// The closed session's backend frees the lock as it exits, a moment
	// later; a lock left on a pooled connection is never freed.
	conn, err := env.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var free bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", pglock.Key("refused")).Scan(&free); err != nil {
			t.Fatal(err)
		}
		if free {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a failed acquisition left the advisory lock held")
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
}

// A cut network or a frozen server sends nothing: no FATAL, no close, so
// only the watcher's ping can tell. Lost must close, and Trusted answer
// false, although the socket stays open.
func TestLost_ClosesWhenTheServerFallsSilent(t *testing.T) {
	env := setup(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)))
	host, port, err := net.SplitHostPort(proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host = host
	fmt.Sscan(port, &cfg.ConnConfig.Port)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p := newProvider(t, pool, pglock.Options{PingInterval: 200 * time.Millisecond})
	l, err := p.Acquire(ctx, "silent", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Bounded: a release through the silent proxy gets no answer.
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l.Release(rctx)
	})
	proxy.SetMode(testenv.Blackhole)
	// A liveness bound, not a speed check.
	if !closedWithin(l.Lost(), 30*time.Second) {
		t.Fatal("Lost still open 30s after the server fell silent; only a ping can notice, and none failed")
	}
	if l.Trusted() {
		t.Fatal("Trusted after Lost closed")
	}
}

// pg_terminate_backend frees the advisory lock at once, and another session
// can take it at once; the holder must learn of it as soon as the server
// says so, not at its next ping. With an hour between pings, only the
// server's word can close Lost.
func TestLost_ClosesWhenTheBackendIsTerminatedWithoutWaitingForAPing(t *testing.T) {
	env := setup(t)
	p := newProvider(t, newPool(t, env.URL), pglock.Options{PingInterval: time.Hour})
	ctx := context.Background()
	l, err := p.Acquire(ctx, "terminated", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := l
	t.Cleanup(func() { first.Release(ctx) }) // hands the connection back if the test fails
	if err := terminateHolder(ctx, env.Pool, "terminated"); err != nil {
		t.Fatal(err)
	}
	// A liveness bound, not a speed check: see BenchmarkLost_AfterTerminate.
	if !closedWithin(l.Lost(), 30*time.Second) {
		t.Fatal("Lost still open 30s after the backend was terminated; the next ping is an hour away")
	}
	if l.Trusted() {
		t.Fatal("Trusted after Lost closed")
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release after loss: %v, want ErrNotHeld", err)
	}
	// A release interrupts the wait for the server at once, too. Lost
	// closed on the FATAL message, which comes before the exiting backend
	// frees the lock, so the next Acquire may have to wait for it.
	l, err = p.Acquire(ctx, "terminated", lock.AcquireOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Release: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Release still waiting 30s later; the watcher's wait must end at once")
	}
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
