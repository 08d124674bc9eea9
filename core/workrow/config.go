package workrow

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/baton-go/baton/core/config"
)

// Defaults for Config.
const (
	// DefaultLease is well above one batch's worth of calls to a slow
	// remote side, so a batch rarely needs a renewal at all.
	DefaultLease = 2 * time.Minute
	// DefaultBatchSize suits handlers that call a remote side; no-op or
	// local handlers go faster with 100.
	DefaultBatchSize = 20
	// DefaultIdleDelay is the pause after a claim that found nothing.
	DefaultIdleDelay = time.Second
	// DefaultErrorDelay is the pause after a claim or finalize failed.
	DefaultErrorDelay = 5 * time.Second
	// DefaultFlushInterval bounds how long a finished row waits to be
	// finalized together with the rest of its batch.
	DefaultFlushInterval = 500 * time.Millisecond
	// DefaultStoreTimeout bounds one finalize, renew or release call.
	DefaultStoreTimeout = 10 * time.Second
	// DefaultConcurrency runs one handler at a time, in queue order.
	DefaultConcurrency = 1
	// MaxConcurrency bounds Config.Concurrency; each handler is a
	// goroutine of its own.
	MaxConcurrency = 10_000
	// MaxClaimsInFlight bounds the claims one Run has in flight at once.
	// A Run whose hand holds several batches (Concurrency at least twice
	// BatchSize) claims Concurrency/BatchSize batches at once, up to this
	// many, while the queue is busy: one claim after another cannot feed
	// many fast handlers from small batches, since each claim is a commit.
	MaxClaimsInFlight = 4
)

// Handler does the work of one claimed row, with no transaction and no row
// lock held. Its ctx ends when Run's does, when a renewal finds the row
// taken by another worker (cause ErrNotOwned) or when the lease runs out
// unrenewed (cause ErrLeaseExpired); context.Cause tells which. A panic
// counts as Fail.
type Handler[K comparable, R any] func(ctx context.Context, row Claimed[K, R]) Outcome

// Config configures a Worker. Zero durations and sizes take the defaults.
type Config[K comparable, R any] struct {
	// Store is the work table. Required.
	Store Store[K, R]
	// Handler does the work. Required.
	Handler Handler[K, R]

	// Eligible is the claim predicate (ClaimSpec.Eligible). Required. Use
	// Now for the claim's time: Gt("expires_at", Now).
	Eligible Cond
	// Order is the queue order (ClaimSpec.Order).
	Order []Order
	// OnClaim are sets applied at claim, typically Add("attempts", 1).
	OnClaim []Set
	// Attempt reads a claimed row's attempt count, including the current
	// attempt (so, after OnClaim counted it). Required: the backoff and
	// MaxAttempts depend on it.
	Attempt func(row R) int

	// OnComplete gives the sets that finish a row, for example
	// Assign("completed_at", now). Required: without them a completed row
	// would be claimed again.
	OnComplete func(now time.Time) []Set
	// OnFail gives the sets that record a failed attempt, for example
	// Assign("last_error", err.Error()). nil records nothing but the delay.
	OnFail func(now time.Time, err error) []Set
	// Backoff delays a failed row (default Exponential{}).
	Backoff Backoff
	// MaxAttempts parks a row whose attempt-th attempt failed when
	// attempt ≥ MaxAttempts, and parks without calling the handler a row
	// claimed with more attempts than that (its earlier attempts died
	// with their workers). 0 never parks. Requires OnPark.
	MaxAttempts int
	// OnPark gives the sets that take a row out of the queue for good, for
	// example Assign("parked_at", now). Required with MaxAttempts.
	OnPark func(now time.Time, err error) []Set

	// BatchSize is the most rows per claim (default DefaultBatchSize, at
	// most MaxBatchSize).
	BatchSize int
	// Concurrency is how many handlers one Run (or RunBatch) runs at once
	// (default DefaultConcurrency). One claim loop feeds them: it keeps up
	// to max(Concurrency, BatchSize) rows in hand and claims the next batch
	// as soon as a whole batch fits (and few enough finished batches are
	// still being finalized: one beside a single claim). While the
	// queue is busy it has up to Concurrency/BatchSize claims in flight
	// (at least one, at most MaxClaimsInFlight). Rows start in queue
	// order, batch by batch (two batches claimed at once may start in
	// either order), but may finish out of order. For slow handlers keep
	// BatchSize at or below Concurrency, so that freed handlers find rows
	// waiting.
	Concurrency int
	// Lease is how long a claim or renewal holds the rows (default
	// DefaultLease).
	Lease time.Duration
	// RenewEvery is the pause between renewals of a batch still at work
	// (default Lease/3). It must be below Lease.
	RenewEvery time.Duration
	// FlushInterval: finished rows are finalized together, when the batch
	// ends or once the oldest has waited this long (default
	// DefaultFlushInterval).
	FlushInterval time.Duration
	// IdleDelay is the pause after a claim that found nothing (default
	// DefaultIdleDelay). A Run over a Store that can wake it (Waker)
	// claims again as soon as a signalled insert commits.
	IdleDelay time.Duration
	// PollOnly keeps Run from listening for signalled inserts even when
	// the Store can wake it (Waker): it claims every IdleDelay only. Set
	// it where the store's connections cannot LISTEN, such as PgBouncer in
	// transaction pooling mode.
	PollOnly bool
	// ErrorDelay is the pause after a failed claim or finalize (default
	// DefaultErrorDelay).
	ErrorDelay time.Duration
	// StoreTimeout bounds each finalize, renew and release call (default
	// DefaultStoreTimeout). These calls also run after Run's ctx ended, to
	// hand back the batch in progress.
	StoreTimeout time.Duration

	// Logger receives failures, lost rows and store errors. nil discards.
	Logger *slog.Logger

	// Hooks observe the claims, finalizes and renewals; nil observes
	// nothing and costs nothing. otelbaton implements them with
	// OpenTelemetry.
	Hooks Hooks
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c Config[K, R]) withDefaults() Config[K, R] {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.Lease / 3
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.IdleDelay == 0 {
		c.IdleDelay = DefaultIdleDelay
	}
	if c.ErrorDelay == 0 {
		c.ErrorDelay = DefaultErrorDelay
	}
	if c.StoreTimeout == 0 {
		c.StoreTimeout = DefaultStoreTimeout
	}
	if c.Backoff == nil {
		c.Backoff = Exponential{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks a Config that has its defaults.
func (c Config[K, R]) validate() error {
	bad := func(field, format string, args ...any) error {
		return config.Invalid(ErrInvalidConfig, field, format, args...)
	}
	switch {
	case c.Store == nil:
		return bad("Store", "is nil")
	case c.Handler == nil:
		return bad("Handler", "is nil")
	case c.Eligible.IsZero():
		return bad("Eligible", "is empty; a claim must say which rows are due")
	case c.Attempt == nil:
		return bad("Attempt", "is nil; it must read the row's attempt count (counted at claim with OnClaim)")
	case c.OnComplete == nil:
		return bad("OnComplete", "is nil; without its sets a completed row would be claimed again")
	case c.BatchSize < 1 || c.BatchSize > MaxBatchSize:
		return bad("BatchSize", "is %d; it must be between 1 and %d", c.BatchSize, MaxBatchSize)
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return bad("Concurrency", "is %d; it must be between 1 and %d", c.Concurrency, MaxConcurrency)
	case c.Lease < 0:
		return bad("Lease", "is %v; it must be positive", c.Lease)
	case c.RenewEvery <= 0 || c.RenewEvery >= c.Lease:
		return bad("RenewEvery", "(%v) must be positive and below Lease (%v), or the lease runs out before it is renewed", c.RenewEvery, c.Lease)
	case c.FlushInterval < 0:
		return bad("FlushInterval", "is %v; it must not be negative", c.FlushInterval)
	case c.IdleDelay < 0:
		return bad("IdleDelay", "is %v; it must not be negative", c.IdleDelay)
	case c.ErrorDelay < 0:
		return bad("ErrorDelay", "is %v; it must not be negative", c.ErrorDelay)
	case c.StoreTimeout < 0:
		return bad("StoreTimeout", "is %v; it must be positive", c.StoreTimeout)
	case c.MaxAttempts < 0:
		return bad("MaxAttempts", "is %d; it must not be negative (0 never parks)", c.MaxAttempts)
	case c.MaxAttempts > 0 && c.OnPark == nil:
		return bad("MaxAttempts", "is %d but OnPark is nil; parking needs the sets that take a row out of the queue", c.MaxAttempts)
	}
	if v, ok := c.Backoff.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return config.Wrap(ErrInvalidConfig, "Backoff", err)
		}
	}
	// The claim spec a worker sends must be valid; check its parts now,
	// under the Config's field names.
	spec := ClaimSpec{LockID: LockID{1}, Now: time.Unix(1, 0), LeaseUntil: time.Unix(2, 0), BatchSize: 1,
		Eligible: c.Eligible, Order: c.Order, OnClaim: c.OnClaim}
	if err := spec.Validate(); err != nil {
		// The spec's message starts with the field's path: "Order[0]: …"
		// for a part's own error, "Eligible is empty…" for a sentence.
		msg := strings.ReplaceAll(strings.TrimPrefix(err.Error(), ErrInvalidSpec.Error()+": "), "ClaimSpec.", "")
		if field, why, ok := strings.Cut(msg, ": "); ok && !strings.Contains(field, " ") {
			return config.Wrap(ErrInvalidConfig, field, errors.New(why))
		}
		field, reason, _ := strings.Cut(msg, " ")
		return bad(field, "%s", reason)
	}
	return nil
}
