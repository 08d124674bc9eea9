package lease_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/lease"
)

// roleLog records what the hooks were told.
type roleLog struct {
	mu         sync.Mutex
	changes    []string
	heartbeats []lease.Heartbeat
}

func (r *roleLog) HeartbeatEnded(_ context.Context, h lease.Heartbeat) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.heartbeats = append(r.heartbeats, h)
}

func (r *roleLog) RoleChanged(_ context.Context, c lease.RoleChange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.changes); c.Change == lease.Renewed && n > 0 && r.changes[n-1] == c.Role+" renewed" {
		return // one line for a run of renewals
	}
	r.changes = append(r.changes, c.Role+" "+string(c.Change))
}

func (r *roleLog) snapshot() ([]string, []lease.Heartbeat) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes), slices.Clone(r.heartbeats)
}

func hookedManager(t *testing.T, store lease.Store, id string, h lease.Hooks) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(lease.Config{
		Store: store, InstanceID: id, LeaseDuration: testLease, RenewInterval: testRenew, HeldSafetyMargin: testMargin, Hooks: h,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m
}

// Taken, renewed, lost when the store is gone past the trust window,
// taken again, released at Close: each reported once, in that order.
func TestManagerHooks_ReportEveryChangeOfARolesTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		log := &roleLog{}
		m := hookedManager(t, store, "a", log)
		l := register(t, m, "maintenance")
		start(t, m)
		synctest.Wait()
		time.Sleep(3 * testRenew)
		synctest.Wait()
		store.cut("a", true)
		time.Sleep(testTrusted + testRenew)
		synctest.Wait()
		if l.IsHeld() {
			t.Fatal("still held with the store gone past the trust window")
		}
		store.cut("a", false)
		time.Sleep(testRenew)
		synctest.Wait()
		if err := m.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		changes, beats := log.snapshot()
		want := []string{"maintenance taken", "maintenance renewed", "maintenance lost", "maintenance taken", "maintenance released"}
		if !slices.Equal(changes, want) {
			t.Errorf("changes %q, want %q", changes, want)
		}
		failed := 0
		for _, h := range beats {
			if h.Roles != 1 {
				t.Errorf("heartbeat %+v carried %d roles, want 1", h, h.Roles)
			}
			if h.Err != nil {
				failed++
			}
		}
		if len(beats) < 8 || failed < 4 {
			t.Errorf("%d heartbeats, %d failed; want every one reported, the cut ones failed", len(beats), failed)
		}
	})
}

func TestManagerHooks_ASuccessorTakingTheRoleIsALoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		log := &roleLog{}
		a := hookedManager(t, store, "a", log)
		register(t, a, "r")
		start(t, a)
		synctest.Wait()
		// a's heartbeats hang; its lease runs out at the store, and b takes it.
		undo := store.hang("a")
		b := newManager(t, store, "b")
		register(t, b, "r")
		start(t, b)
		time.Sleep(testLease + testRenew)
		synctest.Wait()
		undo()
		time.Sleep(2 * testRenew)
		synctest.Wait()
		changes, _ := log.snapshot()
		if !slices.Equal(changes, []string{"r taken", "r renewed", "r lost"}) && !slices.Equal(changes, []string{"r taken", "r lost"}) {
			t.Errorf("changes %q, want taken, (renewed,) lost", changes)
		}
	})
}

func TestManagerStatus_LeaderStandbyStoppedAndTheStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a, b := newManager(t, store, "a"), newManager(t, store, "b")
		register(t, a, "r")
		register(t, b, "r")
		if a.Status().Running {
			t.Error("running before Run")
		}
		start(t, a)
		synctest.Wait()
		start(t, b)
		synctest.Wait()
		for id, c := range map[string]struct {
			m     *lease.Manager
			state string
		}{"a": {a, health.Leader}, "b": {b, health.Standby}} {
			s := c.m.Status()
			if !s.Running || len(s.Roles) != 1 || s.Roles[0].State != c.state || s.Last.IsZero() || s.FailingStreak != 0 {
				t.Errorf("%s: %+v, want running, %s, a heartbeat reached", id, s, c.state)
			}
		}
		store.cut("a", true)
		time.Sleep(testTrusted + testRenew)
		synctest.Wait()
		s := a.Status()
		if !s.Running || s.Roles[0].State != health.Standby || s.FailingStreak < 4 || s.LastError == "" {
			t.Errorf("store down: %+v, want running, standby, a streak of failures", s)
		}
		if next := s.Next; time.Since(next) < 0 {
			t.Errorf("store down: next heartbeat due %v, want overdue", next)
		}
		_ = a.Close(context.Background()) // its release cannot reach the store
		if a.Status().Running {
			t.Error("running after Close")
		}
	})
}
