package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// The driver's wake-ups, on the memory store (whose commits signal its
// listeners) under synctest: time moves only when every goroutine waits,
// so "delivered without the clock moving" means woken, not polled.

// wakeConfig is the rig's config with an IdleDelay so long that only a
// wake-up can deliver within a test.
func (r *rig) wakeConfig(procs ...outbox.Processor) outbox.Config {
	cfg := r.config(procs...)
	cfg.IdleDelay = time.Hour
	return cfg
}

func TestWake_ACommitIsDeliveredAtOnceNotAtTheNextPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		rec := &recorder{lane: "a"}
		r.run(r.wakeConfig(rec))
		synctest.Wait() // the first pass found nothing; the leader listens
		start := time.Now()
		id := r.commit("a")
		synctest.Wait()
		if got := ids(rec.delivered()); len(got) != 1 || got[0] != id[0] {
			t.Fatalf("delivered %v, want %v at once", got, id)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("delivered %v after the commit, want at once", d)
		}
	})
}

func TestWake_PollOnlyWaitsForIdleDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		rec := &recorder{lane: "a"}
		cfg := r.config(rec)
		cfg.PollOnly = true
		r.run(cfg)
		synctest.Wait()
		start := time.Now()
		r.commit("a")
		synctest.Wait()
		if n := len(rec.delivered()); n != 0 {
			t.Fatalf("PollOnly delivered %d entries at once; it must not listen", n)
		}
		time.Sleep(cfg.IdleDelay - time.Since(start))
		synctest.Wait()
		if n := len(rec.delivered()); n != 1 {
			t.Fatalf("PollOnly delivered %d entries at IdleDelay, want 1", n)
		}
	})
}

// A burst of commits while the leader delivers is one pass, not one per
// commit: the leader is not idle while it works, so they do not signal,
// and the Idle that follows reports them all; the next pass starts 2ms
// later (streamPause), and takes them all.
func TestWake_ABurstDuringAPassIsOnePass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		release := make(chan struct{})
		var once sync.Once
		rec := &recorder{lane: "a"}
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			once.Do(func() { <-release }) // the first delivery waits for the burst
			return all(len(run), outbox.Delivered()), nil
		})
		cs := &countingStore{OutboxStore: r.store}
		cfg := r.wakeConfig(rec)
		cfg.Store, cfg.BatchSize = cs, 100
		r.run(cfg)
		synctest.Wait()
		r.commit("a")
		synctest.Wait() // the woken pass is delivering
		for range 20 {
			r.commit("a")
		}
		close(release)
		time.Sleep(2 * time.Millisecond) // the pause after a pass that delivered, for the stream to gather
		synctest.Wait()
		if n := len(rec.delivered()); n != 21 {
			t.Fatalf("delivered %d entries, want 21", n)
		}
		if n := cs.count(); n != 3 {
			t.Fatalf("%d scans: want the first (empty), the woken one, and one for the burst", n)
		}
	})
}

// An entry signalled while an older transaction holds the horizon back is
// delivered soon after that transaction ends, by scans that start fast and
// slow down the longer the horizon stays pinned.
func TestWake_APinnedHorizonIsScannedAgainUntilTheSignalledEntryShows(t *testing.T) {
	for _, pin := range []time.Duration{2 * time.Second, 20 * time.Minute} {
		t.Run(pin.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t)
				rec := &recorder{lane: "a"}
				cs := &countingStore{OutboxStore: r.store}
				cfg := r.wakeConfig(rec)
				cfg.Store, cfg.IdleDelay = cs, 24*time.Hour
				r.run(cfg)
				synctest.Wait()
				ctx := context.Background()
				older, _ := r.store.Begin(ctx)
				if err := older.Enqueue(ctx, outbox.NewID(), "a", []byte(`0`)); err != nil {
					t.Fatal(err)
				}
				before := cs.count()
				r.commit("a")
				time.Sleep(pin)
				synctest.Wait()
				if n := len(rec.delivered()); n != 0 {
					t.Fatalf("delivered %d entries above the horizon", n)
				}
				scans := cs.count() - before
				// 1 ms doubling to 20 ms, then a hundredth of the pin so far.
				limit := 10 + int(pin/(20*time.Millisecond))
				if pin > 10*time.Second {
					limit = 10 + 100 + 700 // 2s at 20ms, then gaps growing by 1% a scan
				}
				if scans > limit {
					t.Fatalf("%d scans while the horizon was pinned for %v, want at most %d", scans, pin, limit)
				}
				ended := time.Now()
				if err := older.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				for len(rec.delivered()) < 2 {
					time.Sleep(time.Millisecond)
				}
				late := time.Since(ended)
				// The next scan is at most one gap away: wakeRetryCap (20ms),
				// or a hundredth of the pin.
				if bound := max(20*time.Millisecond, pin/100+time.Millisecond); late > bound {
					t.Fatalf("delivered %v after the horizon passed, want within %v", late, bound)
				}
				t.Logf("pinned %v: %d scans; delivered %v after it ended", pin, scans, late)
			})
		})
	}
}

// flakyWaker is the memory store whose listening can be broken: its
// sessions fail while down is set, and Listen fails too.
type flakyWaker struct {
	*countingStore
	mu      sync.Mutex
	down    bool
	busy    bool
	listens int
	open    []*flakyListener
}

var errDown = errors.New("the listen connection is gone")

func (f *flakyWaker) Listen(ctx context.Context) (outbox.Listener, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listens++
	if f.down {
		return nil, errDown
	}
	l, err := f.countingStore.Listen(ctx)
	if err != nil {
		return nil, err
	}
	fl := &flakyListener{Listener: l, f: f}
	f.open = append(f.open, fl)
	return fl, nil
}

// kill breaks every open session and keeps new ones from opening.
func (f *flakyWaker) kill() {
	f.mu.Lock()
	f.down = true
	open := f.open
	f.open = nil
	f.mu.Unlock()
	for _, l := range open {
		l.Close() // a Wait in progress returns ErrListenerClosed
	}
}

func (f *flakyWaker) revive() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = false
}

func (f *flakyWaker) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listens
}

// busy makes Idle answer busy, as with a producer in flight.
func (f *flakyWaker) setBusy(b bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.busy = b
}

type flakyListener struct {
	outbox.Listener
	f *flakyWaker
}

func (l *flakyListener) Idle(ctx context.Context, after outbox.Cursor) (bool, uint64, error) {
	l.f.mu.Lock()
	down, busy := l.f.down, l.f.busy
	l.f.mu.Unlock()
	switch {
	case down:
		return false, 0, errDown
	case busy:
		return false, 0, nil
	}
	return l.Listener.Idle(ctx, after)
}

func TestWake_ALostSessionFallsBackToPollingAndListensAgainWithBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		rec := &recorder{lane: "a"}
		fw := &flakyWaker{countingStore: &countingStore{OutboxStore: r.store}}
		cfg := r.config(rec) // IdleDelay 5s, ErrorDelay 30s
		cfg.Store = fw
		r.run(cfg)
		synctest.Wait()
		if n := fw.attempts(); n != 1 {
			t.Fatalf("%d Listen calls after the first pass, want 1", n)
		}

		fw.kill()
		synctest.Wait()
		start := time.Now()
		r.commit("a")
		synctest.Wait()
		if n := len(rec.delivered()); n != 0 {
			t.Fatalf("delivered %d entries at once with the session gone", n)
		}
		// Polling goes on at IdleDelay at the latest, and every poll
		// tries to listen again once its backoff has passed.
		for len(rec.delivered()) < 1 {
			time.Sleep(100 * time.Millisecond)
		}
		if d := time.Since(start); d > cfg.IdleDelay {
			t.Fatalf("delivered %v after the commit with the session gone, want by polling within IdleDelay (%v)", d, cfg.IdleDelay)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		// 100ms, 200ms, ... doubling to ErrorDelay (30s): about a dozen
		// attempts in two minutes, not one per poll or per millisecond.
		if n := fw.attempts(); n < 4 || n > 16 {
			t.Fatalf("%d Listen calls in two minutes down, want a backoff up to ErrorDelay", n)
		}

		fw.revive()
		time.Sleep(cfg.ErrorDelay)
		synctest.Wait()
		start = time.Now()
		id := r.commit("a")
		synctest.Wait()
		if got := ids(rec.delivered()); len(got) != 2 || got[1] != id[0] {
			t.Fatalf("delivered %v after listening again, want %v at once", got, id)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("delivered %v after the commit once listening again, want at once", d)
		}
	})
}

// Only the leader listens, and it stops listening when it stops leading.
func TestWake_OnlyTheLeaderListens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		fw := &flakyWaker{countingStore: &countingStore{OutboxStore: r.store}}
		cfg := r.config(&recorder{lane: "a"})
		cfg.Store = fw
		stop := r.run(cfg)
		synctest.Wait() // the first leads
		r.run(cfg)
		synctest.Wait()
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := fw.attempts(); n != 1 {
			t.Fatalf("%d Listen calls with two drivers, want the leader's one", n)
		}
		stop()
		time.Sleep(time.Minute) // the other takes over
		synctest.Wait()
		if n := fw.attempts(); n != 2 {
			t.Fatalf("%d Listen calls after the takeover, want 2", n)
		}
	})
}

// While Idle answers busy (an enqueue in flight that may not signal), the
// leader walks again soon instead of waiting out IdleDelay.
func TestWake_BusyMeansWalkAgainSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		rec := &recorder{lane: "a"}
		fw := &flakyWaker{countingStore: &countingStore{OutboxStore: r.store}, busy: true}
		cfg := r.wakeConfig(rec)
		cfg.Store = fw
		r.run(cfg)
		time.Sleep(10 * time.Millisecond)
		r.commit("a") // the listener is not idle: no signal
		start := time.Now()
		for len(rec.delivered()) < 1 {
			time.Sleep(time.Millisecond)
		}
		if d := time.Since(start); d > 20*time.Millisecond {
			t.Fatalf("delivered %v after the commit while Idle answered busy, want at the next of the quick walks", d)
		}
	})
}
