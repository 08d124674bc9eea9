package otelbaton

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-go/baton/core/outbox"
)

// w3c is the propagator of the trace contexts entries carry: W3C Trace
// Context, whatever the application's global propagator is, since that is
// the form outbox.TraceContext holds.
var w3c propagation.TraceContext

// Inject returns ctx carrying the W3C trace context of ctx's span for the
// outbox entries enqueued with it (outbox.WithTraceContext): every
// adapter's Enqueue stores it with the entry, and the span of the run that
// delivers the entry links to that span. A producer calls it once, on the
// request's context, before it enqueues:
//
//	ctx = otelbaton.Inject(ctx)
//	err := pgxstore.Enqueue(ctx, tx, outbox.NewID(), lane, payload)
//
// Without a valid span on ctx it returns ctx as it is. A tracestate longer
// than outbox.MaxTraceStateLength is left out (W3C lets a propagator drop
// it), so Inject never makes Enqueue refuse an entry.
func Inject(ctx context.Context) context.Context {
	tc := TraceContext(ctx)
	if tc.IsZero() {
		return ctx
	}
	return outbox.WithTraceContext(ctx, tc)
}

// TraceContext is the W3C trace context of ctx's span, as Inject carries
// it, or the zero outbox.TraceContext without a valid span.
func TraceContext(ctx context.Context) outbox.TraceContext {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return outbox.TraceContext{}
	}
	var c carrier
	w3c.Inject(ctx, &c)
	if outbox.ValidateTraceContext(c.tc) != nil {
		c.tc.TraceState = ""
		if outbox.ValidateTraceContext(c.tc) != nil { // not a traceparent this package can store
			return outbox.TraceContext{}
		}
	}
	return c.tc
}

// producerSpan is the span context an entry's trace context names, if it
// is a valid one: malformed text (written by hand, or by another tool) is
// no span, never an error.
func producerSpan(tc outbox.TraceContext) (trace.SpanContext, bool) {
	if tc.TraceParent == "" {
		return trace.SpanContext{}, false
	}
	c := carrier{tc: tc}
	sc := trace.SpanContextFromContext(w3c.Extract(context.Background(), &c))
	return sc, sc.IsValid()
}

// producerLinks are the links of a run's span: one to each producer span
// its entries name, once each (the entries of one request share one).
func producerLinks(run []outbox.Entry) []trace.Link {
	var links []trace.Link
next:
	for _, e := range run {
		sc, ok := producerSpan(e.TraceContext)
		if !ok {
			continue
		}
		for _, l := range links {
			if l.SpanContext.TraceID() == sc.TraceID() && l.SpanContext.SpanID() == sc.SpanID() {
				continue next
			}
		}
		links = append(links, trace.Link{SpanContext: sc})
	}
	return links
}

// carrier is an outbox.TraceContext as a propagation.TextMapCarrier.
type carrier struct{ tc outbox.TraceContext }

const (
	traceparentHeader = "traceparent"
	tracestateHeader  = "tracestate"
)

func (c *carrier) Get(key string) string {
	switch key {
	case traceparentHeader:
		return c.tc.TraceParent
	case tracestateHeader:
		return c.tc.TraceState
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case traceparentHeader:
		c.tc.TraceParent = value
	case tracestateHeader:
		c.tc.TraceState = value
	}
}

func (c *carrier) Keys() []string { return []string{traceparentHeader, tracestateHeader} }
