package otelbaton

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/baton-go/baton/core/workrow"
)

// workRowHooks implements workrow.Hooks for one queue.
type workRowHooks struct {
	o *Observer
	// The measurement options, made once: the queue alone, with each
	// outcome, and with each operation that finds rows stale.
	queue                               metric.MeasurementOption
	completed, failed, parked, released metric.MeasurementOption
	staleFinalize, staleRenew           metric.MeasurementOption
}

func newWorkRowHooks(o *Observer, queue string) workRowHooks {
	with := func(kv ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append(kv, KeyQueue.String(queue))...))
	}
	return workRowHooks{o: o, queue: with(),
		completed: with(KeyOutcome.String(OutcomeCompleted)), failed: with(KeyOutcome.String(OutcomeFailed)),
		parked: with(KeyOutcome.String(OutcomeParked)), released: with(KeyOutcome.String(OutcomeReleased)),
		staleFinalize: with(KeyOperation.String(OperationFinalize)), staleRenew: with(KeyOperation.String(OperationRenew)),
	}
}

// Outcomes of a finalized work row, and the operations that find one stale.
const (
	OutcomeCompleted  = "completed"
	OutcomeFailed     = "failed"
	OutcomeParked     = "parked"
	OutcomeReleased   = "released"
	OperationFinalize = "finalize"
	OperationRenew    = "renew"
)

func (h workRowHooks) ClaimEnded(ctx context.Context, c workrow.Claim) {
	if c.Rows > 0 {
		h.o.claimed.Add(ctx, int64(c.Rows), h.queue)
	}
}

func (h workRowHooks) FinalizeEnded(ctx context.Context, f workrow.Finalize) {
	for _, c := range []struct {
		n   int
		opt metric.MeasurementOption
	}{{f.Completed, h.completed}, {f.Failed, h.failed}, {f.Parked, h.parked}, {f.Released, h.released}} {
		if c.n > 0 {
			h.o.finalized.Add(ctx, int64(c.n), c.opt)
		}
	}
	if f.Stale > 0 {
		h.o.stale.Add(ctx, int64(f.Stale), h.staleFinalize)
	}
}

func (h workRowHooks) RenewEnded(ctx context.Context, r workrow.Renew) {
	if r.Lost > 0 {
		h.o.stale.Add(ctx, int64(r.Lost), h.staleRenew)
	}
}
