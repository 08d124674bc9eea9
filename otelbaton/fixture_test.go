package otelbaton_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	locksmemory "github.com/baton-go/baton/locks/memory"
	"github.com/baton-go/baton/otelbaton"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is an Observer over the SDK's in-memory reader and span
// exporter.
type fixture struct {
	t      *testing.T
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	obs    *otelbaton.Observer
}

const instance = "test-instance"

func newFixture(t *testing.T) *fixture {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	obs, err := otelbaton.NewObserver(otelbaton.Options{MeterProvider: mp, TracerProvider: tp, Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, reader: reader, spans: spans, tp: tp, obs: obs}
}

// metric collects and returns the named metric; ok is false when it has
// no data.
func (f *fixture) metric(name string) (metricdata.Metrics, bool) {
	f.t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(context.Background(), &rm); err != nil {
		f.t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelbaton.ScopeName {
			f.t.Errorf("scope %q, want %q", sm.Scope.Name, otelbaton.ScopeName)
		}
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// mustMetric is metric, failing without data, and checking the unit.
func (f *fixture) mustMetric(name, unit string) metricdata.Metrics {
	f.t.Helper()
	m, ok := f.metric(name)
	if !ok {
		f.t.Fatalf("no data for %s", name)
	}
	if m.Unit != unit {
		f.t.Errorf("%s: unit %q, want %q", name, m.Unit, unit)
	}
	return m
}

// attrs renders an attribute set as "k=v,k=v", sorted.
func attrs(s attribute.Set) string {
	var out []string
	for _, kv := range s.ToSlice() {
		out = append(out, string(kv.Key)+"="+kv.Value.Emit())
	}
	return join(out, ",") // a set is sorted by key
}

func join(ss []string, sep string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += sep
		}
		out += s
	}
	return out
}

// sums are a monotonic int64 counter's values by attribute set.
func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok || !s.IsMonotonic || s.Temporality != metricdata.CumulativeTemporality {
		t.Fatalf("%s is %T (monotonic %v), want a cumulative int64 counter", m.Name, m.Data, ok && s.IsMonotonic)
	}
	out := map[string]int64{}
	for _, dp := range s.DataPoints {
		out[attrs(dp.Attributes)] = dp.Value
	}
	return out
}

// gauges are an int64 gauge's values by attribute set.
func gauges(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	g, ok := m.Data.(metricdata.Gauge[int64])
	if !ok {
		t.Fatalf("%s is %T, want an int64 gauge", m.Name, m.Data)
	}
	out := map[string]int64{}
	for _, dp := range g.DataPoints {
		out[attrs(dp.Attributes)] = dp.Value
	}
	return out
}

// hist is one histogram series: count and sum.
type hist struct {
	Count uint64
	Sum   float64
}

func histograms[N int64 | float64](t *testing.T, m metricdata.Metrics) map[string]hist {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("%s is %T, want a histogram", m.Name, m.Data)
	}
	out := map[string]hist{}
	for _, dp := range h.DataPoints {
		out[attrs(dp.Attributes)] = hist{Count: dp.Count, Sum: float64(dp.Sum)}
	}
	return out
}

func sameMap[V comparable](t *testing.T, what string, got, want map[string]V) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
		return
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s: %v, want %v", what, got, want)
			return
		}
	}
}

// outboxRig is an outbox on the memory store with the observer's hooks.
type outboxRig struct {
	t     *testing.T
	f     *fixture
	store *memory.OutboxStore
	locks *locksmemory.Provider
}

func newOutboxRig(t *testing.T, f *fixture) *outboxRig {
	locks, err := locksmemory.NewProvider(locksmemory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &outboxRig{t: t, f: f, store: store, locks: locks}
}

// commit writes one transaction with an entry per lane given.
func (r *outboxRig) commit(lanes ...string) {
	r.t.Helper()
	ctx := context.Background()
	tx, err := r.store.Begin(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, lane := range lanes {
		if err := tx.Enqueue(ctx, outbox.NewID(), lane, []byte(`{}`)); err != nil {
			r.t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		r.t.Fatal(err)
	}
}

func (r *outboxRig) config(procs ...outbox.Processor) outbox.Config {
	return outbox.Config{
		Store: r.store, Locks: r.f.obs.Locks(r.locks), Processors: procs, Hooks: r.f.obs.Outbox(),
		Notify:    func(context.Context, outbox.Notice) error { return nil },
		BatchSize: 10, IdleDelay: 5 * time.Second, ErrorDelay: 30 * time.Second, LeaderWait: time.Second,
		RetentionDisabled: true,
	}
}

// run runs a driver until the returned func is called (or the test ends).
func (r *outboxRig) run(cfg outbox.Config) (stop func()) {
	r.t.Helper()
	d, err := outbox.NewDriver(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	r.t.Cleanup(stop)
	return stop
}

// proc answers every run with answer, after taking took.
func proc(lane string, took time.Duration, answer func(run []outbox.Entry) ([]outbox.Outcome, error)) outbox.Processor {
	return outbox.ProcessorFunc{LaneName: lane, Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
		time.Sleep(took)
		if answer == nil {
			return every(len(run), outbox.Delivered()), nil
		}
		return answer(run)
	}}
}

func every(n int, o outbox.Outcome) []outbox.Outcome {
	out := make([]outbox.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

var _ lock.Provider = (*locksmemory.Provider)(nil)
