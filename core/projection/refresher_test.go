package projection_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/projection"
)

// runInBackground runs run(ctx) until the test ends, then checks it
// returned the context's error.
func runInBackground(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v once its ctx ended, want nil", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newRefresher(t *testing.T, opts projection.RefresherConfig) *projection.Refresher {
	t.Helper()
	r, err := projection.NewRefresher(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRefresher_RefreshesTheListedSubjectsAtStartThenEveryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, source := newCountingStore(), newFakeSource()
		source.set(alice, doc("d-1", 1))
		r := newRefresher(t, projection.RefresherConfig{
			Store: store, Source: source, Interval: time.Minute,
			Subjects: func(context.Context) ([]projection.Subject, error) { return []projection.Subject{alice, bob}, nil },
		})
		runInBackground(t, r.Run)
		synctest.Wait()
		if a, b := source.callsOf(alice), source.callsOf(bob); a != 1 || b != 1 {
			t.Fatalf("at start: %d and %d refreshes, want 1 each", a, b)
		}
		if _, found, err := store.Mask(context.Background(), alice, "doc", "d-1"); err != nil || !found {
			t.Fatalf("after the first pass Mask = %v, %v", found, err)
		}
		time.Sleep(time.Minute - time.Nanosecond)
		synctest.Wait()
		if a := source.callsOf(alice); a != 1 {
			t.Fatalf("before the interval ended: %d refreshes", a)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if a, b := source.callsOf(alice), source.callsOf(bob); a != 2 || b != 2 {
			t.Fatalf("after one interval: %d and %d refreshes, want 2 each", a, b)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if a := source.callsOf(alice); a != 12 {
			t.Fatalf("after 11 intervals: %d refreshes, want 12", a)
		}
	})
}

func TestRefresher_SignalRefreshesAtOnceAndOnceWhenRepeated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, source := newCountingStore(), newFakeSource()
		signals := make(chan projection.Subject)
		r := newRefresher(t, projection.RefresherConfig{Store: store, Source: source, Signals: signals})

		// Asked before Run: waits for it, and is queued once.
		for range 3 {
			if err := r.Refresh(alice); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Hour)
		if n := source.callsOf(alice); n != 0 {
			t.Fatalf("%d refreshes before Run", n)
		}
		runInBackground(t, r.Run)
		synctest.Wait()
		if n := source.callsOf(alice); n != 1 {
			t.Fatalf("%d refreshes after three signals before Run, want 1", n)
		}
		signals <- bob
		synctest.Wait()
		if n := source.callsOf(bob); n != 1 {
			t.Fatalf("%d refreshes of a subject from the Signals channel, want 1", n)
		}
		// Without Subjects there is no schedule.
		time.Sleep(24 * time.Hour)
		synctest.Wait()
		if a, b := source.callsOf(alice), source.callsOf(bob); a != 1 || b != 1 {
			t.Fatalf("a day later: %d and %d refreshes; nothing was signalled", a, b)
		}
		close(signals) // Run goes on without the channel
		synctest.Wait()
		if err := r.Refresh(alice); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := source.callsOf(alice); n != 2 {
			t.Fatalf("after the Signals channel closed, Refresh gave %d refreshes, want 2", n)
		}
	})
}

func TestRefresher_SignalDuringALongPassIsServedBeforeThePassEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCountingStore()
		var mu sync.Mutex
		var order []string
		slow := projection.SourceFunc(func(ctx context.Context, s projection.Subject) ([]projection.Grant, error) {
			mu.Lock()
			order = append(order, s.ID)
			mu.Unlock()
			time.Sleep(time.Second) // each scheduled refresh takes a second
			return nil, nil
		})
		var many []projection.Subject
		for _, id := range []string{"s1", "s2", "s3", "s4"} {
			many = append(many, projection.Subject{Type: "user", ID: id})
		}
		r := newRefresher(t, projection.RefresherConfig{
			Store: store, Source: slow, Interval: time.Hour,
			Subjects: func(context.Context) ([]projection.Subject, error) { return many, nil },
		})
		runInBackground(t, r.Run)
		time.Sleep(500 * time.Millisecond) // inside s1's refresh
		if err := r.Refresh(alice); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if got := strings.Join(order, ","); got != "s1,alice,s2,s3,s4" {
			t.Errorf("refresh order = %s; the signal should wait only for the refresh in progress", got)
		}
	})
}

// warnCounter is a slog handler that counts Warn records.
type warnCounter struct {
	mu    sync.Mutex
	warns int
}

func (h *warnCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *warnCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.mu.Lock()
		h.warns++
		h.mu.Unlock()
	}
	return nil
}
func (h *warnCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnCounter) WithGroup(string) slog.Handler      { return h }

func (h *warnCounter) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.warns
}

// A signalled refresh that a fresher one overtakes has nothing to redo: it
// is neither a failure to warn about nor one to retry.
func TestRefresher_AStaleRefreshIsNeitherWarnedAboutNorRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCountingStore()
		engine := &snapshotEngine{}
		engine.set(doc("d-1", 1))
		warns := &warnCounter{}
		r := newRefresher(t, projection.RefresherConfig{Store: store, Source: engine, RetryDelay: 10 * time.Second, Logger: slog.New(warns)})
		runInBackground(t, r.Run)
		started, release := engine.holdNext()
		if err := r.Refresh(alice); err != nil {
			t.Fatal(err)
		}
		<-started
		engine.set() // revoked; another node refreshes with that
		other := newReader(t, store, engine)
		if _, err := other.Refresh(context.Background(), alice); err != nil {
			t.Fatal(err)
		}
		release()
		synctest.Wait()
		replaces, _ := store.counts()
		time.Sleep(time.Minute) // several RetryDelays
		synctest.Wait()
		if again, _ := store.counts(); again != replaces {
			t.Fatalf("%d more Replace calls after a stale refresh; it must not be retried", again-replaces)
		}
		if n := warns.count(); n != 0 {
			t.Fatalf("%d warnings for a refresh that someone fresher overtook", n)
		}
		if _, found, _ := store.Mask(context.Background(), alice, "doc", "d-1"); found {
			t.Fatal("the stale answer is active")
		}
	})
}

func TestRefresher_FailedSignalledRefreshIsRetriedAfterRetryDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, source := newCountingStore(), newFakeSource()
		source.fail(errEngineDown)
		r := newRefresher(t, projection.RefresherConfig{Store: store, Source: source, RetryDelay: 10 * time.Second})
		runInBackground(t, r.Run)
		if err := r.Refresh(alice); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := source.callsOf(alice); n != 1 {
			t.Fatalf("%d attempts, want 1", n)
		}
		time.Sleep(10*time.Second - time.Nanosecond)
		synctest.Wait()
		if n := source.callsOf(alice); n != 1 {
			t.Fatalf("%d attempts before RetryDelay passed, want 1", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := source.callsOf(alice); n != 2 {
			t.Fatalf("%d attempts after RetryDelay, want 2", n)
		}
		source.fail(nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if n := source.callsOf(alice); n != 3 {
			t.Fatalf("%d attempts, want 3", n)
		}
		if _, err := store.Snapshot(context.Background(), alice); err != nil {
			t.Fatalf("after the retry succeeded: %v", err)
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := source.callsOf(alice); n != 3 {
			t.Fatalf("%d attempts after success, want no more", n)
		}
	})
}

func TestRefresher_FailuresDoNotStopTheSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, source := newCountingStore(), newFakeSource()
		source.fail(errEngineDown)
		listErr := errors.New("directory down")
		var mu sync.Mutex
		listFails := true
		r := newRefresher(t, projection.RefresherConfig{
			Store: store, Source: source, Interval: time.Minute,
			Subjects: func(context.Context) ([]projection.Subject, error) {
				mu.Lock()
				defer mu.Unlock()
				if listFails {
					return nil, listErr
				}
				return []projection.Subject{alice, {Type: "", ID: "invalid"}}, nil
			},
		})
		runInBackground(t, r.Run)
		synctest.Wait()
		mu.Lock()
		listFails = false
		mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := source.callsOf(alice); n != 1 {
			t.Fatalf("%d refreshes after the listing recovered, want 1", n)
		}
		source.fail(nil)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := source.callsOf(alice); n != 2 {
			t.Fatalf("%d refreshes, want 2", n)
		}
		if _, err := store.Snapshot(context.Background(), alice); err != nil {
			t.Fatalf("after a good pass: %v", err)
		}
	})
}

func TestRefresher_RunTwiceAtOnceIsRefusedAndRunEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRefresher(t, projection.RefresherConfig{Store: newCountingStore(), Source: newFakeSource()})
		stop := runInBackground(t, r.Run)
		synctest.Wait()
		if err := r.Run(context.Background()); !errors.Is(err, projection.ErrRunning) {
			t.Fatalf("a second Run = %v, want ErrRunning", err)
		}
		stop()
		// Stopped, it may run again.
		runInBackground(t, r.Run)
	})
}

func TestNewRefresher_RejectsInvalidOptionsNamingTheField(t *testing.T) {
	subjects := func(context.Context) ([]projection.Subject, error) { return nil, nil }
	store, source := newCountingStore(), newFakeSource()
	cases := map[string]projection.RefresherConfig{
		"RefresherConfig.Store":      {Source: source},
		"RefresherConfig.Source":     {Store: store},
		"RefresherConfig.Interval":   {Store: store, Source: source, Subjects: subjects, Interval: -time.Second},
		"Subjects is nil":            {Store: store, Source: source, Interval: time.Second},
		"RefresherConfig.RetryDelay": {Store: store, Source: source, RetryDelay: -1},
	}
	for mention, opts := range cases {
		_, err := projection.NewRefresher(opts)
		if !errors.Is(err, projection.ErrInvalidConfig) || !strings.Contains(err.Error(), mention) {
			t.Errorf("NewRefresher(%s) = %v, want ErrInvalidConfig mentioning it", mention, err)
		}
	}
	r := newRefresher(t, projection.RefresherConfig{Store: store, Source: source})
	if err := r.Refresh(projection.Subject{ID: "x"}); !errors.Is(err, projection.ErrInvalidSubject) {
		t.Errorf("Refresh(invalid) = %v, want ErrInvalidSubject", err)
	}
}
