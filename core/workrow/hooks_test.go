package workrow_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/workrow"
)

// rowLog adds up what the hooks were told.
type rowLog struct {
	mu        sync.Mutex
	claims    []workrow.Claim
	finalized workrow.Finalize
	finalizes int
	renewed   workrow.Renew
	renewals  int
}

func (l *rowLog) ClaimEnded(_ context.Context, c workrow.Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.claims = append(l.claims, c)
}

func (l *rowLog) FinalizeEnded(_ context.Context, f workrow.Finalize) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.finalizes++
	l.finalized.Completed += f.Completed
	l.finalized.Failed += f.Failed
	l.finalized.Parked += f.Parked
	l.finalized.Released += f.Released
	l.finalized.Stale += f.Stale
}

func (l *rowLog) RenewEnded(_ context.Context, r workrow.Renew) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewals++
	l.renewed.Rows += r.Rows
	l.renewed.Lost += r.Lost
}

// One batch whose rows end every way there is: completed, failed, parked,
// released, finalized after another claim took it (stale), and taken while
// pending (lost at the renewal).
func TestWorkerHooks_ReportEveryOutcomeOfABatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(8)
		log := &rowLog{}
		cfg := jobConfig(store, func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome {
			switch c.ID {
			case 3:
				return workrow.Fail(errors.New("remote said no"))
			case 4:
				return workrow.Park(errors.New("malformed"))
			case 5:
				return workrow.Release()
			case 6:
				store.steal(6, time.Now().Add(time.Hour))
			case 7:
				store.steal(8, time.Now().Add(time.Hour))
				time.Sleep(50 * time.Second) // two renewals at work
			}
			return workrow.Complete()
		})
		cfg.OnPark = func(time.Time, error) []workrow.Set { return []workrow.Set{workrow.Assign("parked_at", time.Now())} }
		cfg.RenewEvery = 20 * time.Second
		cfg.Hooks = log
		w := newWorker(t, cfg)
		if n, err := w.RunBatch(context.Background()); n != 8 || err != nil {
			t.Fatalf("RunBatch = %d, %v", n, err)
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		if len(log.claims) != 1 || log.claims[0].Rows != 8 || log.claims[0].Err != nil {
			t.Errorf("claims %+v, want one of 8 rows", log.claims)
		}
		want := workrow.Finalize{Completed: 3, Failed: 1, Parked: 1, Released: 1, Stale: 1}
		if log.finalized != want {
			t.Errorf("finalized %+v over %d calls, want %+v", log.finalized, log.finalizes, want)
		}
		if log.renewals != 2 || log.renewed != (workrow.Renew{Rows: 2, Lost: 1}) {
			t.Errorf("%d renewals, %+v; want 2 renewing row 7, the first finding row 8 lost", log.renewals, log.renewed)
		}
	})
}

func TestWorkerStatus_RunningStoppedAndAFailingStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newJobs(3)
		log := &rowLog{}
		cfg := jobConfig(store, complete)
		cfg.Hooks = log
		w := newWorker(t, cfg)
		if w.Status().Running {
			t.Error("running before Run")
		}
		stop := runWorker(t, w)
		synctest.Wait()
		s := w.Status()
		if !s.Running || s.Last.IsZero() || s.FailingStreak != 0 || len(s.Roles) != 0 {
			t.Errorf("running: %+v", s)
		}
		store.mu.Lock()
		store.claimErr = errors.New("connection refused")
		store.mu.Unlock()
		time.Sleep(3 * workrow.DefaultErrorDelay)
		synctest.Wait()
		s = w.Status()
		if s.FailingStreak < 3 || s.LastError == "" {
			t.Errorf("claims failing: %+v, want a streak with its error", s)
		}
		h, err := health.NewHandler(health.Config{Components: map[string]health.Reporter{"workrow:jobs": w}})
		if err != nil {
			t.Fatal(err)
		}
		if rep := h.Check(health.ProbeLive, time.Now()); !rep.OK {
			t.Errorf("a worker whose store fails is not live: %+v", rep)
		}
		stop()
		if w.Status().Running {
			t.Error("running after Run returned")
		}
		log.mu.Lock()
		defer log.mu.Unlock()
		failed := 0
		for _, c := range log.claims {
			if c.Err != nil {
				failed++
			}
		}
		if failed < 3 {
			t.Errorf("%d failed claims reported, want at least 3", failed)
		}
	})
}
