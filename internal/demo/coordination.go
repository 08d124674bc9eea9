package demo

import (
	"context"
	"errors"
	"time"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
)

// Coordination is where the instances keep their role leases, partitions
// and locks when that is not the backend's stores: a service of its own,
// such as an etcd cluster (backends/etcd runs the demo so). The outbox, the
// projections and the profiles stay with the backend, in the transactions
// that write them; only the wiring changes, as in a real deployment.
type Coordination interface {
	// Name is what Result.Backend says after the stores: "etcd".
	Name() string
	// Describe says what the leases and locks run on, for the header.
	Describe() string
	// Timings returns t adjusted to what the service grants (whole
	// seconds, a minimum TTL). It sends nothing.
	Timings(t Timings) Timings
	// LockTiming is the lock's timing for the header, and the library's
	// default for it.
	LockTiming(t Timings) (timing, libraryDefault string)
	// Instance connects one instance, with connections of its own as a
	// separate process would have.
	Instance(ctx context.Context, name string, t Timings) (*CoordinatedInstance, error)
	// KillStory says what a kill does to the instance's leases and locks.
	KillStory() string
	// RoleFailover and LockFailover are how long a crashed holder's role
	// lease and lock can keep the others out, and why, for the failover
	// bounds (the demo adds its allowance).
	RoleFailover(t Timings) (time.Duration, string)
	LockFailover(t Timings) (time.Duration, string)
	// Teardown removes what the instances left behind, after they stopped.
	Teardown(ctx context.Context) error
}

// CoordinatedInstance is one instance's view of a Coordination.
type CoordinatedInstance struct {
	Leases lease.Store
	Locks  lock.Provider
	// LockLapse is how long a lock the instance held stays held after it
	// crashed, where the provider cannot show that by itself (a provider
	// living in this process); 0 when the service ends it on its own.
	LockLapse time.Duration
	// Crash ends the instance's sessions the way a killed process would:
	// nothing is released or revoked; the service finds out by itself.
	Crash func(ctx context.Context) error
	// Close releases what the instance still holds and its connections,
	// after it stopped (after a Crash, only what is left to free locally).
	Close func()
}

// instanceDeps returns what the instance called name runs on: the
// backend's stores, with the coordination's leases and locks when there is
// one.
func (d *demo) instanceDeps(ctx context.Context, name string) (*instanceDeps, error) {
	deps, err := d.backend.Instance(ctx, name)
	if err != nil || d.opts.Coordination == nil {
		return deps, err
	}
	ci, err := d.opts.Coordination.Instance(ctx, name, d.t)
	if err != nil {
		deps.Close()
		return nil, err
	}
	crash, closeDeps := deps.Crash, deps.Close
	deps.Leases, deps.Locks, deps.LockLapse = ci.Leases, ci.Locks, ci.LockLapse
	deps.Crash = func(ctx context.Context) error {
		return errors.Join(ci.Crash(ctx), crash(ctx))
	}
	deps.Close = func() {
		ci.Close()
		closeDeps()
	}
	return deps, nil
}

// killStory says what a kill does to the instance's locks and sessions.
func (d *demo) killStory() string {
	story := d.backend.KillStory()
	if c := d.opts.Coordination; c != nil {
		if story != "" {
			story += "; "
		}
		story += c.KillStory()
	}
	return story
}

// failoverBounds are how long a crashed leader's lock and roles can keep
// the others out, and why, before the allowance.
func (d *demo) failoverBounds() (lockBound time.Duration, lockWhy string, roleBound time.Duration, roleWhy string) {
	if c := d.opts.Coordination; c != nil {
		lockBound, lockWhy = c.LockFailover(d.t)
		roleBound, roleWhy = c.RoleFailover(d.t)
		return
	}
	lockBound, lockWhy = d.backend.LockFailover()
	// The store frees an expired lease by its clock; the survivors find it
	// at their next heartbeat.
	roleBound = d.t.LeaseDuration + d.t.RenewInterval
	roleWhy = "lease " + d.t.LeaseDuration.String() + " + renew " + d.t.RenewInterval.String()
	return
}
