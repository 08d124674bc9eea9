package outbox_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/outbox"
)

// probe judges one driver's status the way the probe handler does.
func probe(t *testing.T, d *outbox.Driver) (live, ready health.Report) {
	t.Helper()
	h, err := health.NewHandler(health.Config{Components: map[string]health.Reporter{"outbox": d}, ShowErrors: true})
	if err != nil {
		t.Fatal(err)
	}
	return h.Check(health.ProbeLive, time.Now()), h.Check(health.ProbeReady, time.Now())
}

func role(s health.Status) health.Role {
	if len(s.Roles) != 1 {
		return health.Role{}
	}
	return s.Roles[0]
}

func TestDriverStatus_LeaderAndStandbyAreBothLiveAndReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a", "a")
		leader, _ := r.startDriver(r.config(&recorder{lane: "a"}))
		synctest.Wait()
		standby, _ := r.startDriver(r.config(&recorder{lane: "a"}))
		time.Sleep(time.Minute) // many passes of the leader, many attempts of the standby
		synctest.Wait()

		ls, ss := leader.Status(), standby.Status()
		if !ls.Running || role(ls).State != health.Leader || role(ls).Token == 0 || role(ls).Name != outbox.DefaultLeaderLockName {
			t.Errorf("leader: %+v, want running, leader of %s with a token", ls, outbox.DefaultLeaderLockName)
		}
		if !ss.Running || role(ss).State != health.Standby || role(ss).Token != 0 {
			t.Errorf("standby: %+v, want running, standby", ss)
		}
		for name, d := range map[string]*outbox.Driver{"leader": leader, "standby": standby} {
			s := d.Status()
			if s.Last.IsZero() || time.Since(s.Last) > 5*time.Second || s.FailingStreak != 0 {
				t.Errorf("%s: last %v (%v ago), streak %d; want a recent success and no streak", name, s.Last, time.Since(s.Last), s.FailingStreak)
			}
			live, ready := probe(t, d)
			if !live.OK || !ready.OK {
				t.Errorf("%s: live %v, ready %v (%+v); want both", name, live.OK, ready.OK, ready.Components)
			}
		}
	})
}

func TestDriverStatus_StoppedIsNeitherLiveNorReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		d, err := outbox.NewDriver(r.config(&recorder{lane: "a"}))
		if err != nil {
			t.Fatal(err)
		}
		if live, _ := probe(t, d); live.OK {
			t.Error("a driver never started is live")
		}
		d, stop := r.startDriver(r.config(&recorder{lane: "a"}))
		synctest.Wait()
		if live, ready := probe(t, d); !live.OK || !ready.OK {
			t.Fatalf("running: live %v, ready %v", live.OK, ready.OK)
		}
		stop()
		live, ready := probe(t, d)
		if d.Status().Running || live.OK || ready.OK || live.Components[0].Reason != "not running" {
			t.Errorf("stopped: %+v, live %v, ready %v; want neither, for %q", d.Status(), live.OK, ready.OK, "not running")
		}
	})
}

// With the database gone the leader stays live (a restart would not bring
// the database back) and becomes unready once its next pass is overdue by
// the staleness bound.
func TestDriverStatus_DatabaseDownStaysLiveAndTurnsUnready(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		fs := &failingStore{OutboxStore: r.store}
		cfg := r.config(&recorder{lane: "a"})
		cfg.Store = fs
		d, _ := r.startDriver(cfg)
		synctest.Wait()
		last := d.Status().Last
		if last.IsZero() {
			t.Fatal("no pass reached the store")
		}
		fs.down.Store(true)
		time.Sleep(cfg.IdleDelay + health.DefaultStaleAfter - time.Second)
		synctest.Wait()
		if live, ready := probe(t, d); !live.OK || !ready.OK {
			t.Fatalf("within the bound: live %v, ready %v; want both", live.OK, ready.OK)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		s := d.Status()
		live, ready := probe(t, d)
		if !live.OK || ready.OK {
			t.Fatalf("past the bound: live %v, ready %v; want live and not ready", live.OK, ready.OK)
		}
		if !s.Last.Equal(last) || s.FailingStreak < 2 || s.LastError == "" || role(s).State != health.Leader {
			t.Errorf("status %+v; want the last success unchanged, a failing streak with its error, still leader", s)
		}
		fs.down.Store(false)
		time.Sleep(cfg.ErrorDelay)
		synctest.Wait()
		if _, ready := probe(t, d); !ready.OK || d.Status().FailingStreak != 0 {
			t.Errorf("after the database came back: ready %v, %+v", ready.OK, d.Status())
		}
	})
}

// A destination that keeps asking for retries is a failing streak, which
// the status reports; the instance still reaches its store, so it stays
// ready: the stuck notice, not the probe, is what tells.
func TestDriverStatus_FailingStreakIsReportedAndStaysReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		r.commit("a")
		rec := &recorder{lane: "a", answer: func(run []outbox.Entry) ([]outbox.Outcome, error) {
			return nil, errors.New("engine answered 503")
		}}
		cfg := r.config(rec)
		d, _ := r.startDriver(cfg)
		time.Sleep(5 * cfg.ErrorDelay)
		synctest.Wait()
		s := d.Status()
		if s.FailingStreak < 5 || s.FailingSince.IsZero() || s.LastError == "" {
			t.Errorf("status %+v; want a streak of at least 5 with its start and error", s)
		}
		if time.Since(s.Last) > time.Second {
			t.Errorf("last success %v ago; every pass reached the store", time.Since(s.Last))
		}
		if live, ready := probe(t, d); !live.OK || !ready.OK {
			t.Errorf("live %v, ready %v; want both", live.OK, ready.OK)
		}
	})
}
