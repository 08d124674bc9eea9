package workrow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// A listening Run, on the memory store (whose inserts signal its idle
// listeners) under synctest: handled without the clock moving means woken,
// not polled.

// handled records the rows a handler saw, with when.
type handled struct {
	mu  sync.Mutex
	ids []int64
}

func (h *handled) handler(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids = append(h.ids, c.ID)
	return workrow.Complete()
}

func (h *handled) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids)
}

func TestWake_AnInsertIsClaimedAtOnceNotAtTheNextPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(0)
		h := &handled{}
		cfg := jobConfig(store, h.handler)
		cfg.IdleDelay = time.Hour
		runWorker(t, newWorker(t, cfg))
		synctest.Wait()
		start := time.Now()
		store.insert(job{ID: 1, Seq: 1})
		synctest.Wait()
		if n := h.count(); n != 1 {
			t.Fatalf("%d rows handled after the insert, want 1 at once", n)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("handled %v after the insert, want at once", d)
		}
		claims, _ := store.counts()
		if err := store.Insert(context.Background(), job{ID: 2, Seq: 2}, job{ID: 3, Seq: 3}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := h.count(); n != 3 {
			t.Fatalf("%d rows handled after the second insert, want 3", n)
		}
		// The woken claim, and the one that finds the table empty again,
		// then the claim a fresh idle state makes for rows that did not
		// signal; then it waits.
		if c, _ := store.counts(); c-claims != 3 {
			t.Fatalf("%d claims for one signalled insert, want 3", c-claims)
		}
	})
}

func TestWake_PollOnlyClaimsEveryIdleDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(0)
		h := &handled{}
		cfg := jobConfig(store, h.handler)
		cfg.IdleDelay, cfg.PollOnly = time.Minute, true
		runWorker(t, newWorker(t, cfg))
		synctest.Wait()
		store.insert(job{ID: 1, Seq: 1})
		synctest.Wait()
		if n := h.count(); n != 0 {
			t.Fatalf("PollOnly handled %d rows at once; it must not listen", n)
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := h.count(); n != 1 {
			t.Fatalf("PollOnly handled %d rows at IdleDelay, want 1", n)
		}
	})
}

// flakyRows is the memory store whose listening can be broken or busy.
type flakyRows struct {
	*memStore[job]
	mu      sync.Mutex
	down    bool
	busy    bool
	listens int
	open    []workrow.Listener
}

var errGone = errors.New("the listen connection is gone")

func (f *flakyRows) Listen(ctx context.Context) (workrow.Listener, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listens++
	if f.down {
		return nil, errGone
	}
	l, err := f.memStore.Listen(ctx)
	if err != nil {
		return nil, err
	}
	f.open = append(f.open, l)
	return flakyRowListener{l, f}, nil
}

func (f *flakyRows) set(down, busy bool) {
	f.mu.Lock()
	f.down, f.busy = down, busy
	open := f.open
	if down {
		f.open = nil
	}
	f.mu.Unlock()
	if down {
		for _, l := range open {
			l.Close()
		}
	}
}

func (f *flakyRows) attempts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.listens
}

type flakyRowListener struct {
	workrow.Listener
	f *flakyRows
}

func (l flakyRowListener) Idle(ctx context.Context) (bool, error) {
	l.f.mu.Lock()
	down, busy := l.f.down, l.f.busy
	l.f.mu.Unlock()
	switch {
	case down:
		return false, errGone
	case busy:
		return false, nil
	}
	return l.Listener.Idle(ctx)
}

func TestWake_ALostSessionFallsBackToPollingAndListensAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flakyRows{memStore: newJobs(0)}
		h := &handled{}
		cfg := jobConfig(f, h.handler)
		cfg.IdleDelay, cfg.ErrorDelay = 5*time.Second, 30*time.Second
		runWorker(t, newWorker(t, cfg))
		synctest.Wait()
		f.set(true, false)
		synctest.Wait()
		start := time.Now()
		f.insert(job{ID: 1, Seq: 1})
		synctest.Wait()
		if n := h.count(); n != 0 {
			t.Fatalf("%d rows handled at once with the session gone", n)
		}
		for h.count() < 1 {
			time.Sleep(100 * time.Millisecond)
		}
		if d := time.Since(start); d > cfg.IdleDelay {
			t.Fatalf("handled %v after the insert with the session gone, want by polling within IdleDelay", d)
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := f.attempts(); n < 4 || n > 16 {
			t.Fatalf("%d Listen calls in two minutes down, want a backoff up to ErrorDelay", n)
		}
		f.set(false, false)
		time.Sleep(cfg.ErrorDelay)
		synctest.Wait()
		start = time.Now()
		f.insert(job{ID: 2, Seq: 2})
		synctest.Wait()
		if n := h.count(); n != 2 || time.Since(start) != 0 {
			t.Fatalf("%d rows handled %v after the insert once listening again, want 2 at once", n, time.Since(start))
		}
	})
}

func TestWake_BusyMeansClaimAgainSoon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flakyRows{memStore: newJobs(0), busy: true}
		h := &handled{}
		cfg := jobConfig(f, h.handler)
		cfg.IdleDelay = time.Hour
		runWorker(t, newWorker(t, cfg))
		time.Sleep(time.Second)
		f.insert(job{ID: 1, Seq: 1}) // the session is not idle: no signal
		start := time.Now()
		for h.count() < 1 {
			time.Sleep(time.Millisecond)
		}
		if d := time.Since(start); d > 20*time.Millisecond {
			t.Fatalf("handled %v after the insert while Idle answered busy, want at one of the quick claims", d)
		}
	})
}
