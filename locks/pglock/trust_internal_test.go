package pglock

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/internal/testenv"
)

// A process paused longer than a few ping intervals cannot know whether
// the server still has its session. Holding the connection's mutex stalls
// the watcher exactly as such a pause would: no check succeeds, while Lost
// stays open.
func TestTrusted_IsFalseWhileNoConnectionCheckSucceedsAndTrueAgainAfterOne(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := context.Background()
	if err := pgxstore.Migrate(ctx, env.Pool, pgxstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Long enough that a busy machine (the whole module's tests at once)
	// cannot delay a check past trustedChecks intervals by scheduling
	// alone, short enough that a stalled check shows within a few seconds.
	const interval = 500 * time.Millisecond
	p, err := NewProvider(env.Pool, Options{PingInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	held, err := p.Acquire(ctx, "trust-check", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := held.(*Lock)
	defer l.Release(ctx)
	if !l.Trusted() {
		t.Fatal("Trusted() is false on a fresh lock")
	}

	l.mu.Lock() // the watcher's next check waits here
	waitFor(t, "Trusted() to turn false while no check succeeds", func() bool { return !l.Trusted() })
	l.mu.Unlock()
	select {
	case <-l.Lost():
		t.Fatal("Lost closed: a stalled check is not a lost session")
	default:
	}
	waitFor(t, "Trusted() to turn true after a check succeeded", l.Trusted)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
