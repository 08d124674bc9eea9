package otelbaton_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/otelbaton"
)

// enqueue writes one transaction of entries of lane, each with ctx, and
// returns their ids.
func (r *outboxRig) enqueue(ctx context.Context, lane string, n int) []outbox.ID {
	r.t.Helper()
	tx, err := r.store.Begin(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	ids := make([]outbox.ID, n)
	for i := range ids {
		ids[i] = outbox.NewID()
		if err := tx.Enqueue(ctx, ids[i], lane, []byte(`{}`)); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		r.t.Fatal(err)
	}
	return ids
}

// runSpan returns the one span of a run of lane.
func runSpan(t *testing.T, spans tracetest.SpanStubs, lane string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "deliver "+lane {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("spans %v; want one run of lane %s", names(spans), lane)
	}
	return found[0]
}

func linked(s tracetest.SpanStub) []string {
	var out []string
	for _, l := range s.Links {
		out = append(out, l.SpanContext.TraceID().String()+"/"+l.SpanContext.SpanID().String())
	}
	slices.Sort(out)
	return out
}

func spanRef(sc trace.SpanContext) string { return sc.TraceID().String() + "/" + sc.SpanID().String() }

// The run's span links to the span of every request that enqueued one of
// its entries, once per request, with the trace and span ids the entries
// carried.
func TestTrace_RunSpanLinksToTheProducersOfItsEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		producer := f.tp.Tracer("producer")
		var want []string
		for i := range 2 {
			ctx, span := producer.Start(context.Background(), fmt.Sprintf("request %d", i))
			r.enqueue(otelbaton.Inject(ctx), "a", 2) // two entries, one request: one link
			want = append(want, spanRef(span.SpanContext()))
			span.End()
		}
		r.enqueue(context.Background(), "a", 1) // no trace context: no link
		var delivered []outbox.Entry
		stop := r.run(r.config(proc("a", 0, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			delivered = append(delivered, run...)
			return every(len(run), outbox.Delivered()), nil
		})))
		synctest.Wait()
		stop()

		if len(delivered) != 5 {
			t.Fatalf("delivered %d entries, want 5", len(delivered))
		}
		if tc := delivered[0].TraceContext; !strings.HasPrefix(tc.TraceParent, "00-") || !strings.Contains(tc.TraceParent, strings.Split(want[0], "/")[0]) {
			t.Errorf("the first entry carries %+v, want the first request's traceparent", tc)
		}
		run := runSpan(t, f.spans.GetSpans(), "a")
		slices.Sort(want)
		if got := linked(run); !slices.Equal(got, want) {
			t.Errorf("the run's links %v, want one to each request %v", got, want)
		}
		if run.Status.Code != codes.Unset {
			t.Errorf("run status %+v", run.Status)
		}
	})
}

// Entries without a trace context, or with one that names no valid span,
// give the run no link and no error: a malformed stored context is
// ignored.
func TestTrace_EntriesWithoutAValidTraceContextGiveNoLink(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		// Storable, yet no span: W3C forbids an all-zero trace id.
		zero := outbox.WithTraceContext(context.Background(), outbox.TraceContext{
			TraceParent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01", TraceState: "k=v"})
		r.enqueue(zero, "a", 1)
		r.enqueue(context.Background(), "a", 1)
		n := 0
		stop := r.run(r.config(proc("a", 0, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			n += len(run)
			return every(len(run), outbox.Delivered()), nil
		})))
		synctest.Wait()
		stop()

		if n != 2 {
			t.Fatalf("delivered %d entries, want 2", n)
		}
		run := runSpan(t, f.spans.GetSpans(), "a")
		if len(run.Links) != 0 || run.Status.Code != codes.Unset {
			t.Errorf("run links %v, status %+v; want none and no error", linked(run), run.Status)
		}
	})
}

// Text a store holds that Enqueue never validated (written by hand, or by
// another tool) reaches the hook as it was: it must give no link, and no
// panic.
func TestTrace_MalformedStoredTraceContextsAreIgnored(t *testing.T) {
	f := newFixture(t)
	h := f.obs.Outbox()
	var run []outbox.Entry
	for _, text := range []string{
		"garbage", " ", "00-zz-yy-01 a=b", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\x00", strings.Repeat("0", 10000),
	} {
		run = append(run, outbox.Entry{ID: outbox.NewID(), Lane: "a", Payload: []byte(`{}`), TraceContext: outbox.DecodeTraceContext(text)})
	}
	good := outbox.DecodeTraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 not=valid=state,,")
	run = append(run, outbox.Entry{ID: outbox.NewID(), Lane: "a", Payload: []byte(`{}`), TraceContext: good})

	ctx := h.PassStarted(context.Background(), outbox.PassStart{})
	rctx := h.RunStarted(ctx, outbox.RunStart{Lane: "a", Entries: run})
	h.RunEnded(rctx, outbox.RunEnd{Lane: "a", Entries: len(run), Delivered: len(run)})
	h.PassEnded(ctx, outbox.PassEnd{Outcome: outbox.PassProgress, Scanned: len(run), Delivered: len(run)})

	span := runSpan(t, f.spans.GetSpans(), "a")
	// Only the last names a span; its tracestate does not parse, and is
	// dropped with nothing else.
	if got, want := linked(span), []string{"4bf92f3577b34da6a3ce929d0e0e4736/00f067aa0ba902b7"}; !slices.Equal(got, want) {
		t.Errorf("links %v, want only %v", got, want)
	}
}

func TestInject_CarriesTheSpanOfTheContextForEnqueue(t *testing.T) {
	f := newFixture(t)
	if ctx := otelbaton.Inject(context.Background()); ctx != context.Background() {
		t.Error("Inject without a span changed the context")
	}
	ctx, span := f.tp.Tracer("producer").Start(context.Background(), "request")
	defer span.End()
	tc, err := outbox.TraceContextFrom(otelbaton.Inject(ctx))
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if err != nil || tc.TraceParent != want || tc.TraceState != "" {
		t.Errorf("Inject carries %+v (%v), want traceparent %s", tc, err, want)
	}
	if got := otelbaton.TraceContext(ctx); got != tc {
		t.Errorf("TraceContext = %+v, want what Inject carries, %+v", got, tc)
	}
}

func TestInject_KeepsAStorableTraceStateAndDropsALongerOne(t *testing.T) {
	remote := func(state string) context.Context {
		ts, err := trace.ParseTraceState(state)
		if err != nil {
			t.Fatal(err)
		}
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
		return trace.ContextWithRemoteSpanContext(context.Background(), sc)
	}
	short := "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
	if tc := otelbaton.TraceContext(remote(short)); tc.TraceState != short || tc.TraceParent == "" {
		t.Errorf("TraceContext = %+v, want the tracestate %q kept", tc, short)
	}
	var members []string
	for i := range 32 {
		members = append(members, fmt.Sprintf("k%02d=%s", i, strings.Repeat("v", 20)))
	}
	long := strings.Join(members, ",")
	tc, err := outbox.TraceContextFrom(otelbaton.Inject(remote(long)))
	if err != nil || tc.TraceState != "" || tc.TraceParent != "00-01020300000000000000000000000000-0405060000000000-01" {
		t.Errorf("with a %d-byte tracestate Inject carries %+v (%v); want the traceparent alone", len(long), tc, err)
	}
}
