package otelbaton

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-go/baton/core/outbox"
)

// outboxHooks implements outbox.Hooks: a span per pass, a span per run,
// and the outbox's instruments.
type outboxHooks struct{ o *Observer }

var passOutcomes = func() map[outbox.PassOutcome]metric.MeasurementOption {
	m := map[outbox.PassOutcome]metric.MeasurementOption{}
	for _, oc := range []outbox.PassOutcome{outbox.PassIdle, outbox.PassProgress, outbox.PassRetry,
		outbox.PassFailed, outbox.PassDeposed, outbox.PassStopped} {
		m[oc] = metric.WithAttributeSet(attribute.NewSet(KeyOutcome.String(string(oc))))
	}
	return m
}()

func (h outboxHooks) PassStarted(ctx context.Context, p outbox.PassStart) context.Context {
	ctx, _ = h.o.tracer.Start(ctx, "outbox pass", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(KeyToken.Int64(int64(p.Token))))
	return ctx
}

func (h outboxHooks) PassEnded(ctx context.Context, p outbox.PassEnd) {
	o := h.o
	oc, ok := passOutcomes[p.Outcome]
	if !ok {
		oc = metric.WithAttributes(KeyOutcome.String(string(p.Outcome)))
	}
	o.passDuration.Record(ctx, p.Took.Seconds(), oc)
	o.passEntries.Record(ctx, int64(p.Scanned), oc)
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(KeyOutcome.String(string(p.Outcome)), KeyEntries.Int(p.Scanned),
		KeyDelivered.Int(p.Delivered), KeyParked.Int(p.Parked), KeyRetried.Int(p.Retried))
	if p.Outcome == outbox.PassFailed {
		span.SetStatus(codes.Error, p.Reason)
	}
	span.End()
}

func (h outboxHooks) RunStarted(ctx context.Context, r outbox.RunStart) context.Context {
	links := h.o.links(r.Entries)
	ctx, _ = h.o.tracer.Start(ctx, "deliver "+r.Lane, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(links...),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(MessagingSystem),
			semconv.MessagingOperationName("deliver"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(r.Lane),
			semconv.MessagingBatchMessageCount(len(r.Entries))))
	return ctx
}

func (h outboxHooks) RunEnded(ctx context.Context, r outbox.RunEnd) {
	o := h.o
	a := o.lane(r.Lane)
	if r.Delivered > 0 {
		o.sent.Add(ctx, int64(r.Delivered), a.deliver)
	}
	if r.Parked > 0 {
		o.parked.Add(ctx, int64(r.Parked), a.lane)
	}
	if r.Retried > 0 {
		o.retried.Add(ctx, int64(r.Retried), a.lane)
	}
	if r.Entries > r.Parked || r.Err != nil { // a processor ran: not a lane without one
		if r.Err != nil {
			o.runDuration.Record(ctx, r.Took.Seconds(), a.deliver, metric.WithAttributes(semconv.ErrorTypeKey.String(errorType(r.Err))))
		} else {
			o.runDuration.Record(ctx, r.Took.Seconds(), a.deliver)
		}
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(KeyDelivered.Int(r.Delivered), KeyParked.Int(r.Parked), KeyRetried.Int(r.Retried))
	switch {
	case r.Err != nil:
		span.RecordError(r.Err)
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(r.Err)))
		span.SetStatus(codes.Error, r.Err.Error())
	case r.Retried > 0:
		span.SetStatus(codes.Error, "retry: "+r.Reason)
	}
	span.End()
}

func (h outboxHooks) Stuck(ctx context.Context, n outbox.Notice) {
	h.o.stuck.Add(ctx, 1, h.o.lane(n.Lane).lane)
}

func (h outboxHooks) LeaderChanged(_ context.Context, c outbox.LeaderChange) {
	o := h.o
	o.setHeld(c.Lock, RoleKindLock, c.Leader)
	if !c.Leader {
		o.mu.Lock()
		delete(o.backlog, c.Lock) // a standby counts nothing
		o.mu.Unlock()
	}
}

func (h outboxHooks) BacklogSampled(_ context.Context, b outbox.Backlog) {
	o := h.o
	o.mu.Lock()
	defer o.mu.Unlock()
	o.backlog[b.Lock] = b
}
