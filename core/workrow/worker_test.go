package workrow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// job is the row type of the worker tests.
type job struct {
	ID          int64
	Seq         int
	Attempts    int
	CompletedAt *time.Time
	ParkedAt    *time.Time
	LastError   *string
}

// newJobs is a store holding n fresh jobs, ids and seq 1..n.
func newJobs(n int) *memStore[job] {
	s := newMemStore[job]()
	for i := 1; i <= n; i++ {
		s.insert(job{ID: int64(i), Seq: i})
	}
	return s
}

var ladder = workrow.Steps{10 * time.Second, 20 * time.Second, 40 * time.Second}

func jobConfig(store workrow.Store[int64, job], h workrow.Handler[int64, job]) workrow.Config[int64, job] {
	return workrow.Config[int64, job]{
		Store:    store,
		Handler:  h,
		Eligible: workrow.And(workrow.IsNull("completed_at"), workrow.IsNull("parked_at")),
		Order:    []workrow.Order{workrow.Asc("seq")},
		OnClaim:  []workrow.Set{workrow.Add("attempts", 1)},
		Attempt:  func(j job) int { return j.Attempts },
		OnComplete: func(now time.Time) []workrow.Set {
			return []workrow.Set{workrow.Assign("completed_at", now)}
		},
		OnFail: func(_ time.Time, err error) []workrow.Set {
			return []workrow.Set{workrow.Assign("last_error", err.Error())}
		},
		Backoff:   ladder,
		BatchSize: 10,
		Lease:     time.Minute,
	}
}

func newWorker(t *testing.T, cfg workrow.Config[int64, job]) *workrow.Worker[int64, job] {
	t.Helper()
	w, err := workrow.NewWorker(cfg)
	if err != nil {
		t.Fatalf("NewWorker: %v", err)
	}
	return w
}

// runWorker runs w.Run in the background until the test ends.
func runWorker(t *testing.T, w *workrow.Worker[int64, job]) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := w.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

func complete(context.Context, workrow.Claimed[int64, job]) workrow.Outcome {
	return workrow.Complete()
}

func TestWorker_CompletesEveryRowAndFinalizesEachBatchInOneCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(25)
		var handled []int64
		w := newWorker(t, jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			if c.Row.Attempts != 1 {
				t.Errorf("row %d handled with Attempts=%d; OnClaim must have counted this attempt", c.ID, c.Row.Attempts)
			}
			handled = append(handled, c.ID)
			return workrow.Complete()
		}))
		for _, want := range []int{10, 10, 5, 0} {
			n, err := w.RunBatch(context.Background())
			if err != nil || n != want {
				t.Fatalf("RunBatch = %d, %v; want %d rows", n, err, want)
			}
		}
		for i, id := range handled {
			if id != int64(i+1) {
				t.Fatalf("handled %v; want ids 1..25 in queue order", handled)
			}
		}
		for id := int64(1); id <= 25; id++ {
			j, lock, until := store.get(id)
			if j.CompletedAt == nil || !lock.IsZero() || !until.IsZero() {
				t.Fatalf("row %d: completed_at=%v lock=%v until=%v; want completed and unlocked", id, j.CompletedAt, lock, until)
			}
		}
		if claims, finalizes := store.counts(); claims != 4 || finalizes != 3 {
			t.Fatalf("%d claims and %d finalize calls; want 4 and one finalize per batch", claims, finalizes)
		}
	})
}

func TestWorker_FailureRecordsTheErrorDelaysTheRowAndDoesNotBlockTheHead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(3)
		var mu sync.Mutex
		var order []string
		start := time.Now()
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, fmt.Sprintf("%d@%v", c.ID, time.Since(start)))
			if c.ID == 1 && c.Row.Attempts == 1 {
				return workrow.Fail(errors.New("smtp: 451 try later"))
			}
			return workrow.Complete()
		})
		cfg.BatchSize = 1
		cfg.IdleDelay = time.Second
		runWorker(t, newWorker(t, cfg))

		time.Sleep(5 * time.Second)
		j, lock, until := store.get(1)
		if j.LastError == nil || *j.LastError != "smtp: 451 try later" {
			t.Fatalf("last_error = %v; want the failure recorded", j.LastError)
		}
		if !lock.IsZero() || !until.Equal(start.Add(10*time.Second)) {
			t.Fatalf("after the failure: lock=%v until=%v; want unlocked and invisible until %v (first ladder step)",
				lock, until, start.Add(10*time.Second))
		}
		if j2, _, _ := store.get(2); j2.CompletedAt == nil {
			t.Fatal("row 2 waited for the failed row 1: the head of the queue must not block")
		}
		time.Sleep(10 * time.Second)
		j, _, _ = store.get(1)
		if j.CompletedAt == nil || j.Attempts != 2 {
			t.Fatalf("row 1 after its delay: completed=%v attempts=%d; want completed on attempt 2", j.CompletedAt, j.Attempts)
		}
		mu.Lock()
		defer mu.Unlock()
		want := "1@0s 2@0s 3@0s 1@10s"
		if got := strings.Join(order, " "); got != want {
			t.Fatalf("handled %s; want %s", got, want)
		}
	})
}

func TestWorker_RemoteRetryAfterLongerThanTheBackoffWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(1)
		start := time.Now()
		w := newWorker(t, jobConfig(store, func(context.Context, workrow.Claimed[int64, job]) workrow.Outcome {
			return workrow.Fail(errors.New("429")).RetryAfter(time.Hour)
		}))
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, _, until := store.get(1); !until.Equal(start.Add(time.Hour)) {
			t.Fatalf("visible after %v; want the remote's hour, not the ladder's 10s", until.Sub(start))
		}
	})
}

func TestWorker_RenewsTheLeaseWhileLongWorkRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(2)
		start := time.Now()
		var seenUntil []time.Duration
		cfg := jobConfig(store, func(ctx context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			time.Sleep(10 * time.Second) // look between renewals
			for range 5 {
				time.Sleep(time.Minute)
				_, _, until := store.get(c.ID)
				seenUntil = append(seenUntil, until.Sub(start))
			}
			if ctx.Err() != nil {
				t.Errorf("handler ctx ended: %v", context.Cause(ctx))
			}
			return workrow.Complete()
		})
		cfg.BatchSize = 1
		cfg.Lease = time.Minute // renewed every 20s
		w := newWorker(t, cfg)
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		// At m minutes and 10s the last renewal ran at m minutes (renewals
		// at 20s, 40s, 60s, …) and extended the lease to m+1 minutes.
		want := []time.Duration{2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute, 6 * time.Minute}
		if fmt.Sprint(seenUntil) != fmt.Sprint(want) {
			t.Fatalf("lease ends seen by the handler: %v; want %v", seenUntil, want)
		}
		if j, _, _ := store.get(1); j.CompletedAt == nil {
			t.Fatal("a renewed row's finalize must succeed")
		}
		if n := len(store.renews); n != 15 {
			t.Fatalf("%d renewals in 5m10s; want 15 (every Lease/3)", n)
		}
	})
}

func TestWorker_RowTakenByAnotherWorkerCancelsItsHandlerAndIsNeverOverwritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(1)
		start := time.Now()
		var cause error
		cfg := jobConfig(store, func(ctx context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			<-ctx.Done()
			cause = context.Cause(ctx)
			return workrow.Complete() // a handler that finishes anyway
		})
		w := newWorker(t, cfg)
		go func() {
			time.Sleep(30 * time.Second)
			store.steal(1, start.Add(time.Hour))
		}()
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(cause, workrow.ErrNotOwned) {
			t.Fatalf("handler ctx cause = %v; want ErrNotOwned", cause)
		}
		if took := time.Since(start); took != 40*time.Second {
			t.Fatalf("the loss was noticed after %v; want at the next renewal, 40s", took)
		}
		j, lock, _ := store.get(1)
		if j.CompletedAt != nil || lock.IsZero() {
			t.Fatalf("the thief's row was changed: completed=%v lock=%v", j.CompletedAt, lock)
		}
		for _, call := range store.finalizes {
			for _, f := range call {
				if f.ID == 1 {
					t.Fatal("a lost row was sent to FinalizeMany; its outcome must be dropped")
				}
			}
		}
	})
}

func TestWorker_LeaseRunningOutUnrenewedCancelsTheHandlerAndReleasesTheRest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(3)
		store.renewErr = errors.New("connection refused")
		start := time.Now()
		var handled atomic.Int32
		var cause error
		var at time.Duration
		w := newWorker(t, jobConfig(store, func(ctx context.Context, _ workrow.Claimed[int64, job]) workrow.Outcome {
			handled.Add(1)
			<-ctx.Done()
			cause, at = context.Cause(ctx), time.Since(start)
			return workrow.Fail(ctx.Err())
		}))
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(cause, workrow.ErrLeaseExpired) || at != time.Minute {
			t.Fatalf("handler ctx ended at %v with %v; want at the lease end (1m) with ErrLeaseExpired", at, cause)
		}
		if n := handled.Load(); n != 1 {
			t.Fatalf("%d handlers ran; no row may start after the lease ran out", n)
		}
		for id := int64(1); id <= 3; id++ {
			j, lock, until := store.get(id)
			if !lock.IsZero() || !until.IsZero() || j.LastError != nil {
				t.Fatalf("row %d: lock=%v until=%v error=%v; want released without a failure counted", id, lock, until, j.LastError)
			}
		}
	})
}

// slowFirstRenewal answers its first RenewMany after a delay, and refuses
// every later one.
type slowFirstRenewal struct {
	*memStore[job]
	delay time.Duration
	calls atomic.Int32
}

func (s *slowFirstRenewal) RenewMany(ctx context.Context, lock workrow.LockID, until time.Time, ids []int64) ([]bool, error) {
	if s.calls.Add(1) > 1 {
		return nil, errors.New("connection refused")
	}
	time.Sleep(s.delay)
	return s.memStore.RenewMany(ctx, lock, until, ids)
}

// The store extends a lease from the renewal's request, so the worker
// trusts it from the request's start too, not from the slow answer: the
// handler's context ends at the renewal's start + Lease.
func TestWorker_ARenewalExtendsTheLeaseFromItsStartNotItsAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &slowFirstRenewal{memStore: newJobs(1), delay: 5 * time.Second}
		start := time.Now()
		var cause error
		var at time.Duration
		cfg := jobConfig(store, func(ctx context.Context, _ workrow.Claimed[int64, job]) workrow.Outcome {
			<-ctx.Done()
			cause, at = context.Cause(ctx), time.Since(start)
			return workrow.Fail(ctx.Err())
		})
		cfg.Lease = 30 * time.Second
		cfg.RenewEvery = 10 * time.Second
		if _, err := newWorker(t, cfg).RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		// The one renewal that succeeded started at 10s.
		if !errors.Is(cause, workrow.ErrLeaseExpired) || at != 40*time.Second {
			t.Fatalf("handler ctx ended at %v with %v; want at 40s (the renewal's start + Lease) with ErrLeaseExpired", at, cause)
		}
	})
}

func TestWorker_PanicIsAFailureAndTheBatchGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(2)
		w := newWorker(t, jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			if c.ID == 1 {
				panic("nil map")
			}
			return workrow.Complete()
		}))
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		j, _, until := store.get(1)
		if j.LastError == nil || !strings.Contains(*j.LastError, "panicked: nil map") || until.IsZero() {
			t.Fatalf("panicking row: error=%v until=%v; want a recorded failure with a delay", j.LastError, until)
		}
		if j2, _, _ := store.get(2); j2.CompletedAt == nil {
			t.Fatal("the row after a panic was not worked")
		}
	})
}

func TestWorker_ZeroOutcomeIsAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(1)
		w := newWorker(t, jobConfig(store, func(context.Context, workrow.Claimed[int64, job]) workrow.Outcome {
			return workrow.Outcome{}
		}))
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if j, _, _ := store.get(1); j.LastError == nil || *j.LastError != workrow.ErrNoOutcome.Error() {
			t.Fatalf("error = %v; want ErrNoOutcome recorded", j.LastError)
		}
	})
}

// The shutdown's finalize runs on a context of its own: the Run's has
// ended by then. Over a store that finalizes claim by claim (no
// ClaimsFinalizer) the batch's own flush makes that call.
func TestWorker_CancelledMidBatchFinalizesFinishedRowsAndReleasesTheRest(t *testing.T) {
	for name, wrap := range map[string]func(*memStore[job]) workrow.Store[int64, job]{
		"claims finalized together": func(s *memStore[job]) workrow.Store[int64, job] { return s },
		"claim by claim":            func(s *memStore[job]) workrow.Store[int64, job] { return perClaim[job]{s} },
	} {
		t.Run(name, func(t *testing.T) { cancelledMidBatch(t, wrap) })
	}
}

func cancelledMidBatch(t *testing.T, wrap func(*memStore[job]) workrow.Store[int64, job]) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(5)
		ctx, cancel := context.WithCancel(context.Background())
		w := newWorker(t, jobConfig(wrap(store), func(hctx context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			if c.ID == 3 {
				cancel() // shutdown arrives while row 3 is at work
				<-hctx.Done()
				return workrow.Fail(hctx.Err())
			}
			return workrow.Complete()
		}))
		done := make(chan error)
		go func() { done <- w.Run(ctx) }()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v; want nil after its ctx ended", err)
		}
		for id := int64(1); id <= 5; id++ {
			j, lock, until := store.get(id)
			wantDone := id < 3
			if (j.CompletedAt != nil) != wantDone || !lock.IsZero() || !until.IsZero() || j.LastError != nil {
				t.Fatalf("row %d: completed=%v lock=%v until=%v error=%v; want completed=%v, unlocked, no failure",
					id, j.CompletedAt != nil, lock, until, j.LastError, wantDone)
			}
		}
	})
}

// A row that is decided but waits for its finalize (FlushInterval longer
// than the lease) is renewed with the rows still at work: its outcome is
// recorded, not lost to a lapsed lease and done again elsewhere.
func TestWorker_RenewsDecidedRowsThatWaitForTheirFinalize(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(2)
		start := time.Now()
		rec := &logRecorder{}
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			if c.ID == 2 {
				time.Sleep(3 * time.Minute) // three leases
			}
			return workrow.Complete()
		})
		cfg.BatchSize = 2
		cfg.Lease = time.Minute
		cfg.FlushInterval = 10 * time.Minute
		cfg.Logger = slog.New(rec)
		done := make(chan error)
		go func() {
			_, err := newWorker(t, cfg).RunBatch(context.Background())
			done <- err
		}()
		time.Sleep(2*time.Minute + 50*time.Second)
		if j, lock, until := store.get(1); j.CompletedAt != nil || lock.IsZero() || !until.After(time.Now()) {
			t.Fatalf("row 1, decided and waiting for its finalize at %v: completed=%v lock=%v until %v; want still leased",
				time.Since(start), j.CompletedAt != nil, lock, until.Sub(start))
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for id := int64(1); id <= 2; id++ {
			if j, _, _ := store.get(id); j.CompletedAt == nil {
				t.Fatalf("row %d was not completed", id)
			}
		}
		if rec.has("taken by another worker") || rec.has("lease ran out") {
			t.Fatalf("a decided row was lost: %v", rec.messages())
		}
	})
}

// An Outcome's sets win over the Config's for a column both set, and the
// Config's other sets stay: the row is finalized once, with the handler's
// value, not refused for a column set twice.
func TestWorker_AnOutcomesSetsOverrideTheConfigsForTheSameColumn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(2)
		done := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			if c.ID == 1 {
				return workrow.Complete(workrow.Assign("completed_at", done))
			}
			return workrow.Fail(errors.New("from the config"), workrow.Assign("last_error", "from the handler"))
		})
		cfg.OnComplete = func(now time.Time) []workrow.Set {
			return []workrow.Set{workrow.Assign("completed_at", now), workrow.Assign("last_error", nil)}
		}
		if _, err := newWorker(t, cfg).RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if j, lock, _ := store.get(1); j.CompletedAt == nil || !j.CompletedAt.Equal(done) || !lock.IsZero() {
			t.Fatalf("row 1: completed_at %v, lock %v; want the handler's %v, unlocked", j.CompletedAt, lock, done)
		}
		if j, lock, _ := store.get(2); j.LastError == nil || *j.LastError != "from the handler" || !lock.IsZero() {
			t.Fatalf("row 2: last_error %v, lock %v; want the handler's, unlocked", j.LastError, lock)
		}
	})
}

func TestWorker_ParksAtMaxAttemptsAndWhenClaimedBeyondThem(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(1)
		// Row 2's earlier workers died: it comes back for attempt 4 of 3.
		store.insert(job{ID: 2, Seq: 2, Attempts: 3})
		var calls []int64
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			calls = append(calls, c.ID)
			return workrow.Fail(errors.New("410 gone"))
		})
		cfg.MaxAttempts = 3
		cfg.OnPark = func(now time.Time, err error) []workrow.Set {
			return []workrow.Set{workrow.Assign("parked_at", now), workrow.Assign("last_error", err.Error())}
		}
		cfg.IdleDelay = time.Second
		runWorker(t, newWorker(t, cfg))
		time.Sleep(2 * time.Minute)

		j1, _, until := store.get(1)
		if j1.ParkedAt == nil || j1.Attempts != 3 || !until.IsZero() {
			t.Fatalf("row 1: parked=%v attempts=%d until=%v; want parked after its third failure", j1.ParkedAt, j1.Attempts, until)
		}
		j2, _, _ := store.get(2)
		if j2.ParkedAt == nil || j2.LastError == nil || !strings.Contains(*j2.LastError, "attempts exhausted") {
			t.Fatalf("row 2: parked=%v error=%v; want parked with ErrAttemptsExhausted", j2.ParkedAt, j2.LastError)
		}
		if fmt.Sprint(calls) != "[1 1 1]" {
			t.Fatalf("handler calls %v; want row 1 three times and row 2 never", calls)
		}
	})
}

func TestWorker_IdlesBetweenEmptyClaimsAndPausesAfterErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(0)
		cfg := jobConfig(store, complete)
		cfg.IdleDelay = time.Second
		cfg.ErrorDelay = 10 * time.Second
		cfg.PollOnly = true // the pauses of polling; wake_test.go has the listening
		stop := runWorker(t, newWorker(t, cfg))
		time.Sleep(10*time.Second + time.Millisecond)
		if claims, _ := store.counts(); claims != 11 {
			t.Fatalf("%d claims in 10s with IdleDelay 1s; want 11", claims)
		}
		store.mu.Lock()
		store.claimErr = errors.New("connection refused")
		store.mu.Unlock()
		time.Sleep(time.Second) // the next claim fails
		time.Sleep(30 * time.Second)
		if claims, _ := store.counts(); claims != 15 {
			t.Fatalf("%d claims after 30s of errors; want 15 (one every ErrorDelay)", claims)
		}
		stop()
	})
}

func TestWorker_SlowRowsAreFinalizedAsTheyFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(3)
		cfg := jobConfig(store, func(context.Context, workrow.Claimed[int64, job]) workrow.Outcome {
			time.Sleep(2 * time.Second)
			return workrow.Complete()
		})
		w := newWorker(t, cfg)
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, finalizes := store.counts(); finalizes != 3 {
			t.Fatalf("%d finalize calls; a row slower than FlushInterval must be finalized when it finishes (want 3)", finalizes)
		}
	})
}

// FlushInterval counts from the oldest finished row: rows finishing one
// after another, each sooner than the interval, do not put the finalize
// off, or a steady stream of short rows would wait for the batch's end.
func TestWorker_FinishedRowsWaitNoLongerThanFlushIntervalFromTheOldest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(6)
		start := time.Now()
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			if c.ID == 6 {
				time.Sleep(10 * time.Second) // the straggler
			} else {
				time.Sleep(300 * time.Millisecond)
			}
			return workrow.Complete()
		})
		cfg.FlushInterval = 500 * time.Millisecond
		done := make(chan error)
		go func() {
			_, err := newWorker(t, cfg).RunBatch(context.Background())
			done <- err
		}()
		// Row 1 finished at 300ms, rows 2 and 3 at 600ms and 900ms; the
		// finalize of row 1 is due at 800ms.
		time.Sleep(850 * time.Millisecond)
		if j, _, _ := store.get(1); j.CompletedAt == nil {
			t.Errorf("row 1, finished at 300ms, is not finalized at %v; FlushInterval is %v", time.Since(start), cfg.FlushInterval)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestWorker_ReleaseHandsTheRowBackAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(1)
		w := newWorker(t, jobConfig(store, func(context.Context, workrow.Claimed[int64, job]) workrow.Outcome {
			return workrow.Release()
		}))
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		j, lock, until := store.get(1)
		if j.CompletedAt != nil || j.LastError != nil || !lock.IsZero() || !until.IsZero() || j.Attempts != 1 {
			t.Fatalf("released row: %+v lock=%v until=%v; want untouched but for the counted attempt", j, lock, until)
		}
	})
}

func TestWorker_LogsAFinalizeThatFoundTheRowTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(1)
		rec := &logRecorder{}
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			store.steal(c.ID, time.Now().Add(time.Hour)) // taken between renewals
			return workrow.Complete()
		})
		cfg.Logger = slog.New(rec)
		if _, err := newWorker(t, cfg).RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		if j, _, _ := store.get(1); j.CompletedAt != nil {
			t.Fatal("a finalize overwrote the row another worker holds")
		}
		if !rec.has("taken by another worker before its outcome was recorded") {
			t.Fatalf("no warning logged; got %v", rec.messages())
		}
	})
}

func TestNewWorker_RejectsInvalidConfigNamingTheField(t *testing.T) {
	store := newJobs(0)
	for _, tc := range []struct {
		field  string
		change func(*workrow.Config[int64, job])
	}{
		{"Store is nil", func(c *workrow.Config[int64, job]) { c.Store = nil }},
		{"Handler is nil", func(c *workrow.Config[int64, job]) { c.Handler = nil }},
		{"Eligible is empty", func(c *workrow.Config[int64, job]) { c.Eligible = workrow.Cond{} }},
		{"Attempt is nil", func(c *workrow.Config[int64, job]) { c.Attempt = nil }},
		{"OnComplete is nil", func(c *workrow.Config[int64, job]) { c.OnComplete = nil }},
		{"BatchSize is 1001", func(c *workrow.Config[int64, job]) { c.BatchSize = 1001 }},
		{"BatchSize is -1", func(c *workrow.Config[int64, job]) { c.BatchSize = -1 }},
		{"Lease is -1m0s", func(c *workrow.Config[int64, job]) { c.Lease = -time.Minute }},
		{"FlushInterval is -1s", func(c *workrow.Config[int64, job]) { c.FlushInterval = -time.Second }},
		{"IdleDelay is -1s", func(c *workrow.Config[int64, job]) { c.IdleDelay = -time.Second }},
		{"ErrorDelay is -1s", func(c *workrow.Config[int64, job]) { c.ErrorDelay = -time.Second }},
		{"StoreTimeout is -1s", func(c *workrow.Config[int64, job]) { c.StoreTimeout = -time.Second }},
		{"MaxAttempts is -1", func(c *workrow.Config[int64, job]) { c.MaxAttempts = -1 }},
		{"Concurrency is -1", func(c *workrow.Config[int64, job]) { c.Concurrency = -1 }},
		{"Concurrency is 10001", func(c *workrow.Config[int64, job]) { c.Concurrency = 10001 }},
		{"RenewEvery (1m0s) must be positive and below Lease (1m0s)", func(c *workrow.Config[int64, job]) { c.RenewEvery = time.Minute }},
		{"MaxAttempts is 3 but OnPark is nil", func(c *workrow.Config[int64, job]) { c.MaxAttempts = 3 }},
		{"Backoff: Steps is empty", func(c *workrow.Config[int64, job]) { c.Backoff = workrow.Steps{} }},
		{"Backoff: Exponential.Initial (2h0m0s) is above Max (1h0m0s)", func(c *workrow.Config[int64, job]) {
			c.Backoff = workrow.Exponential{Initial: 2 * time.Hour}
		}},
		{`Eligible.And[1].Lt("attempts"): the value is nil`, func(c *workrow.Config[int64, job]) {
			c.Eligible = workrow.And(workrow.IsNull("completed_at"), workrow.Lt("attempts", nil))
		}},
		{"OnClaim[1]: column \"attempts\" is set twice", func(c *workrow.Config[int64, job]) {
			c.OnClaim = []workrow.Set{workrow.Add("attempts", 1), workrow.Assign("attempts", 0)}
		}},
		{"Order[0]: the column name is empty", func(c *workrow.Config[int64, job]) { c.Order = []workrow.Order{{}} }},
	} {
		t.Run(tc.field, func(t *testing.T) {
			cfg := jobConfig(store, complete)
			tc.change(&cfg)
			_, err := workrow.NewWorker(cfg)
			if !errors.Is(err, workrow.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err = %v; want ErrInvalidConfig mentioning %q", err, tc.field)
			}
		})
	}
}

// logRecorder keeps the messages logged to it.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *logRecorder) WithGroup(string) slog.Handler            { return r }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

func (r *logRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

func (r *logRecorder) has(part string) bool {
	for _, m := range r.messages() {
		if strings.Contains(m, part) {
			return true
		}
	}
	return false
}
