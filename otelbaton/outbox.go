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

var passStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}

// passOutcomes are the measurement options of each outcome, made once.
var passOutcomes = func() map[outbox.PassOutcome][]metric.RecordOption {
	m := map[outbox.PassOutcome][]metric.RecordOption{}
	for _, oc := range []outbox.PassOutcome{outbox.PassIdle, outbox.PassProgress, outbox.PassRetry,
		outbox.PassFailed, outbox.PassDeposed, outbox.PassStopped} {
		m[oc] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(KeyOutcome.String(string(oc))))}
	}
	return m
}()

// passKey carries a pass's tally on its context.
type passKey struct{}

// passTally adds up a pass's runs per lane, so that the counters are
// added once per lane and pass rather than once per run: a run can be a
// single entry.
type passTally struct{ lanes []laneTally }

type laneTally struct {
	a                          *laneAttrs
	delivered, parked, retried int64
}

func (t *passTally) add(a *laneAttrs, r outbox.RunEnd) {
	i := 0
	for i < len(t.lanes) && t.lanes[i].a != a {
		i++
	}
	if i == len(t.lanes) {
		t.lanes = append(t.lanes, laneTally{a: a})
	}
	l := &t.lanes[i]
	l.delivered += int64(r.Delivered)
	l.parked += int64(r.Parked)
	l.retried += int64(r.Retried)
}

func (o *Observer) count(ctx context.Context, l laneTally) {
	if l.delivered > 0 {
		o.sent.Add(ctx, l.delivered, l.a.deliverAdd...)
	}
	if l.parked > 0 {
		o.parked.Add(ctx, l.parked, l.a.laneAdd...)
	}
	if l.retried > 0 {
		o.retried.Add(ctx, l.retried, l.a.laneAdd...)
	}
}

func (h outboxHooks) PassStarted(ctx context.Context, p outbox.PassStart) context.Context {
	ctx = context.WithValue(ctx, passKey{}, &passTally{})
	ctx, span := h.o.tracer.Start(ctx, "outbox pass", passStart...)
	if span.IsRecording() {
		span.SetAttributes(KeyToken.Int64(int64(p.Token)))
	}
	return ctx
}

func (h outboxHooks) PassEnded(ctx context.Context, p outbox.PassEnd) {
	o := h.o
	if t, ok := ctx.Value(passKey{}).(*passTally); ok {
		for _, l := range t.lanes {
			o.count(ctx, l)
		}
		t.lanes = nil
	}
	oc, ok := passOutcomes[p.Outcome]
	if !ok {
		oc = []metric.RecordOption{metric.WithAttributes(KeyOutcome.String(string(p.Outcome)))}
	}
	o.passDuration.Record(ctx, p.Took.Seconds(), oc...)
	o.passEntries.Record(ctx, int64(p.Scanned), oc...)
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

var runKind = trace.WithSpanKind(trace.SpanKindProducer)

var runStart = []trace.SpanStartOption{runKind}

// RunStarted starts the run's span, under a pass span that records: the
// runs of a pass are traced with it or not at all. A run can be a single
// entry, and the relay must not pay for spans nobody keeps. The span links
// to the span of each request that enqueued an entry of the run (the trace
// context the entry carries, Inject), given at the start so a sampler sees
// them. The attributes are set once the span records (a sampler deciding
// on start attributes sees none).
func (h outboxHooks) RunStarted(ctx context.Context, r outbox.RunStart) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	a := h.o.lane(r.Lane)
	opts := runStart
	if links := producerLinks(r.Entries); len(links) > 0 {
		opts = []trace.SpanStartOption{runKind, trace.WithLinks(links...)}
	}
	ctx, span := h.o.tracer.Start(ctx, a.spanName, opts...)
	if span.IsRecording() {
		span.SetAttributes(a.spanAttrs...)
	}
	return ctx
}

func (h outboxHooks) RunEnded(ctx context.Context, r outbox.RunEnd) {
	o := h.o
	a := o.lane(r.Lane)
	if t, ok := ctx.Value(passKey{}).(*passTally); ok {
		t.add(a, r)
	} else {
		o.count(ctx, laneTally{a: a, delivered: int64(r.Delivered), parked: int64(r.Parked), retried: int64(r.Retried)})
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.MessagingBatchMessageCount(r.Entries),
		KeyDelivered.Int(r.Delivered), KeyParked.Int(r.Parked), KeyRetried.Int(r.Retried))
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
	h.o.stuck.Add(ctx, 1, h.o.lane(n.Lane).laneAdd...)
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
