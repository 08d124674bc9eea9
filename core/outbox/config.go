package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/internal/name"
	"github.com/baton-go/baton/core/lock"
)

// Defaults for Config.
const (
	DefaultBatchSize             = 100
	DefaultIdleDelay             = 5 * time.Second
	DefaultErrorDelay            = 30 * time.Second
	DefaultLeaderLockName        = "baton-outbox-driver"
	DefaultLeaderWait            = 30 * time.Second
	DefaultStuckAfter            = 2 * time.Minute
	DefaultStuckNoticeEvery      = 15 * time.Minute
	DefaultDeadLetterNoticeEvery = 15 * time.Minute
	DefaultRetentionWindow       = 7 * 24 * time.Hour
	DefaultRetentionInterval     = time.Hour
	DefaultRetentionBatchSize    = 1000
	DefaultRetentionBatchPause   = 100 * time.Millisecond
	DefaultRetentionSweepBudget  = 10 * time.Minute
	DefaultStoreTimeout          = time.Minute

	// RetentionLockSuffix makes the default RetentionLockName from the
	// LeaderLockName, so renaming the driver's lock renames retention's.
	RetentionLockSuffix = "-retention"

	// MaxBatchSize bounds BatchSize and RetentionBatchSize.
	MaxBatchSize = 100_000
)

// ErrInvalidConfig is returned (wrapped, naming the field) by NewDriver.
var ErrInvalidConfig = errors.New("baton/outbox: invalid config")

// Notify receives the outbox's notices. It is required: a parked entry or a
// stuck outbox that nobody hears about is silent data loss in slow motion.
type Notify func(ctx context.Context, n Notice) error

// Config configures a Driver. Zero durations and sizes take the defaults;
// negative ones are errors.
type Config struct {
	// Store is the outbox's tables. Required.
	Store Store
	// Locks provides the leader locks. Required.
	Locks lock.Provider
	// Processors deliver the lanes, one per lane. With none, the driver
	// does not scan at all (entries of an unknown lane would be parked) and
	// logs a warning every pass.
	Processors []Processor
	// Notify receives stuck and dead-letter notices. Required.
	Notify Notify
	// Log, when set, is the source the driver reads: the outbox table's
	// log (PostgreSQL logical decoding), in commit order and not held back
	// by transactions left open, instead of the (xid, id) walk of Store.
	// Store still serves the state, the dead letters and retention, and
	// the walk while the log takes over from it. nil walks the table.
	// docs/outbox.md, "Choosing a source", compares the two.
	Log LogStore

	// BatchSize is the most entries one pass reads, across every lane.
	BatchSize int
	// IdleDelay is the pause after a pass that found nothing new below the
	// horizon (or less than a full batch).
	IdleDelay time.Duration
	// ErrorDelay is the pause after a pass that ended in a retry or
	// failed, unless the retry asked for its own delay (RetryAfter).
	ErrorDelay time.Duration
	// LeaderLockName is the lock that makes one instance the driver.
	// Deployment-wide, not per lane.
	LeaderLockName string
	// LeaderWait is how long one attempt to become leader waits; standby
	// instances keep trying forever.
	LeaderWait time.Duration
	// PollOnly keeps the leader from listening for commits even when the
	// Store can wake it (Waker): it walks every IdleDelay only. Set it
	// where the store's connections cannot LISTEN, such as PgBouncer in
	// transaction pooling mode.
	PollOnly bool

	// StoreTimeout bounds every call the driver and its retention loop make
	// to Store and Log: a call that has not answered by then is given up on
	// and fails its pass, as an error would, so the failing streak counts
	// it and the stuck notice comes after StuckAfter. Without a bound, a
	// call on a connection whose packets are dropped blocks until the
	// operating system's TCP timeout, many minutes later, and nothing is
	// noticed meanwhile. A log Read is bounded by its wait for entries
	// (IdleDelay) plus StoreTimeout. Keep it above the longest a healthy
	// call takes, the adapter's own bounds included (pgxstore's
	// SlotCreateTimeout, 30 s, inside the log's Open). The leader lock is
	// not a store call: its provider keeps its own time (lock.Lock.Trusted).
	StoreTimeout time.Duration

	// StuckAfter is how long a failing streak lasts before a stuck notice.
	StuckAfter time.Duration
	// StuckNoticeEvery throttles stuck notices.
	StuckNoticeEvery time.Duration
	// DeadLetterNoticeEvery throttles dead-letter notices.
	DeadLetterNoticeEvery time.Duration

	// RetentionWindow is how long delivered entries and requeued dead
	// letters stay readable.
	RetentionWindow time.Duration
	// RetentionInterval is the pause between retention sweeps.
	RetentionInterval time.Duration
	// RetentionBatchSize bounds the rows one delete statement of a sweep
	// removes. A sweep repeats the statement until it is caught up (a
	// batch finds fewer) or RetentionSweepBudget is spent.
	RetentionBatchSize int
	// RetentionBatchPause is the pause between two batches of a sweep, so
	// a sweep working off a backlog leaves the database room for the rest.
	RetentionBatchPause time.Duration
	// RetentionSweepBudget bounds how long one sweep goes on; the next
	// sweep, RetentionInterval later, continues where it stopped. Every
	// sweep runs at least one batch per table.
	RetentionSweepBudget time.Duration
	// RetentionDisabled turns the retention loop off.
	RetentionDisabled bool
	// RetentionLockName is retention's own lock. It must differ from
	// LeaderLockName: the driver holds that one continuously, so retention
	// would never get it. Default: LeaderLockName + RetentionLockSuffix.
	RetentionLockName string

	// Logger receives warnings (parked entries, no processors, failures).
	// nil discards.
	Logger *slog.Logger

	// Hooks observe the driver (passes, runs, leadership, stuck notices,
	// the backlog); nil observes nothing and costs nothing. otelbaton
	// implements them with OpenTelemetry.
	Hooks Hooks
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c Config) withDefaults() Config {
	for _, f := range []struct {
		v   *int
		def int
	}{
		{&c.BatchSize, DefaultBatchSize},
		{&c.RetentionBatchSize, DefaultRetentionBatchSize},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range c.durations() {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.LeaderLockName == "" {
		c.LeaderLockName = DefaultLeaderLockName
	}
	if c.RetentionLockName == "" {
		c.RetentionLockName = c.LeaderLockName + RetentionLockSuffix
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// durations lists c's duration fields with their names and defaults.
func (c *Config) durations() []durationField {
	return []durationField{
		{"IdleDelay", &c.IdleDelay, DefaultIdleDelay},
		{"ErrorDelay", &c.ErrorDelay, DefaultErrorDelay},
		{"LeaderWait", &c.LeaderWait, DefaultLeaderWait},
		{"StuckAfter", &c.StuckAfter, DefaultStuckAfter},
		{"StuckNoticeEvery", &c.StuckNoticeEvery, DefaultStuckNoticeEvery},
		{"DeadLetterNoticeEvery", &c.DeadLetterNoticeEvery, DefaultDeadLetterNoticeEvery},
		{"RetentionWindow", &c.RetentionWindow, DefaultRetentionWindow},
		{"RetentionInterval", &c.RetentionInterval, DefaultRetentionInterval},
		{"RetentionBatchPause", &c.RetentionBatchPause, DefaultRetentionBatchPause},
		{"RetentionSweepBudget", &c.RetentionSweepBudget, DefaultRetentionSweepBudget},
		{"StoreTimeout", &c.StoreTimeout, DefaultStoreTimeout},
	}
}

type durationField struct {
	name string
	v    *time.Duration
	def  time.Duration
}

// validate checks a Config that has its defaults.
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return config.Invalid(ErrInvalidConfig, field, format, args...)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"BatchSize", c.BatchSize}, {"RetentionBatchSize", c.RetentionBatchSize}} {
		if f.v < 1 || f.v > MaxBatchSize {
			return bad(f.name, "is %d; it must be between 1 and %d", f.v, MaxBatchSize)
		}
	}
	for _, f := range c.durations() {
		if *f.v < 0 {
			return bad(f.name, "is %v; it must be positive", *f.v)
		}
	}
	switch {
	case c.Store == nil:
		return bad("Store", "is nil")
	case c.Locks == nil:
		return bad("Locks", "is nil; the driver needs a lock.Provider for its leader lock")
	case c.Notify == nil:
		return bad("Notify", "is nil; stuck and dead-letter notices must go somewhere")
	case c.RetentionLockName == c.LeaderLockName:
		return bad("RetentionLockName", "equals LeaderLockName (%q); the driver holds that lock continuously, so retention would never run", c.LeaderLockName)
	}
	for _, f := range []struct{ field, v string }{{"LeaderLockName", c.LeaderLockName}, {"RetentionLockName", c.RetentionLockName}} {
		if err := lock.ValidateName(f.v); err != nil {
			return config.Wrap(ErrInvalidConfig, f.field, err)
		}
	}
	seen := map[string]bool{}
	for i, p := range c.Processors {
		field := fmt.Sprintf("Processors[%d]", i)
		if p == nil {
			return bad(field, "is nil")
		}
		lane := p.Lane()
		if prob := name.Problem(lane, MaxLaneLength); prob != "" {
			return config.Wrap(ErrInvalidConfig, field+": lane", errors.New(prob))
		}
		if seen[lane] {
			return config.Wrap(ErrInvalidConfig, field, fmt.Errorf("lane %q has two processors", lane))
		}
		seen[lane] = true
	}
	return nil
}
