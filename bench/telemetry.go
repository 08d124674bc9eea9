package main

import (
	"context"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/baton-go/baton/internal/benchkit"
	"github.com/baton-go/baton/otelbaton"
)

// observedSettings says how the systems marked otelName are observed.
const observedSettings = "\"OpenTelemetry\": the same system with otelbaton's hooks on the OpenTelemetry SDK: every measurement aggregated, " +
	"the spans batched to an exporter that drops them, a tenth of the passes traced (parent-based sampling, as a busy relay would be), " +
	"or every one (\"every pass traced\"); its Cost ratio is what the hooks cost"

// Names of the observed systems.
const (
	otelName   = ", OpenTelemetry"
	tracedName = ", OpenTelemetry, every pass traced"
)

// Samplers of the observed systems: a tenth of the passes (a run's span
// follows its pass's), or all of them.
var (
	sampleTenth = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))
	sampleAll   = sdktrace.AlwaysSample()
)

// observed is baton observed the way a service would be: otelbaton's
// hooks on the OpenTelemetry SDK, the spans that sampler keeps handed to
// a batching processor (whose exporter drops them), every measurement
// aggregated (a reader that is never collected from).
func observed(sampler sdktrace.Sampler) (*benchkit.Observed, func(), error) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(discard{}))
	stop := func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	}
	obs, err := otelbaton.NewObserver(otelbaton.Options{MeterProvider: mp, TracerProvider: tp, Instance: "bench"})
	if err != nil {
		stop()
		return nil, nil, err
	}
	return &benchkit.Observed{Outbox: obs.Outbox(), WorkRow: obs.WorkRows(benchkit.WorkTable), Locks: obs.Locks}, stop, nil
}

// discard is a span exporter that drops what it gets.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }
