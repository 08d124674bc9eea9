// Package health is what baton's long-running parts say about themselves,
// and the HTTP handler that turns it into readiness and liveness probes.
//
// The outbox Driver, the lease Manager and the work-row Worker each report
// a Status: whether they run, which roles they lead or stand by for, when
// their last cycle reached the store and when the next one is due, and the
// failing streak they are in. Handler serves those reports as JSON:
//
//   - liveness is up while every component runs. It does not look at the
//     store: a database outage must not make the orchestrator restart every
//     instance at once, which would only add cold starts to the outage;
//   - readiness is up while every component runs and has reached its store
//     when it was due, give or take Config.StaleAfter. A standby is ready: it
//     reaches the store too (it asks for the lock), it only leads nothing.
//
// A failing streak is reported, not judged: a destination that refuses
// deliveries is the stuck notice's business, and would make every instance
// unready at once while the instances themselves are fine.
package health

import (
	"sync"
	"time"
)

// Role states.
const (
	Leader  = "leader"
	Standby = "standby"
)

// Role is one role (a role lease, or a leader lock) as this instance holds
// it, or does not.
type Role struct {
	Name string `json:"name"`
	// State is Leader or Standby.
	State string `json:"state"`
	// Token is the fencing token of the term held; 0 for a standby.
	Token uint64 `json:"token,omitempty"`
}

// Status is one component's report.
type Status struct {
	// Running is true from the component's start until it stopped.
	Running bool `json:"running"`
	// Roles are the roles the component leads or stands by for; none for a
	// component without roles (a work-row worker).
	Roles []Role `json:"roles,omitempty"`
	// Last is the end of the component's last cycle that reached its store:
	// a pass (or a standby's attempt at the lock), a heartbeat, a claim.
	// Zero before the first.
	Last time.Time `json:"last,omitzero"`
	// Next is when the cycle after Last is due to have reached the store,
	// as Last's cycle scheduled it. A component past Next by more than the
	// staleness bound is stale. Zero while nothing is due (not started).
	Next time.Time `json:"next,omitzero"`
	// FailingStreak counts the cycles in the current failing streak; 0 when
	// the last cycle succeeded. FailingSince is when the streak began, and
	// LastError the latest failure's reason.
	FailingStreak int       `json:"failing_streak"`
	FailingSince  time.Time `json:"failing_since,omitzero"`
	LastError     string    `json:"last_error,omitempty"`
}

// Reporter is a component that reports its Status.
type Reporter interface {
	Status() Status
}

// ReporterFunc adapts a function to Reporter.
type ReporterFunc func() Status

// Status implements Reporter.
func (f ReporterFunc) Status() Status { return f() }

// Tracker keeps a component's Status between its cycles; components embed
// one and update it as they go. It is safe for concurrent use; its zero
// value is a component that has not started.
type Tracker struct {
	mu      sync.Mutex
	running int
	s       Status
}

// Started records that one more loop of the component runs, its first
// cycle due to have reached the store by due.
func (t *Tracker) Started(due time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running++
	t.s.Next = due
}

// Stopped records that one of the component's loops stopped.
func (t *Tracker) Stopped() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running--
}

// Reached records a cycle that reached the store at now and succeeded,
// whose successor is due by next. It ends the failing streak.
func (t *Tracker) Reached(now, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s.Last, t.s.Next = now, next
	t.s.FailingStreak, t.s.FailingSince, t.s.LastError = 0, time.Time{}, ""
}

// Touched records a cycle that reached the store at now, due again by
// next, and leaves the failing streak as it is: a pass that reached the
// store and still failed, such as one a processor asked to retry.
func (t *Tracker) Touched(now, next time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s.Last, t.s.Next = now, next
}

// Failed records a failed cycle at now: the streak grows by one, or begins.
func (t *Tracker) Failed(now time.Time, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.s.FailingStreak == 0 {
		t.s.FailingSince = now
	}
	t.s.FailingStreak++
	t.s.LastError = reason
}

// Streak sets the failing streak as the component counts it itself.
func (t *Tracker) Streak(n int, since time.Time, reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s.FailingStreak, t.s.FailingSince, t.s.LastError = n, since, reason
	if n == 0 {
		t.s.FailingSince, t.s.LastError = time.Time{}, ""
	}
}

// SetRoles replaces the roles reported.
func (t *Tracker) SetRoles(roles ...Role) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s.Roles = roles
}

// Status returns a copy of the status kept.
func (t *Tracker) Status() Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.s
	s.Running = t.running > 0
	s.Roles = append([]Role(nil), t.s.Roles...)
	return s
}
