package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/lock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// refreshLog records when the keepalive called Refresh, relative to start.
type refreshLog struct {
	mu    sync.Mutex
	start time.Time
	at    []time.Duration
}

func (r *refreshLog) record() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.at = append(r.at, time.Since(r.start))
}

func (r *refreshLog) calls() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.at...)
}

func startKeepalive(t *testing.T, cfg lock.KeepaliveConfig) *lock.Keepalive {
	t.Helper()
	k, err := lock.NewKeepalive(cfg, time.Now())
	if err != nil {
		t.Fatalf("NewKeepalive: %v", err)
	}
	t.Cleanup(func() { k.Stop() })
	return k
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestKeepalive_RefreshesEveryThirdOfTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &refreshLog{start: time.Now()}
		k := startKeepalive(t, lock.KeepaliveConfig{
			TTL:          30 * time.Second,
			SafetyMargin: time.Second,
			Refresh: func(ctx context.Context) error {
				log.record()
				return nil
			},
		})
		time.Sleep(95 * time.Second)
		synctest.Wait()
		want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second,
			50 * time.Second, 60 * time.Second, 70 * time.Second, 80 * time.Second, 90 * time.Second}
		got := log.calls()
		if len(got) != len(want) {
			t.Fatalf("refreshes at %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("refreshes at %v, want %v", got, want)
			}
		}
		if !k.Trusted() || isClosed(k.Lost()) {
			t.Fatal("a lock refreshed on time must stay trusted")
		}
	})
}

func TestKeepalive_IntervalCountsFromRequestStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &refreshLog{start: time.Now()}
		startKeepalive(t, lock.KeepaliveConfig{
			TTL: 30 * time.Second,
			Refresh: func(ctx context.Context) error {
				log.record()
				time.Sleep(4 * time.Second) // a slow server
				return nil
			},
		})
		time.Sleep(35 * time.Second)
		got := log.calls()
		want := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}
		if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("refreshes at %v, want %v: a slow refresh must not stretch the cadence", got, want)
		}
	})
}

// The server's TTL began no earlier than the refresh's request did, so a
// slow answer extends trust from the request's start, not from the answer:
// counting from the answer would trust the lock past the server's expiry by
// up to the round trip.
func TestKeepalive_TrustCountsFromTheStartOfTheSuccessfulRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var calls atomic.Int32
		k := startKeepalive(t, lock.KeepaliveConfig{
			TTL:          30 * time.Second,
			SafetyMargin: time.Second,
			Refresh: func(ctx context.Context) error {
				if calls.Add(1) == 1 {
					time.Sleep(4 * time.Second) // a slow server, which answers
					return nil
				}
				<-ctx.Done() // then none that answers
				return ctx.Err()
			},
		})
		<-k.Lost()
		// The one success started at 10s (TTL/3): trust ends at 10s + 29s.
		if got, want := time.Since(start), 39*time.Second; got != want {
			t.Fatalf("Lost closed after %v, want %v: the start of the refresh that succeeded + TTL - SafetyMargin", got, want)
		}
	})
}

func TestKeepalive_FailsClosedWhenRefreshStalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		k := startKeepalive(t, lock.KeepaliveConfig{
			TTL:          30 * time.Second,
			SafetyMargin: 2 * time.Second,
			Refresh: func(ctx context.Context) error {
				<-ctx.Done() // the server never answers
				return ctx.Err()
			},
		})
		<-k.Lost()
		if got, want := time.Since(start), 28*time.Second; got != want {
			t.Fatalf("Lost closed after %v, want exactly TTL-SafetyMargin = %v", got, want)
		}
		if k.Trusted() {
			t.Fatal("Trusted after Lost closed")
		}
		if !errors.Is(k.Err(), lock.ErrTrustExpired) {
			t.Fatalf("Err = %v, want ErrTrustExpired", k.Err())
		}
	})
}

func TestKeepalive_FailsClosedWhenRefreshIgnoresContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		release := make(chan struct{})
		k := startKeepalive(t, lock.KeepaliveConfig{
			TTL:          30 * time.Second,
			SafetyMargin: 2 * time.Second,
			Refresh: func(ctx context.Context) error {
				<-release // a client that does not honour ctx
				return nil
			},
		})
		<-k.Lost()
		if got := time.Since(start); got != 28*time.Second {
			t.Fatalf("Lost closed after %v, want 28s even though Refresh hangs", got)
		}
		close(release) // the late success must not resurrect the lock
		synctest.Wait()
		if k.Trusted() {
			t.Fatal("a success that arrived after trust ran out made the lock trusted again")
		}
	})
}

func TestKeepalive_FailsClosedWhenRefreshesError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &refreshLog{start: time.Now()}
		boom := errors.New("connection refused")
		k := startKeepalive(t, lock.KeepaliveConfig{
			TTL:          30 * time.Second,
			SafetyMargin: time.Second,
			Refresh: func(ctx context.Context) error {
				log.record()
				return boom
			},
		})
		<-k.Lost()
		if got := time.Since(log.start); got != 29*time.Second {
			t.Fatalf("Lost closed after %v, want 29s", got)
		}
		if n := len(log.calls()); n < 3 {
			t.Fatalf("only %d refresh attempts before trust ran out; a failing refresh must be retried", n)
		}
		if !errors.Is(k.Err(), lock.ErrTrustExpired) {
			t.Fatalf("Err = %v, want ErrTrustExpired", k.Err())
		}
	})
}

func TestKeepalive_TransientErrorIsRetriedAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		calls := 0
		k := startKeepalive(t, lock.KeepaliveConfig{
			TTL: 30 * time.Second,
			Refresh: func(ctx context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if calls == 1 {
					return errors.New("timeout")
				}
				return nil
			},
		})
		time.Sleep(5 * time.Minute)
		if isClosed(k.Lost()) || !k.Trusted() {
			t.Fatalf("one failed refresh lost the lock: %v", k.Err())
		}
	})
}

func TestKeepalive_NotOursClosesLostAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		k := startKeepalive(t, lock.KeepaliveConfig{
			TTL: 30 * time.Second,
			Refresh: func(ctx context.Context) error {
				return lock.ErrNotHeld
			},
		})
		<-k.Lost()
		if got := time.Since(start); got != 10*time.Second {
			t.Fatalf("Lost closed after %v, want at the first refresh (10s)", got)
		}
		if !errors.Is(k.Err(), lock.ErrNotHeld) {
			t.Fatalf("Err = %v, want ErrNotHeld", k.Err())
		}
	})
}

func TestKeepalive_TrustedTurnsFalseWithoutTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Trusted is judged from the clock, so it is false the instant the
		// window ends, even before any goroutine has run.
		k := startKeepalive(t, lock.KeepaliveConfig{
			TTL:          3 * time.Second,
			SafetyMargin: time.Second,
			Interval:     time.Second,
			Refresh: func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			},
		})
		time.Sleep(1999 * time.Millisecond)
		if !k.Trusted() {
			t.Fatal("not trusted 1ms before the window ends")
		}
		time.Sleep(time.Millisecond)
		if k.Trusted() {
			t.Fatal("still trusted when the window ended")
		}
	})
}

func TestKeepalive_LostIsClosedWhenLookedAtAfterTheWindowEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A holder that resumes after a pause looks at Lost before the
		// expiry timer's goroutine has had a chance to run: the window has
		// ended, so Lost must be closed already, as Trusted is false. Here
		// the window ended before the keepalive even started.
		k, err := lock.NewKeepalive(lock.KeepaliveConfig{
			TTL:          3 * time.Second,
			SafetyMargin: time.Second,
			Interval:     time.Second,
			Refresh: func(ctx context.Context) error {
				<-ctx.Done()
				return ctx.Err()
			},
		}, time.Now().Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer k.Stop()
		if k.Trusted() {
			t.Fatal("trusted a minute after its window ended")
		}
		if !isClosed(k.Lost()) {
			t.Fatal("Lost still open although the trust window has ended")
		}
		if !errors.Is(k.Err(), lock.ErrTrustExpired) {
			t.Fatalf("Err = %v, want ErrTrustExpired", k.Err())
		}
	})
}

func TestKeepalive_StopClosesLostAndStopsRefreshing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &refreshLog{start: time.Now()}
		k, err := lock.NewKeepalive(lock.KeepaliveConfig{
			TTL:     30 * time.Second,
			Refresh: func(ctx context.Context) error { log.record(); return nil },
		}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(15 * time.Second)
		if !k.Stop() {
			t.Fatal("Stop reported the lock untrusted while it was held")
		}
		if !isClosed(k.Lost()) {
			t.Fatal("Lost still open after Stop")
		}
		n := len(log.calls())
		time.Sleep(time.Minute)
		if len(log.calls()) != n {
			t.Fatal("refreshes continued after Stop")
		}
		if k.Stop() {
			t.Fatal("a second Stop reported the lock trusted")
		}
	})
}

func TestKeepalive_RejectsInvalidConfig(t *testing.T) {
	ok := func(context.Context) error { return nil }
	cases := map[string]lock.KeepaliveConfig{
		"zero TTL":                {TTL: 0, Refresh: ok},
		"negative margin":         {TTL: time.Second, SafetyMargin: -1, Refresh: ok},
		"margin eats the window":  {TTL: 3 * time.Second, SafetyMargin: 2 * time.Second, Refresh: ok},
		"interval beyond the TTL": {TTL: 3 * time.Second, Interval: 3 * time.Second, Refresh: ok},
		"no refresh func":         {TTL: time.Second},
	}
	for name, cfg := range cases {
		t.Run(name, func(t *testing.T) {
			k, err := lock.NewKeepalive(cfg, time.Now())
			if err == nil {
				k.Stop()
				t.Fatal("accepted")
			}
			if !errors.Is(err, lock.ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
		})
	}
}

// An acquisition that took longer than its trust window (a slow obtain, a
// GC pause between acquire and keepalive) starts a keepalive whose trust
// has already run out: the expiry timer fires at once, and it must find the
// keepalive fully built, close Lost and never refresh.
func TestKeepalive_StartedAfterTrustRanOutIsLostAtOnceWithoutAPanic(t *testing.T) {
	for range 200 {
		refreshed := make(chan struct{}, 1)
		k, err := lock.NewKeepalive(lock.KeepaliveConfig{
			TTL: 30 * time.Second,
			Refresh: func(ctx context.Context) error {
				refreshed <- struct{}{}
				return nil
			},
		}, time.Now().Add(-time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		<-k.Lost()
		if k.Trusted() {
			t.Fatal("trusted although its trust ran out before it started")
		}
		if !errors.Is(k.Err(), lock.ErrTrustExpired) {
			t.Fatalf("Err = %v, want ErrTrustExpired", k.Err())
		}
		if k.Stop() {
			t.Fatal("Stop reported the lock trusted")
		}
		select {
		case <-refreshed:
			t.Fatal("refreshed a lock whose trust had run out")
		default:
		}
	}
}

// BenchmarkKeepaliveStartStop is what a keepalive adds to a lock held for
// less than one refresh interval: its timers set and stopped.
func BenchmarkKeepaliveStartStop(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		k, err := lock.NewKeepalive(lock.KeepaliveConfig{TTL: 10 * time.Second, SafetyMargin: time.Second,
			Refresh: func(context.Context) error { return nil }}, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		k.Stop()
	}
}
