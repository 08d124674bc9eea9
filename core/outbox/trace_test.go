package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

const (
	testTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	testTraceState  = "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"
)

func TestValidateTraceContext_AcceptsNoneAndW3CHeaders(t *testing.T) {
	for _, tc := range []outbox.TraceContext{
		{},
		{TraceParent: testTraceParent},
		{TraceParent: testTraceParent, TraceState: testTraceState},
		// A later version may append fields.
		{TraceParent: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-" + strings.Repeat("a", outbox.MaxTraceParentLength-59)},
		{TraceParent: testTraceParent, TraceState: strings.Repeat("k", outbox.MaxTraceStateLength)},
		{TraceParent: testTraceParent, TraceState: " !~"},
	} {
		if err := outbox.ValidateTraceContext(tc); err != nil {
			t.Errorf("ValidateTraceContext(%+v) = %v, want nil", tc, err)
		}
	}
}

func TestValidateTraceContext_RefusesWhatIsNotAW3CHeaderAsAnInvalidEntry(t *testing.T) {
	for _, c := range []struct {
		name string
		tc   outbox.TraceContext
		want string
	}{
		{"tracestate alone", outbox.TraceContext{TraceState: testTraceState}, "without a traceparent"},
		{"short traceparent", outbox.TraceContext{TraceParent: testTraceParent[:54]}, "54 bytes"},
		{"long traceparent", outbox.TraceContext{TraceParent: testTraceParent + "-" + strings.Repeat("a", outbox.MaxTraceParentLength-55)}, "129 bytes"},
		{"upper-case traceparent", outbox.TraceContext{TraceParent: strings.ToUpper(testTraceParent)}, "lower-case hex"},
		{"space in the traceparent", outbox.TraceContext{TraceParent: strings.Replace(testTraceParent, "-", " ", 1)}, "byte 2"},
		{"long tracestate", outbox.TraceContext{TraceParent: testTraceParent, TraceState: strings.Repeat("k", outbox.MaxTraceStateLength+1)}, "513 bytes"},
		{"newline in the tracestate", outbox.TraceContext{TraceParent: testTraceParent, TraceState: "a=b\nc=d"}, "0x0a"},
		{"NUL in the tracestate", outbox.TraceContext{TraceParent: testTraceParent, TraceState: "a=\x00"}, "0x00"},
		{"non-ASCII tracestate", outbox.TraceContext{TraceParent: testTraceParent, TraceState: "a=é"}, "printable ASCII"},
	} {
		err := outbox.ValidateTraceContext(c.tc)
		if !errors.Is(err, outbox.ErrInvalidEntry) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: ValidateTraceContext = %v, want an error wrapping ErrInvalidEntry saying %q", c.name, err, c.want)
		}
	}
}

func TestTraceContextFrom_ReturnsWhatTheContextCarriesOnceValidated(t *testing.T) {
	ctx := context.Background()
	if tc, err := outbox.TraceContextFrom(ctx); err != nil || !tc.IsZero() {
		t.Errorf("TraceContextFrom(no trace context) = %+v, %v; want the zero one", tc, err)
	}
	want := outbox.TraceContext{TraceParent: testTraceParent, TraceState: testTraceState}
	carrying := outbox.WithTraceContext(ctx, want)
	if tc, err := outbox.TraceContextFrom(carrying); err != nil || tc != want {
		t.Errorf("TraceContextFrom = %+v, %v; want %+v", tc, err, want)
	}
	if tc, err := outbox.TraceContextFrom(outbox.WithTraceContext(carrying, outbox.TraceContext{})); err != nil || !tc.IsZero() {
		t.Errorf("after WithTraceContext(zero): %+v, %v; want the zero one", tc, err)
	}
	bad := outbox.WithTraceContext(ctx, outbox.TraceContext{TraceParent: "garbage"})
	if tc, err := outbox.TraceContextFrom(bad); !errors.Is(err, outbox.ErrInvalidEntry) || !tc.IsZero() {
		t.Errorf("TraceContextFrom(invalid) = %+v, %v; want an error wrapping ErrInvalidEntry", tc, err)
	}
}

func TestTraceContextEncoding_RoundTripsEveryValidTraceContext(t *testing.T) {
	for _, tc := range []outbox.TraceContext{
		{},
		{TraceParent: testTraceParent},
		{TraceParent: testTraceParent, TraceState: testTraceState},
		{TraceParent: testTraceParent, TraceState: "  leading and trailing spaces  "},
	} {
		text := tc.Encode()
		if tc.IsZero() != (text == "") {
			t.Errorf("Encode(%+v) = %q; only the zero trace context encodes as empty", tc, text)
		}
		if back := outbox.DecodeTraceContext(text); back != tc {
			t.Errorf("DecodeTraceContext(Encode(%+v)) = %+v", tc, back)
		}
	}
	if got := (outbox.TraceContext{TraceParent: testTraceParent, TraceState: "a=b"}).Encode(); got != testTraceParent+" a=b" {
		t.Errorf("Encode = %q, want the traceparent, a space and the tracestate", got)
	}
}
