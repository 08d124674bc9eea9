package otelbaton_test

import (
	"context"
	"testing"
	"testing/synctest"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-go/baton/core/outbox"
)

func spanAttr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A span per pass, and a span per run as its child; the processor's own
// spans would be the run's children (Deliver gets the run's context).
func TestTrace_SpanPerPassAndPerRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		r := newOutboxRig(t, f)
		r.commit("a", "a", "b")
		var delivering trace.SpanContext
		calls := 0
		stop := r.run(r.config(outbox.ProcessorFunc{LaneName: "a", Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			delivering = trace.SpanContextFromContext(ctx)
			return every(len(run), outbox.Delivered()), nil
		}}, proc("b", 0, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			calls++
			if calls == 1 {
				return every(len(run), outbox.Retry("engine busy")), nil
			}
			return every(len(run), outbox.Delivered()), nil
		})))
		synctest.Wait()
		stop()

		spans := f.spans.GetSpans()
		var pass, runA, runB tracetest.SpanStub
		for _, s := range spans {
			switch {
			case s.Name == "outbox pass" && pass.Name == "":
				pass = s
			case s.Name == "deliver a" && runA.Name == "":
				runA = s
			case s.Name == "deliver b" && runB.Name == "":
				runB = s
			}
		}
		if pass.Name == "" || runA.Name == "" || runB.Name == "" {
			t.Fatalf("spans %v; want a pass and a run of each lane", names(spans))
		}
		if spanAttr(pass, "baton.outcome") != "retry" || spanAttr(pass, "baton.outbox.entries") != "3" ||
			spanAttr(pass, "baton.outbox.delivered") != "2" || spanAttr(pass, "baton.outbox.retried") != "1" {
			t.Errorf("pass span attributes %v", pass.Attributes)
		}
		for _, run := range []tracetest.SpanStub{runA, runB} {
			if run.Parent.SpanID() != pass.SpanContext.SpanID() || run.SpanKind != trace.SpanKindProducer {
				t.Errorf("%s: parent %v kind %v; want the pass span %v, producer", run.Name, run.Parent.SpanID(), run.SpanKind, pass.SpanContext.SpanID())
			}
		}
		if spanAttr(runA, "messaging.destination.name") != "a" || spanAttr(runA, "messaging.batch.message_count") != "2" ||
			spanAttr(runA, "messaging.system") != "baton" || spanAttr(runA, "messaging.operation.type") != "send" || runA.Status.Code != codes.Unset {
			t.Errorf("run a: %v, status %v", runA.Attributes, runA.Status)
		}
		if delivering.SpanID() != runA.SpanContext.SpanID() {
			t.Errorf("Deliver ran in span %v, want the run's %v", delivering.SpanID(), runA.SpanContext.SpanID())
		}
		if runB.Status.Code != codes.Error || runB.Status.Description != "retry: engine busy" {
			t.Errorf("run b status %+v, want an error for the retry", runB.Status)
		}
	})
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}
