package otelbaton

import (
	"context"

	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
)

// leaseHooks implements lease.Hooks.
type leaseHooks struct{ o *Observer }

func (h leaseHooks) HeartbeatEnded(ctx context.Context, hb lease.Heartbeat) {
	o := h.o
	if hb.Err == nil {
		o.hbDuration.Record(ctx, hb.Took.Seconds())
		return
	}
	et := metric.WithAttributes(semconv.ErrorTypeKey.String(errorType(hb.Err)))
	o.hbDuration.Record(ctx, hb.Took.Seconds(), et)
	o.hbFailures.Add(ctx, 1, et)
}

func (h leaseHooks) RoleChanged(_ context.Context, c lease.RoleChange) {
	h.o.setHeld(c.Role, RoleKindLease, c.Change == lease.Taken || c.Change == lease.Renewed)
}

// lockHooks implements lock.Hooks.
type lockHooks struct{ o *Observer }

// Outcomes of an Acquire.
const (
	OutcomeAcquired    = "acquired"
	OutcomeNotAcquired = "not_acquired"
	OutcomeError       = "error"
)

func (h lockHooks) AcquireEnded(ctx context.Context, a lock.Acquire) {
	o := h.o
	outcome := OutcomeAcquired
	switch {
	case errorType(a.Err) == "not_acquired":
		outcome = OutcomeNotAcquired
	case a.Err != nil:
		outcome = OutcomeError
	default:
		o.setHeld(a.Name, RoleKindLock, true)
	}
	o.lockAcquire.Record(ctx, a.Took.Seconds(), metric.WithAttributes(KeyLock.String(a.Name), KeyOutcome.String(outcome)))
}

func (h lockHooks) LockEnded(e lock.End) {
	o := h.o
	o.setHeld(e.Name, RoleKindLock, false)
	if !e.Released {
		o.lockLost.Add(context.Background(), 1, metric.WithAttributes(KeyLock.String(e.Name)))
	}
}
