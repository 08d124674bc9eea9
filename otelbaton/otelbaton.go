// Package otelbaton implements baton's hooks on the OpenTelemetry API:
// metrics for the outbox driver, the lease manager, the lock providers and
// the work-row workers, and traces of the outbox's passes and deliveries.
//
// It is a module of its own, so that OpenTelemetry enters the build only
// of the services that import it. Wire one Observer into each component:
//
//	obs, err := otelbaton.NewObserver(otelbaton.Options{Instance: instanceID})
//	locks = obs.Locks(locks)                       // lock.Provider
//	outbox.Config{..., Locks: locks, Hooks: obs.Outbox()}
//	lease.Config{..., Hooks: obs.Leases()}
//	workrow.Config[K, R]{..., Hooks: obs.WorkRows("emails")}
//
// A producer that enqueues with Inject(ctx) carries its request's trace
// context with the entries; the span of the run that delivers them links
// to the request's span.
//
// The instruments, their units and attributes are listed in
// docs/observability.md.
package otelbaton

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/semconv/v1.43.0/messagingconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/baton-go/baton/otelbaton"

// MessagingSystem is the messaging.system attribute of the outbox's
// deliveries.
const MessagingSystem = "baton"

// Attribute keys of baton's own (the others are OpenTelemetry's semantic
// conventions: messaging.*, error.type).
const (
	KeyOutcome   = attribute.Key("baton.outcome")
	KeyRole      = attribute.Key("baton.role")
	KeyRoleKind  = attribute.Key("baton.role.kind")
	KeyInstance  = attribute.Key("baton.instance")
	KeyLock      = attribute.Key("baton.lock")
	KeyQueue     = attribute.Key("baton.queue")
	KeyOperation = attribute.Key("baton.operation")
	KeyEntries   = attribute.Key("baton.outbox.entries")
	KeyDelivered = attribute.Key("baton.outbox.delivered")
	KeyParked    = attribute.Key("baton.outbox.parked")
	KeyRetried   = attribute.Key("baton.outbox.retried")
	KeyToken     = attribute.Key("baton.token")
)

// Role kinds of the baton.role.held gauge.
const (
	RoleKindLease = "lease"
	RoleKindLock  = "lock"
)

// Options configure an Observer. The zero value uses OpenTelemetry's
// global providers.
type Options struct {
	// MeterProvider makes the instruments; nil is otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans; nil is otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Instance names this process in baton.role.held (baton.instance):
	// normally lease.Config.InstanceID. Empty leaves the attribute out.
	Instance string
}

// Observer holds the instruments and implements every component's hooks.
// It is safe for concurrent use.
type Observer struct {
	tracer   trace.Tracer
	instance string

	sent         metric.Int64Counter
	parked       metric.Int64Counter
	retried      metric.Int64Counter
	passDuration metric.Float64Histogram
	passEntries  metric.Int64Histogram
	stuck        metric.Int64Counter
	hbDuration   metric.Float64Histogram
	hbFailures   metric.Int64Counter
	lockAcquire  metric.Float64Histogram
	lockLost     metric.Int64Counter
	claimed      metric.Int64Counter
	finalized    metric.Int64Counter
	stale        metric.Int64Counter

	lanes sync.Map // lane → *laneAttrs

	mu      sync.Mutex
	held    map[roleKey]bool
	backlog map[string]outbox.Backlog
}

type roleKey struct{ name, kind string }

// laneAttrs are what a lane's measurements and spans carry, made once:
// a run costs no allocation of its own for them.
type laneAttrs struct {
	deliver    metric.MeasurementOption // messaging.* of a delivery
	lane       metric.MeasurementOption // messaging.destination.name alone
	deliverAdd []metric.AddOption
	laneAdd    []metric.AddOption
	spanName   string
	spanAttrs  []attribute.KeyValue
}

// withDefaults returns a copy of opts with the global providers in place
// of nil ones.
func (opts Options) withDefaults() Options {
	if opts.MeterProvider == nil {
		opts.MeterProvider = otel.GetMeterProvider()
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = otel.GetTracerProvider()
	}
	return opts
}

// NewObserver makes the instruments. Its error is the meter's, refusing
// an instrument or the callback of the gauges.
func NewObserver(opts Options) (*Observer, error) {
	opts = opts.withDefaults()
	m := opts.MeterProvider.Meter(ScopeName)
	o := &Observer{
		tracer: opts.TracerProvider.Tracer(ScopeName), instance: opts.Instance,
		held: map[roleKey]bool{}, backlog: map[string]outbox.Backlog{},
	}
	sent, err := messagingconv.NewClientSentMessages(m,
		metric.WithDescription("Outbox entries delivered: a processor answered Delivered."))
	o.sent = sent.Inst()
	errs := []error{err}
	counter := func(dst *metric.Int64Counter, name, unit, desc string) {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		*dst, errs = c, append(errs, err)
	}
	seconds := func(dst *metric.Float64Histogram, name, desc string) {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		*dst, errs = h, append(errs, err)
	}
	counter(&o.parked, "baton.outbox.parked", "{entry}", "Outbox entries parked in the dead letters.")
	counter(&o.retried, "baton.outbox.retried", "{entry}", "Outbox entries of a run the walk stopped at, to deliver again.")
	seconds(&o.passDuration, "baton.outbox.pass.duration", "Duration of one pass of the outbox walk.")
	entries, err := m.Int64Histogram("baton.outbox.pass.entries", metric.WithUnit("{entry}"),
		metric.WithDescription("Entries one pass of the outbox walk scanned."),
		metric.WithExplicitBucketBoundaries(0, 1, 10, 50, 100, 500, 1000, 5000, 10000))
	o.passEntries, errs = entries, append(errs, err)
	counter(&o.stuck, "baton.outbox.stuck_notices", "{notice}", "Stuck notices raised: the one outbox signal to alert on.")
	seconds(&o.hbDuration, "baton.lease.heartbeat.duration", "Duration of one lease heartbeat's store call.")
	counter(&o.hbFailures, "baton.lease.heartbeat.failures", "{heartbeat}", "Lease heartbeats that failed.")
	seconds(&o.lockAcquire, "baton.lock.acquire.duration", "Duration of one Acquire, its wait included.")
	counter(&o.lockLost, "baton.lock.lost", "{lock}", "Locks lost while held: taken away, expired, connection gone.")
	counter(&o.claimed, "baton.workrow.claimed", "{row}", "Work rows claimed.")
	counter(&o.finalized, "baton.workrow.finalized", "{row}", "Work rows finalized, by outcome.")
	counter(&o.stale, "baton.workrow.stale", "{row}", "Work rows another claim had taken by the time of a finalize or renewal.")

	pending, err := m.Int64ObservableGauge("baton.outbox.pending", metric.WithUnit("{entry}"),
		metric.WithDescription("Outbox entries after the cursor, counted by the leader (capped, sampled at most every few seconds)."))
	errs = append(errs, err)
	dead, err := m.Int64ObservableGauge("baton.outbox.dead_letters", metric.WithUnit("{entry}"),
		metric.WithDescription("Dead letters not requeued, counted by the leader (capped, sampled at most every few seconds)."))
	errs = append(errs, err)
	held, err := m.Int64ObservableGauge("baton.role.held", metric.WithUnit("{role}"),
		metric.WithDescription("1 while this instance holds the role or lock, 0 while it stands by."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	_, err = m.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		o.mu.Lock()
		defer o.mu.Unlock()
		for lock, b := range o.backlog {
			set := metric.WithAttributes(KeyLock.String(lock))
			ob.ObserveInt64(pending, int64(b.Pending), set)
			ob.ObserveInt64(dead, int64(b.Dead), set)
		}
		for k, h := range o.held {
			v := int64(0)
			if h {
				v = 1
			}
			ob.ObserveInt64(held, v, metric.WithAttributes(o.roleAttrs(k)...))
		}
		return nil
	}, pending, dead, held)
	if err != nil {
		return nil, err
	}
	return o, nil
}

// durationBuckets suit store calls and deliveries: 1 ms to a minute.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

func (o *Observer) roleAttrs(k roleKey) []attribute.KeyValue {
	kv := []attribute.KeyValue{KeyRole.String(k.name), KeyRoleKind.String(k.kind)}
	if o.instance != "" {
		kv = append(kv, KeyInstance.String(o.instance))
	}
	return kv
}

// setHeld records whether this instance holds a role or lock.
func (o *Observer) setHeld(name, kind string, held bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held[roleKey{name, kind}] = held
}

func (o *Observer) lane(name string) *laneAttrs {
	if a, ok := o.lanes.Load(name); ok {
		return a.(*laneAttrs)
	}
	a := &laneAttrs{
		deliver: metric.WithAttributeSet(attribute.NewSet(
			semconv.MessagingSystemKey.String(MessagingSystem),
			semconv.MessagingOperationName("deliver"),
			semconv.MessagingDestinationName(name))),
		lane:     metric.WithAttributeSet(attribute.NewSet(semconv.MessagingDestinationName(name))),
		spanName: "deliver " + name,
		spanAttrs: []attribute.KeyValue{
			semconv.MessagingSystemKey.String(MessagingSystem),
			semconv.MessagingOperationName("deliver"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(name),
		},
	}
	a.deliverAdd, a.laneAdd = []metric.AddOption{a.deliver}, []metric.AddOption{a.lane}
	got, _ := o.lanes.LoadOrStore(name, a)
	return got.(*laneAttrs)
}

// errorType is a failure's low-cardinality error.type.
func errorType(err error) string {
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, outbox.ErrFenced):
		return "fenced"
	case errors.Is(err, lock.ErrNotAcquired):
		return "not_acquired"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// Outbox returns the outbox driver's hooks.
func (o *Observer) Outbox() outbox.Hooks { return outboxHooks{o} }

// Leases returns the lease manager's hooks.
func (o *Observer) Leases() lease.Hooks { return leaseHooks{o} }

// Locks returns p with its acquisitions and losses measured, and the
// locks it holds reported in baton.role.held.
func (o *Observer) Locks(p lock.Provider) lock.Provider { return lock.WithHooks(p, lockHooks{o}) }

// WorkRows returns a work-row worker's hooks, its measurements labelled
// with queue (baton.queue): the table, or the work's name.
func (o *Observer) WorkRows(queue string) workrow.Hooks {
	return newWorkRowHooks(o, queue)
}
