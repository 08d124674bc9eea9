package outbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
)

// hangingStore is a memory store whose Scan or Settle, on demand, does not
// answer: it blocks until its context ends, as a call on a connection
// whose packets are dropped blocks until the operating system gives up on
// it, many minutes later.
type hangingStore struct {
	*memory.OutboxStore
	scan, settle atomic.Bool
}

func hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (s *hangingStore) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if s.scan.Load() {
		return nil, hang(ctx)
	}
	return s.OutboxStore.Scan(ctx, after, limit)
}

func (s *hangingStore) Settle(ctx context.Context, st outbox.Settlement) error {
	if s.settle.Load() {
		return hang(ctx)
	}
	return s.OutboxStore.Settle(ctx, st)
}

// hangingLog is the memory store's log whose SettleLog or Read, on
// demand, does not answer.
type hangingLog struct {
	*memory.OutboxLog
	settle, read atomic.Bool
}

func (l *hangingLog) SettleLog(ctx context.Context, st outbox.LogSettlement) error {
	if l.settle.Load() {
		return hang(ctx)
	}
	return l.OutboxLog.SettleLog(ctx, st)
}

func (l *hangingLog) Open(ctx context.Context, token uint64) (outbox.LogReader, error) {
	r, err := l.OutboxLog.Open(ctx, token)
	if err != nil {
		return nil, err
	}
	return hangingReader{r, l}, nil
}

type hangingReader struct {
	outbox.LogReader
	l *hangingLog
}

func (r hangingReader) Read(ctx context.Context, after outbox.LogPosition, limit int, wait time.Duration) (outbox.LogBatch, error) {
	if r.l.read.Load() {
		return outbox.LogBatch{}, hang(ctx)
	}
	return r.LogReader.Read(ctx, after, limit, wait)
}

// A store call that never answers is a failing pass like one that fails
// at once: the driver gives up on it after StoreTimeout, the streak counts
// it, the stuck notice comes after StuckAfter, and delivery resumes once
// the store answers again. The leader keeps its lock throughout.
func TestDriver_RaisesTheStuckNoticeWhileAStoreCallHangs(t *testing.T) {
	// Each case makes one call of cfg's store hang, on demand.
	cases := map[string]func(r *rig, cfg *outbox.Config) *atomic.Bool{
		"Scan": func(r *rig, cfg *outbox.Config) *atomic.Bool {
			hs := &hangingStore{OutboxStore: r.store}
			cfg.Store = hs
			return &hs.scan
		},
		"Settle": func(r *rig, cfg *outbox.Config) *atomic.Bool {
			hs := &hangingStore{OutboxStore: r.store}
			cfg.Store = hs
			return &hs.settle
		},
		"Read": func(r *rig, cfg *outbox.Config) *atomic.Bool {
			hl := &hangingLog{OutboxLog: r.store.Log()}
			cfg.Log = hl
			return &hl.read
		},
		"SettleLog": func(r *rig, cfg *outbox.Config) *atomic.Bool {
			hl := &hangingLog{OutboxLog: r.store.Log()}
			cfg.Log = hl
			return &hl.settle
		},
	}
	for call, hangs := range cases {
		t.Run(call, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t)
				rec := &recorder{lane: "a"}
				cfg := r.config(rec)
				hanging := hangs(r, &cfg)
				r.run(cfg)
				synctest.Wait() // the log, if it is the source, has taken over
				r.commit("a")
				time.Sleep(time.Minute)
				synctest.Wait()
				if n := len(rec.delivered()); n != 1 {
					t.Fatalf("%d entries delivered before the hang, want 1", n)
				}

				hanging.Store(true)
				hungAt := time.Now()
				late := r.commit("a")[0]
				time.Sleep(30 * time.Minute)
				synctest.Wait()
				n := r.notes.of(outbox.NoticeStuck)
				if len(n) == 0 {
					t.Fatalf("no stuck notice in 30 minutes of a %s that never answers", call)
				}
				// The notice comes after StuckAfter, and no later than one
				// more call given up on and one ErrorDelay after it.
				if first := n[0]; first.Since.Before(hungAt) || first.At.Sub(first.Since) < outbox.DefaultStuckAfter ||
					first.At.Sub(hungAt) > outbox.DefaultStuckAfter+outbox.DefaultStoreTimeout+cfg.ErrorDelay {
					t.Fatalf("first stuck notice %+v, %v after the hang began: want a streak that began at the hang and a notice after StuckAfter (%v), within StoreTimeout (%v) and ErrorDelay (%v) more",
						first, first.At.Sub(hungAt), outbox.DefaultStuckAfter, outbox.DefaultStoreTimeout, cfg.ErrorDelay)
				}
				if !strings.Contains(n[0].LastError, "did not answer within StoreTimeout") {
					t.Errorf("the notice's last error is %q; want it to say the store did not answer", n[0].LastError)
				}
				if len(n) != 2 {
					t.Fatalf("%d stuck notices in 30 minutes, want 2 (after StuckAfter, then one per StuckNoticeEvery)", len(n))
				}
				// The leader lock was never given up: nobody else can
				// take it.
				if _, err := r.locks.Acquire(t.Context(), outbox.DefaultLeaderLockName, lock.AcquireOptions{}); !errors.Is(err, lock.ErrNotAcquired) {
					t.Fatalf("acquiring the leader lock while the store hung: err = %v, want ErrNotAcquired (the driver keeps leading)", err)
				}

				// A call already waiting goes on waiting until its
				// deadline; the pass after it delivers.
				hanging.Store(false)
				time.Sleep(outbox.DefaultStoreTimeout + cfg.ErrorDelay + time.Second)
				synctest.Wait()
				if !slices.Contains(ids(rec.delivered()), late) {
					t.Fatalf("the entry committed during the hang was not delivered within StoreTimeout and ErrorDelay of the store answering again")
				}
				if _, ok := r.state()[outbox.KeyFirstStuckAt]; ok {
					t.Fatal("first_stuck_at still set after the store answered again")
				}
			})
		})
	}
}
