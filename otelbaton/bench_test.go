package otelbaton_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/otelbaton"
)

type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkRunHooks is what the hooks cost one run of one entry, within a
// pass, on the SDK: every span sampled and batched, every measurement
// aggregated; and with spans sampled at a tenth (parent-based), as a busy
// relay would be.
func BenchmarkRunHooks(b *testing.B) {
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled=all", sdktrace.AlwaysSample()}, {"sampled=0.1", sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))}} {
		b.Run(c.name, func(b *testing.B) {
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(c.sampler), sdktrace.WithBatcher(discard{}))
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			})
			obs, err := otelbaton.NewObserver(otelbaton.Options{MeterProvider: mp, TracerProvider: tp})
			if err != nil {
				b.Fatal(err)
			}
			h := obs.Outbox()
			run := []outbox.Entry{{Lane: "bench.0", ID: outbox.NewID()}}
			b.ReportAllocs()
			pass := 0
			ctx := context.Background()
			pctx := h.PassStarted(ctx, outbox.PassStart{})
			for b.Loop() {
				if pass++; pass%100 == 0 { // a pass of 100 runs
					h.PassEnded(pctx, outbox.PassEnd{Outcome: outbox.PassProgress, Scanned: 100, Delivered: 100})
					pctx = h.PassStarted(ctx, outbox.PassStart{})
				}
				rctx := h.RunStarted(pctx, outbox.RunStart{Lane: "bench.0", Entries: run})
				h.RunEnded(rctx, outbox.RunEnd{Lane: "bench.0", Entries: 1, Delivered: 1})
			}
		})
	}
}
