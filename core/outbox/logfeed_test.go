package outbox_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/outbox"
)

// The driver over the log (Config.Log), with the memory store's log.

func (r *rig) logConfig(log outbox.LogStore, procs ...outbox.Processor) outbox.Config {
	cfg := r.config(procs...)
	cfg.Log = log
	return cfg
}

// begin opens a producer transaction and enqueues one entry of lane in it.
func (r *rig) begin(lane string) (*memory.OutboxTx, outbox.ID) {
	r.t.Helper()
	ctx := context.Background()
	tx, err := r.store.Begin(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	id := outbox.NewID()
	if err := tx.Enqueue(ctx, id, lane, []byte(`{}`)); err != nil {
		r.t.Fatal(err)
	}
	return tx, id
}

func commitTx(t *testing.T, tx *memory.OutboxTx) {
	t.Helper()
	if err := tx.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// counts is how many times each id was delivered.
func counts(es []outbox.Entry) map[outbox.ID]int {
	m := map[outbox.ID]int{}
	for _, e := range es {
		m[e.ID]++
	}
	return m
}

func TestLogDriver_DeliversInCommitOrderWhereTheWalkFollowsXIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, logical := range []bool{false, true} {
			r := newRig(t)
			rec := &recorder{lane: "a"}
			cfg := r.config(rec)
			if logical {
				cfg = r.logConfig(r.store.Log(), rec)
			}
			stop := r.run(cfg)
			synctest.Wait() // the log has taken over: it delivers what commits from now on
			a, idA := r.begin("a")
			b, idB := r.begin("a")
			commitTx(t, b)
			commitTx(t, a)
			want := []outbox.ID{idA, idB} // xid order
			if logical {
				want = []outbox.ID{idB, idA} // commit order
			}
			time.Sleep(10 * time.Second)
			synctest.Wait()
			stop()
			if got := ids(rec.delivered()); !slices.Equal(got, want) {
				t.Errorf("logical=%v: delivered %v, want %v", logical, got, want)
			}
		}
	})
}

func TestLogDriver_AnOpenTransactionHoldsNothingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, logical := range []bool{false, true} {
			r := newRig(t)
			open, _ := r.begin("a")
			rec := &recorder{lane: "a"}
			cfg := r.config(rec)
			if logical {
				cfg = r.logConfig(r.store.Log(), rec)
			}
			r.run(cfg)
			for range 5 {
				r.commit("a")
				time.Sleep(10 * time.Second)
			}
			synctest.Wait()
			got := len(rec.delivered())
			switch {
			case logical && got != 5:
				t.Errorf("the log delivered %d of the 5 entries committed while an older transaction was open", got)
			case !logical && got != 0:
				t.Errorf("the walk delivered %d entries past an open older transaction", got)
			}
			_ = open.Rollback(context.Background())
		}
	})
}

func TestLogDriver_TakesOverFromTheWalkLosingAndRepeatingNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		rec := &recorder{lane: "a"}
		stop := r.run(r.config(rec))
		r.commit("a", "a")
		r.commit("a")
		synctest.Wait()
		stop()
		if n := len(rec.delivered()); n != 3 {
			t.Fatalf("the walk delivered %d of 3", n)
		}
		// An older transaction is still open when the log takes over, and
		// a newer one committed: the walk has delivered neither.
		older, olderID := r.begin("a")
		newer := r.commit("a")
		log := r.store.Log()
		r.run(r.logConfig(log, rec))
		synctest.Wait()
		if st := r.state(); st[outbox.KeySource] != outbox.SourceLogical {
			t.Fatalf("state %v: the log has not taken over", st)
		}
		commitTx(t, older)
		later := r.commit("a")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		got := rec.delivered()
		for id, n := range counts(got) {
			if n != 1 {
				t.Errorf("entry %s delivered %d times", id, n)
			}
		}
		tail := ids(got[3:])
		if want := []outbox.ID{newer[0], olderID, later[0]}; !slices.Equal(tail, want) {
			t.Fatalf("after the switch: delivered %v, want %v (commit order, each once)", tail, want)
		}
	})
}

func TestLogDriver_GoingBackToTheWalkLosesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		rec := &recorder{lane: "a"}
		log := r.store.Log()
		stop := r.run(r.logConfig(log, rec))
		var committed []outbox.ID
		for range 10 {
			committed = append(committed, r.commit("a")...)
			time.Sleep(3 * time.Second)
		}
		synctest.Wait()
		stop()
		before := len(rec.delivered())
		if before != 10 {
			t.Fatalf("the log delivered %d of 10", before)
		}
		st := r.state()
		settled, err := outbox.SettledCursor(st)
		if err != nil || settled.IsZero() {
			t.Fatalf("no settled cursor after the log's passes: %v %v (state %v)", settled, err, st)
		}
		committed = append(committed, r.commit("a")...)
		r.run(r.config(rec))
		synctest.Wait()
		if st := r.state(); st[outbox.KeySource] != outbox.SourceWalk {
			t.Fatalf("state %v: the walk has not taken the outbox back", st)
		}
		got := counts(rec.delivered())
		for _, id := range committed {
			if got[id] == 0 {
				t.Fatalf("entry %s was never delivered", id)
			}
		}
		// Delivered again: only entries of transactions at or above the
		// settled cursor's xid, which the walk resumed from.
		again := 0
		for _, e := range rec.delivered()[before:] {
			if e.XID <= settled.XID {
				t.Errorf("the walk delivered %s (xid %d) again, at or below the settled cursor %v", e.ID, e.XID, settled)
			}
			if got[e.ID] > 1 {
				again++
			}
		}
		if again > 2 {
			t.Errorf("%d entries delivered again, want at most the 2 committed since the last mark a pass passed", again)
		}
	})
}

func TestLogDriver_ResumesInsideATransactionAfterARetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		rec := &recorder{lane: "a"}
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			out := all(len(run), outbox.Retry("later"))
			for i := range out {
				if i < 2 {
					out[i] = outbox.Delivered()
				}
			}
			return out, nil
		})
		log := r.store.Log()
		stop := r.run(r.logConfig(log, rec))
		synctest.Wait()
		ids5 := r.commit("a", "a", "a", "a", "a")
		time.Sleep(time.Second)
		synctest.Wait()
		stop()
		if pos, _ := outbox.LogPositionFromState(r.state()); pos.Seq != 2 {
			t.Fatalf("settled at %v, want inside the transaction after its second entry", pos)
		}
		rec2 := &recorder{lane: "a"}
		r.run(r.logConfig(log, rec2))
		synctest.Wait()
		if got := ids(rec2.delivered()); !slices.Equal(got, ids5[2:]) {
			t.Fatalf("the next term delivered %v, want the transaction's last three %v", got, ids5[2:])
		}
	})
}

// confirmWatch records each Confirm against the stored log position.
type confirmWatch struct {
	*memory.OutboxLog
	store *memory.OutboxStore

	mu        sync.Mutex
	confirms  int
	ahead     []string
	failNext  bool
	settleErr int
}

func (w *confirmWatch) SettleLog(ctx context.Context, s outbox.LogSettlement) error {
	w.mu.Lock()
	fail := w.failNext
	w.failNext = false
	w.mu.Unlock()
	if fail {
		w.mu.Lock()
		w.settleErr++
		w.mu.Unlock()
		return errors.New("settle failed")
	}
	return w.OutboxLog.SettleLog(ctx, s)
}

func (w *confirmWatch) Open(ctx context.Context, token uint64) (outbox.LogReader, error) {
	r, err := w.OutboxLog.Open(ctx, token)
	if err != nil {
		return nil, err
	}
	return watchedReader{r, w}, nil
}

type watchedReader struct {
	outbox.LogReader
	w *confirmWatch
}

func (r watchedReader) Confirm(ctx context.Context, p outbox.LogPosition) error {
	st, _ := r.w.store.State(ctx)
	stored, _ := outbox.LogPositionFromState(st)
	r.w.mu.Lock()
	r.w.confirms++
	if p.Compare(stored) > 0 {
		r.w.ahead = append(r.w.ahead, p.String()+" > stored "+stored.String())
	}
	r.w.mu.Unlock()
	return r.LogReader.Confirm(ctx, p)
}

func TestLogDriver_ConfirmsOnlyWhatItSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		w := &confirmWatch{OutboxLog: r.store.Log(), store: r.store}
		rec := &recorder{lane: "a"}
		r.run(r.logConfig(w, rec))
		synctest.Wait()
		w.mu.Lock()
		w.failNext = true
		w.mu.Unlock()
		r.commit("a")
		synctest.Wait()
		w.mu.Lock()
		failedConfirms := w.confirms
		w.mu.Unlock()
		for range 5 {
			r.commit("a")
			time.Sleep(time.Minute)
		}
		synctest.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.settleErr != 1 {
			t.Fatalf("%d settlements failed, want 1", w.settleErr)
		}
		if len(w.ahead) > 0 {
			t.Fatalf("confirmed past the stored position: %v", w.ahead)
		}
		if w.confirms <= failedConfirms {
			t.Fatalf("%d confirms, none after the failed settlement", w.confirms)
		}
		if got := counts(rec.delivered()); len(got) != 6 {
			t.Fatalf("delivered %d distinct entries, want 6", len(got))
		}
	})
}

func TestLogDriver_StopsWithANoticeAtOnceWhenTheLogIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		log := r.store.Log()
		rec := &recorder{lane: "a"}
		r.run(r.logConfig(log, rec))
		r.commit("a")
		synctest.Wait()
		log.Lose()
		r.commit("a")
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(rec.delivered()); n != 1 {
			t.Fatalf("delivered %d, want only the entry committed before the log was lost", n)
		}
		n := r.notes.of(outbox.NoticeStuck)
		if len(n) != 1 || !strings.Contains(n[0].LastError, outbox.ErrLogLost.Error()) {
			t.Fatalf("stuck notices %+v; want one at once saying the log is lost", n)
		}
		if st := r.state(); st[outbox.KeyFirstStuckAt] == "" {
			t.Fatalf("state %v: the stop is not recorded as a failing streak", st)
		}
	})
}

func TestLogDriver_StepsDownWhenALaterTermOpensTheLog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		log := r.store.Log()
		rec := &recorder{lane: "a"}
		var (
			logs  bytes.Buffer
			logMu sync.Mutex
		)
		cfg := r.logConfig(log, rec)
		cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
		r.run(cfg)
		r.commit("a")
		synctest.Wait()
		if _, err := log.Open(context.Background(), 1<<40); err != nil {
			t.Fatal(err)
		}
		r.commit("a")
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(rec.delivered()); n != 1 {
			t.Fatalf("delivered %d after a later term took the log, want only the first", n)
		}
		logMu.Lock()
		defer logMu.Unlock()
		if !strings.Contains(logs.String(), "a reader of a later leadership term has the log") {
			t.Fatalf("the driver did not say it gave up leadership:\n%s", logs.String())
		}
	})
}

func TestLogRetention_DeletesOnlyRowsBelowAPassedMark(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		watch := &retentionWatch{OutboxStore: r.store}
		log := r.store.Log()
		rec := &recorder{lane: "a"}
		cfg := r.logConfig(log, rec)
		cfg.Store = watch
		cfg.RetentionDisabled = false
		cfg.RetentionWindow = time.Minute
		cfg.RetentionInterval = 10 * time.Second
		r.run(cfg)
		// An old transaction stays open through the first minutes: its
		// entry, committed last, must not be deleted before delivery.
		old, oldID := r.begin("a")
		for range 20 {
			r.commit("a")
			time.Sleep(7 * time.Second)
		}
		commitTx(t, old)
		for range 20 {
			r.commit("a")
			time.Sleep(7 * time.Second)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		got := counts(rec.delivered())
		if len(got) != 41 || got[oldID] == 0 {
			t.Fatalf("delivered %d distinct entries (the old one %d times), want all 41", len(got), got[oldID])
		}
		watch.mu.Lock()
		defer watch.mu.Unlock()
		if watch.deleted != 41 {
			t.Fatalf("retention deleted %d of the 41 delivered entries", watch.deleted)
		}
	})
}
