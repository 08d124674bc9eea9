package lease

import (
	"context"
	"time"

	"github.com/baton-go/baton/core/health"
)

// Hooks observe a Manager: every heartbeat, and every change of a role's
// term as this instance sees it. Config.Hooks nil costs nothing.
//
// The manager calls them synchronously from its heartbeat (and from
// releases): keep them quick and never block. They report; they never
// decide: gate each cycle of leader-only work on Lease.IsHeld, which turns
// false by itself, not on RoleChanged. Embed NopHooks to implement only
// some.
type Hooks interface {
	// HeartbeatEnded is called after every heartbeat's store call.
	HeartbeatEnded(ctx context.Context, h Heartbeat)
	// RoleChanged is called when a role is taken, renewed, lost or
	// released by this instance.
	RoleChanged(ctx context.Context, c RoleChange)
}

// NopHooks implements Hooks with methods that do nothing.
type NopHooks struct{}

// HeartbeatEnded implements Hooks.
func (NopHooks) HeartbeatEnded(context.Context, Heartbeat) {}

// RoleChanged implements Hooks.
func (NopHooks) RoleChanged(context.Context, RoleChange) {}

// Heartbeat describes one heartbeat.
type Heartbeat struct {
	// Roles is how many roles it carried.
	Roles int
	// Took is how long the store call took.
	Took time.Duration
	// Err is its failure, or nil.
	Err error
}

// Change is what happened to a role's term.
type Change string

// The changes of a role.
const (
	// Taken: a heartbeat began a term of this instance.
	Taken Change = "taken"
	// Renewed: a heartbeat renewed the term this instance held.
	Renewed Change = "renewed"
	// Lost: the term ended without a release: the store gave the role to
	// another instance, or no heartbeat renewed it in time and this
	// instance's trust ran out. A trust that runs out is reported at the
	// next heartbeat's end, within RenewInterval.
	Lost Change = "lost"
	// Released: this instance released its term (Close).
	Released Change = "released"
)

// RoleChange describes a change of one role.
type RoleChange struct {
	Role   string
	Change Change
	// Token is the term's fencing token.
	Token uint64
	// Holder is the role's holder as the store last answered ("" when
	// free or unknown).
	Holder string
}

// Status reports the manager's health: running from Run's start until it
// stopped (ctx ended or Close was called, and the roles were released), each registered role as leader (IsHeld) or standby, when the last
// heartbeat succeeded and when the next is due (it starts RenewInterval
// after the last one began, and has RenewInterval to answer), and the
// streak of failed heartbeats.
func (m *Manager) Status() health.Status {
	s := m.status.Status()
	for _, l := range m.reg.all() {
		r := health.Role{Name: l.role, State: health.Standby}
		if t := l.Token(); t != 0 {
			r.State, r.Token = health.Leader, t
		}
		s.Roles = append(s.Roles, r)
	}
	return s
}

// heartbeatEnded reports a heartbeat that began at began, to the health
// and the hook.
func (m *Manager) heartbeatEnded(ctx context.Context, roles int, began time.Time, err error) {
	now := time.Now()
	if err != nil {
		m.status.Failed(now, err.Error())
	} else {
		m.status.Reached(now, began.Add(2*m.cfg.RenewInterval))
	}
	if h := m.cfg.Hooks; h != nil {
		h.HeartbeatEnded(ctx, Heartbeat{Roles: roles, Took: now.Sub(began), Err: err})
	}
}

// reportRole compares l's trust after a heartbeat with what was reported
// last, and reports the change. The caller holds the beat.
func (m *Manager) reportRole(ctx context.Context, l *Lease) {
	t := l.term.Load()
	held := l.trusted(t)
	was := l.reported
	l.reported = held
	h := m.cfg.Hooks
	if h == nil {
		return
	}
	c := RoleChange{Role: l.role, Holder: l.CurrentHolder()}
	switch {
	case held && !was:
		c.Change, c.Token = Taken, t.token
	case held:
		c.Change, c.Token = Renewed, t.token
	case was:
		c.Change = Lost
	default:
		return
	}
	h.RoleChanged(ctx, c)
}

// reportRelease reports the end of l's term at its release. The caller
// holds the beat.
func (m *Manager) reportRelease(ctx context.Context, l *Lease, token uint64, released bool) {
	was := l.reported
	l.reported = false
	h := m.cfg.Hooks
	switch {
	case h == nil:
	case released:
		h.RoleChanged(ctx, RoleChange{Role: l.role, Change: Released, Token: token, Holder: m.cfg.InstanceID})
	case was:
		h.RoleChanged(ctx, RoleChange{Role: l.role, Change: Lost, Token: token, Holder: l.CurrentHolder()})
	}
}
