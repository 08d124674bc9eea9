package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	locksmemory "github.com/baton-go/baton/locks/memory"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a processor that records what it was given and answers with
// a programmable function (Delivered for everything by default).
type recorder struct {
	lane    string
	mu      sync.Mutex
	runs    [][]outbox.Entry
	answer  func(run []outbox.Entry) ([]outbox.Outcome, error)
	calling chan struct{} // if set, receives once per call before answering
}

func (r *recorder) Lane() string { return r.lane }

func (r *recorder) Deliver(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
	r.mu.Lock()
	r.runs = append(r.runs, append([]outbox.Entry(nil), run...))
	answer := r.answer
	r.mu.Unlock()
	if r.calling != nil {
		select {
		case r.calling <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if answer != nil {
		return answer(run)
	}
	return all(len(run), outbox.Delivered()), nil
}

func (r *recorder) setAnswer(f func(run []outbox.Entry) ([]outbox.Outcome, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answer = f
}

func (r *recorder) delivered() []outbox.Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []outbox.Entry
	for _, run := range r.runs {
		out = append(out, run...)
	}
	return out
}

func (r *recorder) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

func all(n int, o outbox.Outcome) []outbox.Outcome {
	out := make([]outbox.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// notices collects what the driver notified.
type notices struct {
	mu   sync.Mutex
	list []outbox.Notice
}

func (n *notices) notify(_ context.Context, x outbox.Notice) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.list = append(n.list, x)
	return nil
}

func (n *notices) of(kind outbox.NoticeKind) []outbox.Notice {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []outbox.Notice
	for _, x := range n.list {
		if x.Kind == kind {
			out = append(out, x)
		}
	}
	return out
}

type rig struct {
	t     *testing.T
	store *memory.OutboxStore
	locks *locksmemory.Provider
	notes *notices
}

func newRig(t *testing.T) *rig {
	locks, err := locksmemory.NewProvider(locksmemory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	memOutbox, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, store: memOutbox, locks: locks, notes: &notices{}}
}

// config is a driver config with short, distinct delays so tests can tell
// which one the driver chose.
func (r *rig) config(procs ...outbox.Processor) outbox.Config {
	return outbox.Config{
		Store: r.store, Locks: r.locks, Processors: procs, Notify: r.notes.notify,
		BatchSize: 10, IdleDelay: 5 * time.Second, ErrorDelay: 30 * time.Second,
		LeaderWait: time.Second, RetentionDisabled: true,
	}
}

// run starts a driver and returns a func that stops it and waits.
func (r *rig) run(cfg outbox.Config) (stop func()) {
	r.t.Helper()
	_, stop = r.startDriver(cfg)
	return stop
}

// startDriver starts a driver and returns it, with a func that stops it
// and waits.
func (r *rig) startDriver(cfg outbox.Config) (_ *outbox.Driver, stop func()) {
	r.t.Helper()
	d, err := outbox.NewDriver(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	r.t.Cleanup(stop)
	return d, stop
}

// commit writes one transaction with an entry per lane given, returning
// the entries' ids in the order enqueued.
func (r *rig) commit(lanes ...string) []outbox.ID {
	r.t.Helper()
	ctx := context.Background()
	tx, err := r.store.Begin(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	ids := make([]outbox.ID, len(lanes))
	for i, lane := range lanes {
		ids[i] = outbox.NewID()
		if err := tx.Enqueue(ctx, ids[i], lane, []byte(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		r.t.Fatal(err)
	}
	return ids
}

func (r *rig) state() map[string]string {
	st, err := r.store.State(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

func (r *rig) cursor() outbox.Cursor {
	c, err := outbox.CursorFromState(r.state())
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func ids(es []outbox.Entry) []outbox.ID {
	out := make([]outbox.ID, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

func TestDriver_DeliversEveryLaneInOneXidIDOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		ctx := context.Background()
		// tx1 takes its xid first but commits last; tx2 in between.
		tx1, _ := r.store.Begin(ctx)
		a := outbox.NewID()
		tx1.Enqueue(ctx, a, "x", []byte(`1`))
		second := r.commit("y", "x")
		b := outbox.NewID()
		tx1.Enqueue(ctx, b, "y", []byte(`2`))
		tx1.Commit(ctx)

		var mu sync.Mutex
		var order []outbox.ID
		rec := func(lane string) *recorder {
			return &recorder{lane: lane, answer: func(run []outbox.Entry) ([]outbox.Outcome, error) {
				mu.Lock()
				defer mu.Unlock()
				order = append(order, ids(run)...)
				return all(len(run), outbox.Delivered()), nil
			}}
		}
		r.run(r.config(rec("x"), rec("y")))
		time.Sleep(time.Second)
		synctest.Wait()

		first := []outbox.ID{a, b}
		if a.Compare(b) > 0 {
			first = []outbox.ID{b, a}
		}
		rest := second
		if second[0].Compare(second[1]) > 0 {
			rest = []outbox.ID{second[1], second[0]}
		}
		want := append(first, rest...)
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(order) != fmt.Sprint(want) {
			t.Fatalf("delivered %v, want (xid, id) order %v", order, want)
		}
	})
}

func TestDriver_CutsTheBatchIntoContiguousSameLaneRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		var lanes []string
		for _, l := range []string{"a", "a", "b", "a", "b", "b"} {
			lanes = append(lanes, l)
			r.commit(l) // one transaction each: the order is the commit sequence here
		}
		ra, rb := &recorder{lane: "a"}, &recorder{lane: "b"}
		r.run(r.config(ra, rb))
		time.Sleep(time.Second)
		synctest.Wait()
		var sizes []string
		ra.mu.Lock()
		for _, run := range ra.runs {
			sizes = append(sizes, fmt.Sprintf("a%d", len(run)))
		}
		ra.mu.Unlock()
		rb.mu.Lock()
		for _, run := range rb.runs {
			sizes = append(sizes, fmt.Sprintf("b%d", len(run)))
		}
		rb.mu.Unlock()
		if got := strings.Join(sizes, ","); got != "a2,a1,b1,b2" {
			t.Fatalf("runs %s, want a's runs of 2 and 1, b's of 1 and 2", got)
		}
	})
}

func TestDriver_AdvancesPastDeliveredAndParkedAndStopsAtFirstRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		e := r.commit("a", "a", "a", "a")
		rec := &recorder{lane: "a"}
		var once sync.Once
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			out := all(len(run), outbox.Delivered())
			once.Do(func() {
				out = []outbox.Outcome{outbox.Delivered(), outbox.Park("bad"), outbox.Retry("busy"), outbox.Delivered()}
			})
			return out, nil
		})
		sorted := sortIDs(e)
		r.run(r.config(rec))
		synctest.Wait()
		if got := r.cursor().ID; got != sorted[1] {
			t.Fatalf("after the first pass the cursor is at %s, want the parked entry %s", got, sorted[1])
		}
		dead, _ := r.store.GetDead(context.Background(), sorted[1])
		if dead.Error != "bad" {
			t.Fatalf("parked entry not in the dead letters: %+v", dead)
		}
		time.Sleep(31 * time.Second) // ErrorDelay
		synctest.Wait()
		runs := rec.runs
		if len(runs) != 2 || fmt.Sprint(ids(runs[1])) != fmt.Sprint(sorted[2:]) {
			t.Fatalf("second pass got %v, want it to start at the retried entry: %v", runs, sorted[2:])
		}
		if got := r.cursor().ID; got != sorted[3] {
			t.Fatalf("cursor at %s after the retry succeeded, want %s", got, sorted[3])
		}
	})
}

func sortIDs(in []outbox.ID) []outbox.ID {
	out := append([]outbox.ID(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j].Compare(out[i]) < 0 {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestDriver_ParksEntriesOfALaneWithoutProcessor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		orphan := r.commit("nobody")
		known := r.commit("a")
		rec := &recorder{lane: "a"}
		r.run(r.config(rec))
		synctest.Wait()
		d, err := r.store.GetDead(context.Background(), orphan[0])
		if err != nil || !strings.Contains(d.Error, `"nobody"`) {
			t.Fatalf("orphan entry: %+v, %v; want parked naming its lane", d, err)
		}
		if got := ids(rec.delivered()); fmt.Sprint(got) != fmt.Sprint(known) {
			t.Fatalf("the walk did not continue past the parked entry: delivered %v", got)
		}
		if n := r.notes.of(outbox.NoticeDeadLetter); len(n) != 1 || n[0].Lane != "nobody" || n[0].Parked != 1 {
			t.Fatalf("dead-letter notices %+v", n)
		}
	})
}

// countingStore counts scans.
type countingStore struct {
	*memory.OutboxStore
	mu    sync.Mutex
	scans int
}

func (s *countingStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scans
}

func (s *countingStore) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	s.mu.Lock()
	s.scans++
	s.mu.Unlock()
	return s.OutboxStore.Scan(ctx, after, limit)
}

func TestDriver_DoesNotScanWithoutProcessorsAndWarnsEveryPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a")
		cs := &countingStore{OutboxStore: r.store}
		var logs bytes.Buffer
		var logMu sync.Mutex
		cfg := r.config()
		cfg.Store = cs
		cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
		r.run(cfg)
		time.Sleep(16 * time.Second) // IdleDelay 5s: passes at 0, 5, 10, 15
		synctest.Wait()
		if n := cs.count(); n != 0 {
			t.Fatalf("scanned %d times with no processors", n)
		}
		logMu.Lock()
		defer logMu.Unlock()
		if n := strings.Count(logs.String(), "no processors registered"); n != 4 {
			t.Fatalf("%d warnings in 4 passes:\n%s", n, logs.String())
		}
		if _, err := r.store.GetDead(context.Background(), outbox.NilID); !errors.Is(err, outbox.ErrNotFound) {
			t.Fatal(err)
		}
		if len(r.state()) != 0 {
			t.Fatalf("state written without processors: %v", r.state())
		}
	})
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestDriver_RetriesTheWholeRunOnErrorPanicOrWrongCount(t *testing.T) {
	cases := map[string]func(run []outbox.Entry) ([]outbox.Outcome, error){
		"error":             func([]outbox.Entry) ([]outbox.Outcome, error) { return nil, errors.New("transport down") },
		"panic":             func([]outbox.Entry) ([]outbox.Outcome, error) { panic("processor bug") },
		"one outcome short": func(run []outbox.Entry) ([]outbox.Outcome, error) { return all(len(run)-1, outbox.Delivered()), nil },
		"one outcome over":  func(run []outbox.Entry) ([]outbox.Outcome, error) { return all(len(run)+1, outbox.Delivered()), nil },
	}
	for name, fail := range cases {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t)
				e := r.commit("a", "a", "a")
				rec := &recorder{lane: "a"}
				rec.setAnswer(fail)
				r.run(r.config(rec))
				synctest.Wait()
				if !r.cursor().IsZero() {
					t.Fatalf("the cursor moved after a failed run: %v", r.cursor())
				}
				st := r.state()
				if st[outbox.KeyFailedAttempts] != "1" || st[outbox.KeyLastError] == "" || st[outbox.KeyFirstStuckAt] == "" {
					t.Fatalf("failure not recorded: %v", st)
				}
				errorAt := st[outbox.KeyLastErrorAt]
				if errorAt == "" || errorAt != st[outbox.KeyLastScanAt] {
					t.Fatalf("last_error_at %q, want the failing pass's time %q", errorAt, st[outbox.KeyLastScanAt])
				}
				rec.setAnswer(nil)
				time.Sleep(30 * time.Second)
				synctest.Wait()
				runs := rec.runs
				if len(runs) != 2 || len(runs[1]) != 3 {
					t.Fatalf("runs %d, second of %d entries; want the whole run again", len(runs), len(runs[len(runs)-1]))
				}
				if got := r.cursor().ID; got != sortIDs(e)[2] {
					t.Fatalf("cursor %s, want past the whole run", got)
				}
				st = r.state()
				if _, ok := st[outbox.KeyFirstStuckAt]; ok {
					t.Fatal("first_stuck_at not cleared by a delivering pass")
				}
				// The old error stays, with the time that dates it.
				if st[outbox.KeyLastErrorAt] != errorAt || st[outbox.KeyLastScanAt] == errorAt {
					t.Fatalf("after recovery last_error_at %q (was %q), last_scan_at %q", st[outbox.KeyLastErrorAt], errorAt, st[outbox.KeyLastScanAt])
				}
			})
		})
	}
}

func TestDriver_DelaysIdleAfterEmptyErrorAfterFailureNoneAfterFullBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		for range 25 { // 2.5 batches of 10
			r.commit("a")
		}
		var mu sync.Mutex
		var at []time.Duration
		start := time.Now()
		rec := &recorder{lane: "a"}
		fail := false
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			mu.Lock()
			defer mu.Unlock()
			at = append(at, time.Since(start))
			if fail {
				fail = false
				return all(len(run), outbox.Retry("later")), nil
			}
			return all(len(run), outbox.Delivered()), nil
		})
		cs := &countingStore{OutboxStore: r.store}
		cfg := r.config(rec)
		cfg.Store = cs
		cfg.PollOnly = true // the pauses of polling; wake_test.go has the wake-ups
		r.run(cfg)
		synctest.Wait()
		// Full, full, partial: three passes at once, then idle.
		mu.Lock()
		if fmt.Sprint(at) != "[0s 0s 0s]" || cs.count() != 3 {
			t.Fatalf("passes at %v, %d scans; want three at once", at, cs.count())
		}
		mu.Unlock()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if n := cs.count(); n != 4 {
			t.Fatalf("%d scans after IdleDelay, want 4", n)
		}
		mu.Lock()
		fail = true
		mu.Unlock()
		r.commit("a")
		time.Sleep(5 * time.Second) // the next idle pass finds it and retries
		synctest.Wait()
		time.Sleep(29 * time.Second)
		synctest.Wait()
		if n := cs.count(); n != 5 {
			t.Fatalf("%d scans 29s after a retry, want no new pass before ErrorDelay", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := cs.count(); n != 6 {
			t.Fatalf("%d scans at ErrorDelay after the retry, want 6", n)
		}
	})
}

func TestDriver_HonoursRetryAfterAsTheNextPassDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a")
		rec := &recorder{lane: "a"}
		var once sync.Once
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			out := all(len(run), outbox.Delivered())
			once.Do(func() { out = all(len(run), outbox.RetryAfter("429", 7*time.Second)) })
			return out, nil
		})
		start := time.Now()
		r.run(r.config(rec))
		for rec.calls() < 2 && time.Since(start) < time.Minute {
			time.Sleep(100 * time.Millisecond)
		}
		if rec.calls() < 2 {
			t.Fatal("the run asked to be retried was not delivered again within a minute")
		}
		if got := time.Since(start).Round(time.Second); got != 7*time.Second {
			t.Fatalf("retried after %v, want the 7s the processor asked for", got)
		}
	})
}

func TestDriver_StandsByWhileAnotherLeads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a", "a")
		one, two := &recorder{lane: "a"}, &recorder{lane: "a"}
		stopOne := r.run(r.config(one))
		synctest.Wait()
		r.run(r.config(two))
		r.commit("a")
		time.Sleep(time.Minute)
		synctest.Wait()
		if len(one.delivered()) != 3 || two.calls() != 0 {
			t.Fatalf("leader delivered %d, standby called %d times", len(one.delivered()), two.calls())
		}
		stopOne() // releases the lock; the standby takes over
		r.commit("a")
		time.Sleep(time.Minute)
		synctest.Wait()
		if len(two.delivered()) != 1 {
			t.Fatalf("the standby delivered %d after the leader stopped, want 1", len(two.delivered()))
		}
	})
}

func TestDriver_StopsAtOnceWhenTheLockIsLostAndSettlesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a", "a")
		rec := &recorder{lane: "a", calling: make(chan struct{})}
		returned := make(chan struct{})
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			<-returned // a processor that finishes only after the loss, successfully
			return all(len(run), outbox.Delivered()), nil
		})
		r.run(r.config(rec))
		<-rec.calling // the leader is mid-delivery
		before := r.state()
		// An operator removes the lock and someone else takes it at once.
		r.locks.TakeAway(outbox.DefaultLeaderLockName)
		other, err := r.locks.Acquire(context.Background(), outbox.DefaultLeaderLockName, lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Release(context.Background())
		time.Sleep(locksmemory.DefaultTTL) // the holder learns at its next refresh
		close(returned)
		synctest.Wait()
		if st := r.state(); fmt.Sprint(st) != fmt.Sprint(before) {
			t.Fatalf("a pass whose lock was lost settled: %v", st)
		}
		if !r.cursor().IsZero() {
			t.Fatal("the cursor moved")
		}
	})
}

func TestDriver_DiscardsItsPassWhenAnotherLeaderSettledFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		e := sortIDs(r.commit("a", "a", "a"))
		rec := &recorder{lane: "a"}
		var once sync.Once
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			once.Do(func() {
				// Meanwhile another leader delivered the first two and settled.
				to := outbox.Cursor{XID: run[1].XID, ID: run[1].ID}
				if err := r.store.Settle(context.Background(), outbox.Settlement{To: to}); err != nil {
					panic(err)
				}
			})
			return all(len(run), outbox.Delivered()), nil
		})
		r.run(r.config(rec))
		time.Sleep(time.Minute)
		synctest.Wait()
		// Had the deposed pass's settlement applied, the cursor would have
		// jumped past all three and no second run would exist. Instead the
		// driver stepped down, re-read the stored cursor and went on from
		// the other leader's position.
		rec.mu.Lock()
		runs := rec.runs
		rec.mu.Unlock()
		if len(runs) != 2 || fmt.Sprint(ids(runs[1])) != fmt.Sprint(e[2:]) {
			t.Fatalf("runs %v; want the second to start after the other leader's cursor: %v", runs, e[2:])
		}
		if got := r.cursor().ID; got != e[2] {
			t.Fatalf("cursor %s, want %s", got, e[2])
		}
	})
}

func TestDriver_RaisesOneStuckNoticeAfterStuckAfterThenThrottles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a")
		rec := &recorder{lane: "a"}
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			return all(len(run), outbox.Retry("401 unauthorized")), nil
		})
		start := time.Now()
		r.run(r.config(rec)) // StuckAfter 2m, ErrorDelay 30s, notices every 15m
		time.Sleep(2*time.Minute - time.Second)
		synctest.Wait()
		if n := r.notes.of(outbox.NoticeStuck); len(n) != 0 {
			t.Fatalf("stuck notice before StuckAfter: %+v", n)
		}
		time.Sleep(31 * time.Second)
		synctest.Wait()
		n := r.notes.of(outbox.NoticeStuck)
		if len(n) != 1 {
			t.Fatalf("%d stuck notices within StuckAfter plus one pass, want 1", len(n))
		}
		if n[0].Lane != "a" || !strings.Contains(n[0].LastError, "401") || !n[0].Since.Equal(start) {
			t.Fatalf("notice %+v: want lane a, the last error and the streak's start", n[0])
		}
		time.Sleep(14 * time.Minute)
		synctest.Wait()
		if n := r.notes.of(outbox.NoticeStuck); len(n) != 1 {
			t.Fatalf("%d stuck notices within 15 minutes, want 1", len(n))
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if n := r.notes.of(outbox.NoticeStuck); len(n) != 2 {
			t.Fatalf("%d stuck notices after 15 minutes, want a second", len(n))
		}
	})
}

func TestDriver_IdleOutboxNeverRaisesStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.run(r.config(&recorder{lane: "a"}))
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(r.notes.list); n != 0 {
			t.Fatalf("%d notices from an idle outbox", n)
		}
		if _, ok := r.state()[outbox.KeyFirstStuckAt]; ok {
			t.Fatal("first_stuck_at set on an idle outbox")
		}
		if _, ok := r.state()[outbox.KeyLastScanAt]; !ok {
			t.Fatal("last_scan_at not stamped")
		}
	})
}

func TestDriver_ThrottlesDeadLetterNotices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		rec := &recorder{lane: "a"}
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) { return all(len(run), outbox.Park("409")), nil })
		r.run(r.config(rec))
		for range 5 {
			r.commit("a")
			time.Sleep(time.Minute)
		}
		synctest.Wait()
		if n := r.notes.of(outbox.NoticeDeadLetter); len(n) != 1 {
			t.Fatalf("%d dead-letter notices for 5 parks in 5 minutes, want 1", len(n))
		}
		time.Sleep(15 * time.Minute)
		r.commit("a")
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := r.notes.of(outbox.NoticeDeadLetter); len(n) != 2 {
			t.Fatalf("%d dead-letter notices after the throttle passed, want 2", len(n))
		}
		dead, _ := r.store.ListDead(context.Background(), outbox.ListOptions{})
		if len(dead) != 6 {
			t.Fatalf("%d dead letters, want 6", len(dead))
		}
	})
}

// retentionWatch records, for every DeleteDelivered, whether it reached
// above the stored cursor.
type retentionWatch struct {
	*memory.OutboxStore
	mu      sync.Mutex
	deletes int
	deleted int
	beyond  []string
}

func (s *retentionWatch) DeleteDelivered(ctx context.Context, upTo outbox.Cursor, window time.Duration, limit int) (int, error) {
	st, _ := s.State(ctx)
	cur, _ := outbox.CursorFromState(st)
	n, err := s.OutboxStore.DeleteDelivered(ctx, upTo, window, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deletes++
	s.deleted += n
	if upTo.Compare(cur) > 0 {
		s.beyond = append(s.beyond, fmt.Sprintf("upTo %v above cursor %v", upTo, cur))
	}
	return n, err
}

func TestDriverAndRetention_LedByDifferentInstancesNeverTouchTheSameRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		watch := &retentionWatch{OutboxStore: r.store}
		// Instance B takes the retention lock first, so A leads the walk
		// and B leads retention.
		held, err := r.locks.Acquire(context.Background(), outbox.DefaultLeaderLockName+outbox.RetentionLockSuffix, lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		recA := &recorder{lane: "a"}
		cfgA := r.config(recA)
		cfgA.Store = watch
		cfgA.RetentionDisabled = false
		cfgA.RetentionWindow = time.Minute
		cfgA.RetentionInterval = 10 * time.Second
		cfgA.RetentionBatchSize = 3
		r.run(cfgA)
		synctest.Wait()
		held.Release(context.Background())
		recB := &recorder{lane: "a"}
		cfgB := cfgA
		cfgB.Processors = []outbox.Processor{recB}
		r.run(cfgB)

		var enqueued int
		for range 40 {
			r.commit("a", "a")
			enqueued += 2
			time.Sleep(7 * time.Second)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if recB.calls() != 0 {
			t.Fatalf("instance B delivered although A leads the walk")
		}
		if got := len(recA.delivered()); got != enqueued {
			t.Fatalf("delivered %d of %d: retention removed entries before delivery", got, enqueued)
		}
		watch.mu.Lock()
		defer watch.mu.Unlock()
		if len(watch.beyond) > 0 {
			t.Fatalf("retention reached above the cursor: %v", watch.beyond)
		}
		if watch.deleted != enqueued {
			t.Fatalf("retention deleted %d of %d delivered entries", watch.deleted, enqueued)
		}
		if watch.deletes < enqueued/3 {
			t.Fatalf("%d sweeps deleted %d rows: more than RetentionBatchSize each", watch.deletes, watch.deleted)
		}
	})
}

func TestNew_RejectsEveryInvalidOptionNamingIt(t *testing.T) {
	locks, _ := locksmemory.NewProvider(locksmemory.Options{})
	store, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notify := func(context.Context, outbox.Notice) error { return nil }
	ok := outbox.Config{Store: store, Locks: locks, Notify: notify}
	cases := map[string]func(c *outbox.Config){
		"Notify":                func(c *outbox.Config) { c.Notify = nil },
		"Store":                 func(c *outbox.Config) { c.Store = nil },
		"Locks":                 func(c *outbox.Config) { c.Locks = nil },
		"BatchSize":             func(c *outbox.Config) { c.BatchSize = -1 },
		"IdleDelay":             func(c *outbox.Config) { c.IdleDelay = -time.Second },
		"ErrorDelay":            func(c *outbox.Config) { c.ErrorDelay = -time.Second },
		"LeaderWait":            func(c *outbox.Config) { c.LeaderWait = -time.Second },
		"StuckAfter":            func(c *outbox.Config) { c.StuckAfter = -time.Second },
		"RetentionWindow":       func(c *outbox.Config) { c.RetentionWindow = -time.Second },
		"RetentionInterval":     func(c *outbox.Config) { c.RetentionInterval = -time.Second },
		"RetentionBatchSize":    func(c *outbox.Config) { c.RetentionBatchSize = -5 },
		"RetentionLockName":     func(c *outbox.Config) { c.RetentionLockName = outbox.DefaultLeaderLockName },
		"LeaderLockName":        func(c *outbox.Config) { c.LeaderLockName = strings.Repeat("n", 200) },
		"DeadLetterNoticeEvery": func(c *outbox.Config) { c.DeadLetterNoticeEvery = -time.Second },
		"RetentionBatchPause":   func(c *outbox.Config) { c.RetentionBatchPause = -time.Second },
		"RetentionSweepBudget":  func(c *outbox.Config) { c.RetentionSweepBudget = -time.Second },
		"StoreTimeout":          func(c *outbox.Config) { c.StoreTimeout = -time.Second },
		"Processors[1]": func(c *outbox.Config) {
			c.Processors = []outbox.Processor{&recorder{lane: "a"}, &recorder{lane: "a"}}
		},
	}
	for field, mutate := range cases {
		cfg := ok
		mutate(&cfg)
		_, err := outbox.NewDriver(cfg)
		if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig naming it", field, err)
		}
	}
	if _, err := outbox.NewDriver(ok); err != nil {
		t.Fatalf("a minimal config: %v", err)
	}
}

var _ = json.Valid

// failingStore is a memory store whose calls fail on demand: down makes
// every call fail, as an unreachable database would; settleFails makes
// only settlements fail.
type failingStore struct {
	*memory.OutboxStore
	down, settleFails atomic.Bool
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

func (s *failingStore) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	if s.down.Load() {
		return nil, errUnreachable
	}
	return s.OutboxStore.Scan(ctx, after, limit)
}

func (s *failingStore) Settle(ctx context.Context, st outbox.Settlement) error {
	switch {
	case s.down.Load():
		return errUnreachable
	case s.settleFails.Load():
		return errors.New("could not extend file: No space left on device")
	}
	return s.OutboxStore.Settle(ctx, st)
}

func (s *failingStore) State(ctx context.Context) (map[string]string, error) {
	if s.down.Load() {
		return nil, errUnreachable
	}
	return s.OutboxStore.State(ctx)
}

// With the database gone nothing can be stored, so the failing streak must
// be kept in memory: the stuck notice is the one users alert on.
func TestDriver_RaisesTheStuckNoticeWhileTheDatabaseIsUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		fs := &failingStore{OutboxStore: r.store}
		cfg := r.config(&recorder{lane: "a"})
		cfg.Store = fs
		r.commit("a")
		r.run(cfg)
		synctest.Wait()
		fs.down.Store(true)
		downAt := time.Now()
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		n := r.notes.of(outbox.NoticeStuck)
		if len(n) != 2 {
			t.Fatalf("%d stuck notices in 30 minutes without a database, want 2 (after StuckAfter, then one per 15 minutes)", len(n))
		}
		if !strings.Contains(n[0].LastError, "connection refused") || n[0].Since.Before(downAt) || n[0].At.Sub(n[0].Since) < outbox.DefaultStuckAfter {
			t.Fatalf("notice %+v: want the last error, a streak that began at the outage and lasted StuckAfter", n[0])
		}
		fs.down.Store(false)
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, ok := r.state()[outbox.KeyFirstStuckAt]; ok {
			t.Fatal("first_stuck_at still set after the database came back and a pass found nothing to do")
		}
	})
}

// A retry whose settlement cannot be stored is still a failing streak.
func TestDriver_RaisesTheStuckNoticeForARetryWhoseSettlementsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		fs := &failingStore{OutboxStore: r.store}
		fs.settleFails.Store(true)
		rec := &recorder{lane: "a"}
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			return all(len(run), outbox.Retry("503 unavailable")), nil
		})
		cfg := r.config(rec)
		cfg.Store = fs
		r.commit("a")
		r.run(cfg)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if n := r.notes.of(outbox.NoticeStuck); len(n) != 1 {
			t.Fatalf("%d stuck notices in 10 minutes of retries whose settlements fail, want 1", len(n))
		}
	})
}

// The throttle's stamp is written by the settlement; when settlements
// fail, it must hold in memory, or every pass notifies again.
func TestDriver_ThrottlesDeadLetterNoticesWhileSettlementsFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		fs := &failingStore{OutboxStore: r.store}
		fs.settleFails.Store(true)
		rec := &recorder{lane: "a"}
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) { return all(len(run), outbox.Park("409")), nil })
		cfg := r.config(rec)
		cfg.Store = fs
		r.commit("a")
		r.run(cfg)
		time.Sleep(20 * time.Minute)
		synctest.Wait()
		if calls, n := rec.calls(), r.notes.of(outbox.NoticeDeadLetter); calls < 30 || len(n) != 2 {
			t.Fatalf("%d dead-letter notices in 20 minutes of %d passes, want 2 (one per 15 minutes)", len(n), calls)
		}
	})
}

// distrustful hands out memory locks whose trust a test can end without
// Lost closing: the moment between a TTL lock's trust running out and its
// timer firing, which a process resumed after a pause is in.
type distrustful struct {
	*locksmemory.Provider
	mu    sync.Mutex
	locks []*distrustedLock
}

type distrustedLock struct {
	lock.Lock
	untrusted, released atomic.Bool
}

func (l *distrustedLock) Trusted() bool { return !l.untrusted.Load() && l.Lock.Trusted() }

func (l *distrustedLock) Release(ctx context.Context) error {
	l.released.Store(true)
	return l.Lock.Release(ctx)
}

func (p *distrustful) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	l, err := p.Provider.Acquire(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	d := &distrustedLock{Lock: l}
	if name == outbox.DefaultLeaderLockName {
		p.mu.Lock()
		p.locks = append(p.locks, d)
		p.mu.Unlock()
	}
	return d, nil
}

func (p *distrustful) leader(i int) *distrustedLock {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= len(p.locks) {
		return nil
	}
	return p.locks[i]
}

func TestDriver_DeliversNothingUnderALockNoLongerTrustedThoughLostIsOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		locks := &distrustful{Provider: r.locks}
		var sawStale atomic.Bool
		rec := &recorder{lane: "a"}
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			if first := locks.leader(0); first.untrusted.Load() && !first.released.Load() {
				sawStale.Store(true)
			}
			return all(len(run), outbox.Delivered()), nil
		})
		cfg := r.config(rec)
		cfg.Locks = locks
		r.run(cfg)
		synctest.Wait()
		locks.leader(0).untrusted.Store(true) // trust ran out; no timer has fired yet
		e := r.commit("a")
		time.Sleep(time.Minute)
		synctest.Wait()
		if sawStale.Load() {
			t.Fatal("the driver delivered a run under a lock whose trust had run out")
		}
		if !locks.leader(0).released.Load() || locks.leader(1) == nil {
			t.Fatal("the driver kept leading under a lock it could no longer trust")
		}
		if got := ids(rec.delivered()); fmt.Sprint(got) != fmt.Sprint(e) {
			t.Fatalf("delivered %v, want %v under the new lock", got, e)
		}
	})
}

func TestDriver_SettlesNothingWhenTrustEndsDuringDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		locks := &distrustful{Provider: r.locks}
		r.commit("a", "a")
		rec := &recorder{lane: "a"}
		var once sync.Once
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			once.Do(func() { locks.leader(0).untrusted.Store(true) })
			return all(len(run), outbox.Delivered()), nil
		})
		cfg := r.config(rec)
		cfg.Locks = locks
		var settled []outbox.Settlement
		var mu sync.Mutex
		cfg.Store = settleWatch{OutboxStore: r.store, seen: func(s outbox.Settlement) {
			mu.Lock()
			defer mu.Unlock()
			if l := locks.leader(0); l.untrusted.Load() && !l.released.Load() {
				settled = append(settled, s)
			}
		}}
		r.run(cfg)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(settled) != 0 {
			t.Fatalf("a pass whose lock's trust ended during delivery settled: %+v", settled[0])
		}
	})
}

type settleWatch struct {
	*memory.OutboxStore
	seen func(outbox.Settlement)
}

func (s settleWatch) Settle(ctx context.Context, st outbox.Settlement) error {
	s.seen(st)
	return s.OutboxStore.Settle(ctx, st)
}

func TestDriver_HandsTheLeadersFencingTokenToProcessorsThroughTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		// Two acquisitions before the driver's: its token is 3.
		for range 2 {
			l, err := r.locks.Acquire(context.Background(), outbox.DefaultLeaderLockName, lock.AcquireOptions{})
			if err != nil {
				t.Fatal(err)
			}
			l.Release(context.Background())
		}
		r.commit("a")
		var got []uint64
		var mu sync.Mutex
		proc := outbox.ProcessorFunc{LaneName: "a", Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			tok, ok := outbox.FencingToken(ctx)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				got = append(got, tok)
			}
			return all(len(run), outbox.Delivered()), nil
		}}
		r.run(r.config(proc))
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(got) != "[3]" {
			t.Fatalf("processors saw fencing tokens %v, want the leader's [3]", got)
		}
		if _, ok := outbox.FencingToken(context.Background()); ok {
			t.Fatal("FencingToken reports a token on a context the driver never touched")
		}
	})
}

func TestDriver_StepsDownWithoutSettlingWhenTheDestinationRefusesItsToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		locks := &distrustful{Provider: r.locks}
		r.commit("a")
		rec := &recorder{lane: "a"}
		var once sync.Once
		rec.setAnswer(func(run []outbox.Entry) ([]outbox.Outcome, error) {
			fenced := false
			once.Do(func() { fenced = true })
			if fenced {
				return nil, fmt.Errorf("engine: 409: token 1 is below 2: %w", outbox.ErrFenced)
			}
			return all(len(run), outbox.Delivered()), nil
		})
		cfg := r.config(rec)
		cfg.Locks = locks
		r.run(cfg)
		synctest.Wait()
		if !locks.leader(0).released.Load() {
			t.Fatal("a leader whose token the destination refused kept its lock")
		}
		// It stepped down at once and settled nothing: no failure was
		// recorded, and the next leader delivered the entry.
		time.Sleep(time.Minute)
		synctest.Wait()
		if st := r.state(); st[outbox.KeyFailedAttempts] != "" || strings.Contains(st[outbox.KeyLastError], "token") {
			t.Fatalf("the fenced pass was settled as a failure: %v", st)
		}
		if rec.calls() != 2 || r.cursor().IsZero() {
			t.Fatalf("%d deliveries, cursor %v; want the entry delivered by the next leader", rec.calls(), r.cursor())
		}
	})
}

// sweepWatch records every retention delete: when, and how many rows.
type sweepWatch struct {
	*memory.OutboxStore
	mu        sync.Mutex
	delivered []sweepCall
	requeued  []sweepCall
}

type sweepCall struct {
	at time.Time
	n  int
}

func (s *sweepWatch) DeleteDelivered(ctx context.Context, upTo outbox.Cursor, window time.Duration, limit int) (int, error) {
	n, err := s.OutboxStore.DeleteDelivered(ctx, upTo, window, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delivered = append(s.delivered, sweepCall{time.Now(), n})
	return n, err
}

func (s *sweepWatch) DeleteRequeued(ctx context.Context, window time.Duration, limit int) (int, error) {
	n, err := s.OutboxStore.DeleteRequeued(ctx, window, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requeued = append(s.requeued, sweepCall{time.Now(), n})
	return n, err
}

func (s *sweepWatch) calls() (delivered, requeued []sweepCall) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.delivered), slices.Clone(s.requeued)
}

func total(calls []sweepCall) int {
	n := 0
	for _, c := range calls {
		n += c.n
	}
	return n
}

// retentionBacklog commits n entries, parks and requeues the first
// requeued of them, and settles the cursor past all n: a backlog for
// retention once the window has passed.
func (r *rig) retentionBacklog(n, requeued int) {
	r.t.Helper()
	ctx := context.Background()
	var all []outbox.ID
	for len(all) < n {
		lanes := make([]string, min(100, n-len(all)))
		for i := range lanes {
			lanes[i] = "a"
		}
		all = append(all, r.commit(lanes...)...)
	}
	es, err := r.store.Scan(ctx, outbox.Cursor{}, n)
	if err != nil || len(es) != n {
		r.t.Fatalf("Scan = %d entries, %v; want %d", len(es), err, n)
	}
	park := make([]outbox.Parked, requeued)
	for i := range park {
		park[i] = outbox.Parked{Entry: es[i], Reason: "refused"}
	}
	if err := r.store.Settle(ctx, outbox.Settlement{To: es[n-1].Cursor(), Park: park}); err != nil {
		r.t.Fatal(err)
	}
	for _, p := range park {
		if err := r.store.Requeue(ctx, p.Entry.ID, outbox.NewID()); err != nil {
			r.t.Fatal(err)
		}
	}
}

func TestRetention_OneSweepGoesOnInBatchesWithAPauseUntilCaughtUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.retentionBacklog(2500, 250)
		time.Sleep(2 * time.Minute) // past the window
		watch := &sweepWatch{OutboxStore: r.store}
		cfg := r.config() // no processors: only retention works
		cfg.Store = watch
		cfg.RetentionDisabled = false
		cfg.RetentionWindow = time.Minute
		cfg.RetentionBatchSize = 100
		cfg.RetentionInterval = time.Hour
		start := time.Now()
		r.run(cfg)
		time.Sleep(30 * time.Minute) // well within the first interval
		synctest.Wait()
		delivered, requeued := watch.calls()
		if got := total(delivered); got != 2500 || len(delivered) != 26 {
			t.Fatalf("the first sweep deleted %d entries in %d batches; want all 2500, in 25 full batches and one that found the rest caught up", got, len(delivered))
		}
		for i := 1; i < len(delivered); i++ {
			if gap := delivered[i].at.Sub(delivered[i-1].at); gap != outbox.DefaultRetentionBatchPause {
				t.Fatalf("batch %d came %v after the one before; want the pause, %v", i, gap, outbox.DefaultRetentionBatchPause)
			}
		}
		if got := total(requeued); got != 250 || len(requeued) != 3 {
			t.Fatalf("the first sweep deleted %d requeued dead letters in %d batches; want all 250 in 3", got, len(requeued))
		}
		if end := requeued[len(requeued)-1].at; end.Sub(start) >= outbox.DefaultRetentionSweepBudget {
			t.Fatalf("the sweep ran %v, past its budget", end.Sub(start))
		}
	})
}

func TestRetention_ASweepStopsWhenItsBudgetIsSpentAndTheNextGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.retentionBacklog(2500, 0)
		time.Sleep(2 * time.Minute)
		watch := &sweepWatch{OutboxStore: r.store}
		cfg := r.config()
		cfg.Store = watch
		cfg.RetentionDisabled = false
		cfg.RetentionWindow = time.Minute
		cfg.RetentionBatchSize = 100
		cfg.RetentionInterval = time.Hour
		cfg.RetentionBatchPause = time.Second
		cfg.RetentionSweepBudget = 5 * time.Second
		r.run(cfg)
		time.Sleep(30 * time.Minute)
		synctest.Wait()
		delivered, _ := watch.calls()
		if got := total(delivered); got != 600 || len(delivered) != 6 {
			t.Fatalf("a sweep with a 5s budget and 1s pauses deleted %d entries in %d batches; want 600 in 6 (at 0s to 5s)", got, len(delivered))
		}
		time.Sleep(time.Hour) // the next sweep
		synctest.Wait()
		if delivered, _ := watch.calls(); total(delivered) != 1200 {
			t.Fatalf("after the second sweep %d entries are deleted, want 1200", total(delivered))
		}
	})
}

// After a logical restore into another cluster the stored cursor is above
// every xid the new cluster hands out: new entries would sort below it and
// the walk would never reach them. The driver refuses to walk, says why,
// and raises the stuck notice at once (waiting cannot mend it).
// A cursor at exactly the next xid is ahead too: no transaction of this
// database has that xid yet.
func TestDriver_RefusesToWalkWhenTheStoredCursorIsAheadOfTheTransactionCounter(t *testing.T) {
	for name, ahead := range map[string]func(next uint64) uint64{
		"far ahead":       func(uint64) uint64 { return 5<<32 + 1234 },
		"at the next xid": func(next uint64) uint64 { return next },
	} {
		t.Run(name, func(t *testing.T) { refusesACursorAhead(t, ahead) })
	}
}

func refusesACursorAhead(t *testing.T, ahead func(next uint64) uint64) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a")
		next, err := r.store.NextXID(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		restored := outbox.Cursor{XID: ahead(next), ID: outbox.NewID()}
		if err := r.store.Settle(context.Background(), outbox.Settlement{To: restored}); err != nil {
			t.Fatal(err)
		}
		rec := &recorder{lane: "a"}
		r.run(r.config(rec))
		synctest.Wait()
		n := r.notes.of(outbox.NoticeStuck)
		if len(n) != 1 || !strings.Contains(n[0].LastError, "ahead of") || !strings.Contains(n[0].LastError, "baton outbox rebase") {
			t.Fatalf("stuck notices %+v; want one at once, saying the cursor is ahead of the transaction counter and how to repair it", n)
		}
		time.Sleep(20 * time.Minute)
		synctest.Wait()
		if c := rec.calls(); c != 0 {
			t.Fatalf("the driver delivered %d runs from a cursor ahead of the transaction counter", c)
		}
		st := r.state()
		if !strings.Contains(st[outbox.KeyLastError], "ahead of") || st[outbox.KeyFirstStuckAt] == "" {
			t.Fatalf("state %v; want the refusal recorded as a failing streak", st)
		}
		if c := r.cursor(); c != restored {
			t.Fatalf("the cursor moved to %v", c)
		}
		if n := r.notes.of(outbox.NoticeStuck); len(n) != 2 {
			t.Fatalf("%d stuck notices in 20 minutes, want 2 (throttled to one per 15 minutes)", len(n))
		}
	})
}
