package projection

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// SweeperConfig configures a Sweeper. A zero Interval takes the default; a
// negative one is an error.
type SweeperConfig struct {
	// Store holds the projections. Required.
	Store Store
	// Interval is the pause between sweeps in Run (default
	// DefaultSweepInterval).
	Interval time.Duration
	// Logger receives an Info record per sweep that deleted something and
	// a Warn record per failed one. nil discards them.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o SweeperConfig) withDefaults() SweeperConfig {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Interval == 0 {
		o.Interval = DefaultSweepInterval
	}
	return o
}

// validate checks options that have their defaults.
func (o SweeperConfig) validate() error {
	switch {
	case o.Store == nil:
		return invalid("SweeperConfig.Store", "is nil")
	case o.Interval < 0:
		return invalid("SweeperConfig.Interval", "is %v; it must be positive", o.Interval)
	}
	return nil
}

// Sweeper deletes superseded generations. It deliberately takes no lock and
// elects no leader: a sweep deletes only what no reader can reach any more,
// running it on N nodes at once is the same as running it on one, and one
// that fails costs storage until the next, never correctness. Run it on
// every node.
//
// That is the opposite of the outbox's retention, which deletes at most a
// batch per pass and so runs under a lock: N unsynchronized retention
// loops would delete N batches per interval and break the bound. A sweep
// has no bound to keep; it converges.
type Sweeper struct {
	opts    SweeperConfig
	running atomic.Bool
}

// NewSweeper validates cfg and returns a Sweeper that has not started.
func NewSweeper(cfg SweeperConfig) (*Sweeper, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Sweeper{opts: cfg}, nil
}

// Sweep deletes every superseded generation now and returns how many it
// deleted.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	n, err := s.opts.Store.Sweep(ctx)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			s.opts.Logger.WarnContext(ctx, "baton: projection sweep failed", "err", err)
		}
	case n > 0:
		s.opts.Logger.InfoContext(ctx, "baton: projection sweep deleted superseded generations", "generations", n)
	}
	return n, err
}

// Run sweeps at once, then Interval after each sweep ends, until ctx ends;
// it returns nil then. A failed sweep is logged and does not stop
// Run. The caller's goroutine is the only one; Run returns ErrRunning when
// the Sweeper is already running.
func (s *Sweeper) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer s.running.Store(false)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		_, _ = s.Sweep(ctx)
		t.Reset(s.opts.Interval)
	}
}
