package otelbaton_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

const (
	deliverA = "messaging.destination.name=a,messaging.operation.name=deliver,messaging.system=baton"
	deliverB = "messaging.destination.name=b,messaging.operation.name=deliver,messaging.system=baton"
)

func TestMetric_DeliveredEntriesPerLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		r.commit("a", "a", "b", "a")
		r.commit("b")
		r.run(r.config(proc("a", 0, nil), proc("b", 0, nil)))
		synctest.Wait()
		m := f.mustMetric("messaging.client.sent.messages", "{message}")
		sameMap(t, m.Name, sums(t, m), map[string]int64{deliverA: 3, deliverB: 2})
	})
}

func TestMetric_ParkedEntriesPerLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		r.commit("a", "b", "b", "nobody")
		r.run(r.config(proc("a", 0, nil), proc("b", 0, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			return every(len(run), outbox.Park("malformed")), nil
		})))
		synctest.Wait()
		m := f.mustMetric("baton.outbox.parked", "{entry}")
		sameMap(t, m.Name, sums(t, m), map[string]int64{"messaging.destination.name=b": 2, "messaging.destination.name=nobody": 1})
	})
}

func TestMetric_RetriedEntriesPerLane(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		r.commit("a", "a", "a", "b")
		calls := 0
		cfg := r.config(proc("a", 0, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			calls++
			if calls == 1 { // the first delivered, the second to retry: it and the third wait
				return []outbox.Outcome{outbox.Delivered(), outbox.Retry("busy"), outbox.Delivered()}, nil
			}
			return every(len(run), outbox.Delivered()), nil
		}), proc("b", 0, nil))
		r.run(cfg)
		time.Sleep(cfg.ErrorDelay)
		synctest.Wait()
		m := f.mustMetric("baton.outbox.retried", "{entry}")
		sameMap(t, m.Name, sums(t, m), map[string]int64{"messaging.destination.name=a": 2})
		m = f.mustMetric("messaging.client.sent.messages", "{message}")
		sameMap(t, m.Name, sums(t, m), map[string]int64{deliverA: 3, deliverB: 1})
	})
}

func TestMetric_PassDurationByOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		r.commit("a")
		calls := 0
		cfg := r.config(proc("a", 3*time.Second, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			calls++
			if calls == 1 {
				return every(len(run), outbox.Retry("busy")), nil
			}
			return every(len(run), outbox.Delivered()), nil
		}))
		stop := r.run(cfg)
		// retry (3s), 30s pause, progress (3s), 5s pause, idle, 5s pause, idle
		time.Sleep(3*time.Second + cfg.ErrorDelay + 3*time.Second + 2*cfg.IdleDelay + time.Second)
		stop()
		m := f.mustMetric("baton.outbox.pass.duration", "s")
		got := histograms[float64](t, m)
		want := map[string]hist{"baton.outcome=retry": {1, 3}, "baton.outcome=progress": {1, 3}, "baton.outcome=idle": {2, 0}}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s = %+v, want %+v (all: %v)", m.Name, k, got[k], v, got)
			}
		}
	})
}

func TestMetric_EntriesPerPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		for range 25 {
			r.commit("a")
		}
		cfg := r.config(proc("a", 0, nil))
		stop := r.run(cfg)
		time.Sleep(cfg.IdleDelay + time.Second)
		stop()
		m := f.mustMetric("baton.outbox.pass.entries", "{entry}")
		got := histograms[int64](t, m)
		// Full batches of 10 go straight on; then 5, and IdleDelay later
		// one that finds nothing.
		if h := got["baton.outcome=progress"]; h != (hist{Count: 3, Sum: 25}) {
			t.Errorf("%s progress = %+v, want 3 passes of 25 entries in all (%v)", m.Name, h, got)
		}
		if h := got["baton.outcome=idle"]; h.Count < 1 || h.Sum != 0 {
			t.Errorf("%s idle = %+v, want passes of 0 entries", m.Name, h)
		}
	})
}

func TestMetric_PendingEntriesAreCappedAndOnlyTheLeaderReports(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		lanes := make([]string, outbox.BacklogLimit+50)
		for i := range lanes {
			lanes[i] = "a"
		}
		r.commit(lanes...)
		// Deliver the first 10 entries, then retry the 11th for good.
		delivered := 0
		cfg := r.config(proc("a", 0, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			if delivered >= 10 {
				return every(len(run), outbox.Retry("busy")), nil
			}
			delivered += len(run)
			return every(len(run), outbox.Delivered()), nil
		}))
		stop := r.run(cfg)
		synctest.Wait()
		m := f.mustMetric("baton.outbox.pending", "{entry}")
		sameMap(t, m.Name, gauges(t, m), map[string]int64{"baton.lock=baton-outbox-driver": outbox.BacklogLimit})
		time.Sleep(2 * cfg.ErrorDelay)
		synctest.Wait()
		sameMap(t, m.Name, gauges(t, f.mustMetric("baton.outbox.pending", "{entry}")), map[string]int64{"baton.lock=baton-outbox-driver": outbox.BacklogLimit})
		stop()
		if m, ok := f.metric("baton.outbox.pending"); ok && len(gauges(t, m)) > 0 {
			t.Errorf("after leadership ended: %v, want no value", gauges(t, m))
		}
	})
}

func TestMetric_DeadLettersWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		r.commit("a", "a", "a")
		cfg := r.config(proc("a", 0, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			return every(len(run), outbox.Park("malformed")), nil
		}))
		r.run(cfg)
		synctest.Wait()
		const leader = "baton.lock=baton-outbox-driver"
		sameMap(t, "dead letters", gauges(t, f.mustMetric("baton.outbox.dead_letters", "{entry}")), map[string]int64{leader: 3})
		dead, err := r.store.ListDead(context.Background(), outbox.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.store.Requeue(context.Background(), dead[0].ID, outbox.NewID()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(outbox.BacklogEvery) // the requeued entry is parked again at once: still 3
		synctest.Wait()
		sameMap(t, "dead letters after a requeue parked again", gauges(t, f.mustMetric("baton.outbox.dead_letters", "{entry}")), map[string]int64{leader: 3})
	})
}

func TestMetric_StuckNotices(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		r.commit("a")
		cfg := r.config(proc("a", 0, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			return every(len(run), outbox.Retry("busy")), nil
		}))
		cfg.StuckAfter = time.Minute
		cfg.StuckNoticeEvery = 10 * time.Minute
		r.run(cfg)
		time.Sleep(5 * time.Minute) // stuck after 1 min; the next notice not before 11 min
		synctest.Wait()
		if m, ok := f.metric("baton.outbox.stuck_notices"); ok {
			sameMap(t, m.Name, sums(t, m), map[string]int64{"messaging.destination.name=a": 1})
		} else {
			t.Fatal("no stuck notice counted")
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		m := f.mustMetric("baton.outbox.stuck_notices", "{notice}")
		sameMap(t, m.Name, sums(t, m), map[string]int64{"messaging.destination.name=a": 2})
	})
}
