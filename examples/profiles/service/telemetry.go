package service

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/otelbaton"
)

// telemetry is what the service tells operators: baton's metrics on a
// Prometheus registry of the instance's own (served at /metrics, through
// OpenTelemetry's Prometheus exporter), its traces where Config.Traces
// says, and the probes (served at /healthz/).
type telemetry struct {
	obs      *otelbaton.Observer
	tracer   trace.TracerProvider
	metrics  http.Handler
	shutdown func(context.Context) error
}

func newTelemetry(instanceID string, traces io.Writer) (*telemetry, error) {
	res := resource.NewSchemaless(attribute.String("service.name", "profiles"), attribute.String("service.instance.id", instanceID))
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res))
	tel := &telemetry{metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), shutdown: mp.Shutdown}
	tel.tracer = noop.NewTracerProvider()
	if traces != nil {
		se, err := stdouttrace.New(stdouttrace.WithWriter(traces))
		if err != nil {
			return nil, fmt.Errorf("trace exporter: %w", err)
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(se), sdktrace.WithResource(res))
		tel.tracer = tp
		tel.shutdown = func(ctx context.Context) error { return joinErr(mp.Shutdown(ctx), tp.Shutdown(ctx)) }
	}
	tel.obs, err = otelbaton.NewObserver(otelbaton.Options{MeterProvider: mp, TracerProvider: tel.tracer, Instance: instanceID})
	if err != nil {
		return nil, err
	}
	return tel, nil
}

func joinErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// probes is the readiness and liveness handler over the instance's
// outbox driver and lease manager.
func probes(outbox, leases health.Reporter) (http.Handler, error) {
	return health.NewHandler(health.Config{Components: map[string]health.Reporter{"outbox": outbox, "leases": leases}})
}
