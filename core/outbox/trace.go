package outbox

import (
	"context"
	"fmt"
	"strings"
)

// TraceContext is the W3C Trace Context (https://www.w3.org/TR/trace-context/)
// of the request that enqueued an entry: its traceparent and tracestate
// headers, as text. It travels with the entry, into its dead letter and into
// the entry a requeue makes of it, so that whatever delivers the entry can
// relate the delivery to that request (otelbaton links the delivery's span
// to it). The zero TraceContext is none. Core only validates and carries it;
// it knows nothing of any tracing library.
type TraceContext struct {
	// TraceParent is the traceparent header, e.g.
	// "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".
	TraceParent string
	// TraceState is the tracestate header, or "". It needs a TraceParent.
	TraceState string
}

// Bounds of a TraceContext, in bytes. A version 00 traceparent is 55 bytes;
// later versions may append fields, hence the room. The tracestate bound is
// the length W3C asks every vendor to propagate; a propagator may drop a
// longer one (otelbaton.Inject does).
const (
	MaxTraceParentLength = 128
	MaxTraceStateLength  = 512
)

// minTraceParentLength is the length of a version 00 traceparent, which
// every later version starts with.
const minTraceParentLength = 55

// IsZero reports whether tc is no trace context.
func (tc TraceContext) IsZero() bool { return tc == TraceContext{} }

// Encode is the text a store keeps for tc in one column: the traceparent,
// then, when there is a tracestate, one space and the tracestate; "" for
// the zero TraceContext (a store writes NULL). A traceparent holds no
// space, so DecodeTraceContext splits the text back unambiguously.
func (tc TraceContext) Encode() string {
	if tc.TraceState == "" {
		return tc.TraceParent
	}
	return tc.TraceParent + " " + tc.TraceState
}

// DecodeTraceContext is the inverse of Encode: "" is the zero TraceContext.
// It does not validate: text a store holds was validated by Enqueue, and
// a reader of trace contexts (a propagator) ignores what it cannot parse.
func DecodeTraceContext(s string) TraceContext {
	parent, state, _ := strings.Cut(s, " ")
	return TraceContext{TraceParent: parent, TraceState: state}
}

// ValidateTraceContext is the rule every adapter's Enqueue applies to the
// trace context it stores (TraceContextFrom applies it): none at all, or a
// traceparent of 55 to MaxTraceParentLength bytes made of lower-case hex
// digits and hyphens (W3C's alphabet for it), and a tracestate of at most
// MaxTraceStateLength bytes of printable ASCII (0x20 to 0x7E). A refused
// one is an error wrapping ErrInvalidEntry that says why.
func ValidateTraceContext(tc TraceContext) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: trace context: %s", ErrInvalidEntry, fmt.Sprintf(format, args...))
	}
	if tc.TraceParent == "" {
		if tc.TraceState != "" {
			return bad("a tracestate without a traceparent; W3C Trace Context needs the traceparent")
		}
		return nil
	}
	if n := len(tc.TraceParent); n < minTraceParentLength || n > MaxTraceParentLength {
		return bad("the traceparent is %d bytes; it must be %d to %d (outbox.MaxTraceParentLength)", n, minTraceParentLength, MaxTraceParentLength)
	}
	for i := 0; i < len(tc.TraceParent); i++ {
		if c := tc.TraceParent[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
			return bad("the traceparent has %q at byte %d; it holds only lower-case hex digits and hyphens", c, i)
		}
	}
	if n := len(tc.TraceState); n > MaxTraceStateLength {
		return bad("the tracestate is %d bytes; at most %d (outbox.MaxTraceStateLength) are kept", n, MaxTraceStateLength)
	}
	for i := 0; i < len(tc.TraceState); i++ {
		if c := tc.TraceState[i]; c < 0x20 || c > 0x7e {
			return bad("the tracestate has byte 0x%02x at %d; it holds only printable ASCII", c, i)
		}
	}
	return nil
}

// traceContextKey carries a TraceContext on a context.
type traceContextKey struct{}

// WithTraceContext returns a copy of ctx carrying tc: every adapter's
// Enqueue called with it stores tc with the entry it writes. A producer
// sets it once per request (otelbaton.Inject does, from the request's
// span) and enqueues with the context it gets back. The zero TraceContext
// removes one set before.
func WithTraceContext(ctx context.Context, tc TraceContext) context.Context {
	return context.WithValue(ctx, traceContextKey{}, tc)
}

// TraceContextFrom returns the trace context ctx carries (WithTraceContext),
// or the zero TraceContext. It is the rule every adapter's Enqueue applies:
// it stores what this returns with the entry, and a carried trace context
// that ValidateTraceContext refuses is an error wrapping ErrInvalidEntry,
// returned before anything is written.
func TraceContextFrom(ctx context.Context) (TraceContext, error) {
	tc, _ := ctx.Value(traceContextKey{}).(TraceContext)
	if err := ValidateTraceContext(tc); err != nil {
		return TraceContext{}, err
	}
	return tc, nil
}
