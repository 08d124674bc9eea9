package otelbaton_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/workrow"
)

type job struct {
	ID          int64
	Seq         int
	Attempts    int
	CompletedAt *time.Time
	ParkedAt    *time.Time
}

// jobs is a memory work-row table of n fresh jobs and a worker over it
// whose handler is h, observed as queue "jobs".
func jobs(t *testing.T, f *fixture, n int, h func(st *memory.WorkRowStore[int64, job], c workrow.Claimed[int64, job]) workrow.Outcome) *workrow.Worker[int64, job] {
	t.Helper()
	live := workrow.And(workrow.IsNull("completed_at"), workrow.IsNull("parked_at"))
	st, err := memory.NewWorkRowStore[int64, job](memory.WorkRowStoreOptions{Live: live})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if err := st.Insert(context.Background(), job{ID: int64(i), Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	w, err := workrow.NewWorker(workrow.Config[int64, job]{
		Store: st, Eligible: live, Order: []workrow.Order{workrow.Asc("seq")},
		OnClaim: []workrow.Set{workrow.Add("attempts", 1)},
		Attempt: func(j job) int { return j.Attempts },
		OnComplete: func(now time.Time) []workrow.Set {
			return []workrow.Set{workrow.Assign("completed_at", now)}
		},
		OnPark: func(now time.Time, _ error) []workrow.Set {
			return []workrow.Set{workrow.Assign("parked_at", now)}
		},
		Handler:   func(_ context.Context, c workrow.Claimed[int64, job]) workrow.Outcome { return h(st, c) },
		BatchSize: 10, Lease: time.Minute, RenewEvery: 20 * time.Second,
		Hooks: f.obs.WorkRows("jobs"),
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// steal claims a row under another lock, as a worker after its lease ran
// out would.
func steal(t *testing.T, st *memory.WorkRowStore[int64, job], id int64) {
	got, err := st.Claim(context.Background(), workrow.ClaimSpec{LockID: workrow.NewLockID(), Now: time.Now().Add(time.Hour),
		LeaseUntil: time.Now().Add(2 * time.Hour), BatchSize: 1, Eligible: workrow.Eq("id", id)})
	if err != nil || len(got) != 1 {
		t.Errorf("steal %d: %v, %d rows", id, err, len(got))
	}
}

func TestMetric_WorkRowsClaimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		w := jobs(t, f, 15, func(*memory.WorkRowStore[int64, job], workrow.Claimed[int64, job]) workrow.Outcome {
			return workrow.Complete()
		})
		for _, want := range []int{10, 5, 0} {
			if n, err := w.RunBatch(context.Background()); n != want || err != nil {
				t.Fatalf("RunBatch = %d, %v; want %d", n, err, want)
			}
		}
		m := f.mustMetric("baton.workrow.claimed", "{row}")
		sameMap(t, m.Name, sums(t, m), map[string]int64{"baton.queue=jobs": 15})
	})
}

func TestMetric_WorkRowsFinalizedByOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		w := jobs(t, f, 6, func(_ *memory.WorkRowStore[int64, job], c workrow.Claimed[int64, job]) workrow.Outcome {
			switch c.ID {
			case 4:
				return workrow.Fail(errors.New("remote said no"))
			case 5:
				return workrow.Park(errors.New("malformed"))
			case 6:
				return workrow.Release()
			}
			return workrow.Complete()
		})
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		m := f.mustMetric("baton.workrow.finalized", "{row}")
		sameMap(t, m.Name, sums(t, m), map[string]int64{
			"baton.outcome=completed,baton.queue=jobs": 3,
			"baton.outcome=failed,baton.queue=jobs":    1,
			"baton.outcome=parked,baton.queue=jobs":    1,
			"baton.outcome=released,baton.queue=jobs":  1,
		})
	})
}

func TestMetric_WorkRowsStale(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		w := jobs(t, f, 3, func(st *memory.WorkRowStore[int64, job], c workrow.Claimed[int64, job]) workrow.Outcome {
			switch c.ID {
			case 1: // its own row taken before its finalize
				steal(t, st, 1)
			case 2: // the next row taken while this one works past a renewal
				steal(t, st, 3)
				time.Sleep(30 * time.Second)
			}
			return workrow.Complete()
		})
		if _, err := w.RunBatch(context.Background()); err != nil {
			t.Fatal(err)
		}
		m := f.mustMetric("baton.workrow.stale", "{row}")
		sameMap(t, m.Name, sums(t, m), map[string]int64{
			"baton.operation=finalize,baton.queue=jobs": 1,
			"baton.operation=renew,baton.queue=jobs":    1,
		})
	})
}
