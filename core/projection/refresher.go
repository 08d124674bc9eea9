package projection

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults for RefresherConfig and SweeperConfig.
const (
	DefaultRefreshInterval = 5 * time.Minute
	DefaultRetryDelay      = 5 * time.Second
	DefaultSweepInterval   = time.Minute
)

// ErrRunning is returned by Run when the same Refresher or Sweeper is
// already running.
var ErrRunning = errors.New("baton/projection: already running")

// RefresherConfig configures a Refresher. Zero durations take the
// defaults; negative ones are errors.
type RefresherConfig struct {
	// Store holds the projections. Required.
	Store Store
	// Source fetches the grants. Required.
	Source Source
	// Subjects lists the subjects to refresh on the schedule: at the start
	// of Run, then Interval after each pass ends. nil means no schedule:
	// only Refresh calls and Signals trigger refreshes.
	Subjects func(ctx context.Context) ([]Subject, error)
	// Interval is the pause between scheduled passes (default
	// DefaultRefreshInterval). Set it only with Subjects.
	Interval time.Duration
	// Signals, if set, is read by Run: each subject received is refreshed
	// as if passed to Refresh. A closed channel is no longer read; Run goes
	// on.
	Signals <-chan Subject
	// RetryDelay is how long after a failed signalled refresh it is tried
	// again (default DefaultRetryDelay). A signal means the engine's
	// answer changed, so a failure is not left for the next scheduled
	// pass, which may not even include the subject. Failed scheduled
	// refreshes wait for the next pass.
	RetryDelay time.Duration
	// Logger receives a Warn record per failed refresh and Debug records
	// per pass. nil discards them.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults. Interval has one only with Subjects: without a schedule it
// stays 0.
func (o RefresherConfig) withDefaults() RefresherConfig {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RetryDelay == 0 {
		o.RetryDelay = DefaultRetryDelay
	}
	if o.Interval == 0 && o.Subjects != nil {
		o.Interval = DefaultRefreshInterval
	}
	return o
}

// validate checks options that have their defaults.
func (o RefresherConfig) validate() error {
	switch {
	case o.Store == nil:
		return invalid("RefresherConfig.Store", "is nil")
	case o.Source == nil:
		return invalid("RefresherConfig.Source", "is nil")
	case o.Interval < 0:
		return invalid("RefresherConfig.Interval", "is %v; it must be positive", o.Interval)
	case o.Interval > 0 && o.Subjects == nil:
		return invalid("RefresherConfig.Interval", "is %v but Subjects is nil; a schedule needs the subjects to refresh", o.Interval)
	case o.RetryDelay < 0:
		return invalid("RefresherConfig.RetryDelay", "is %v; it must be positive", o.RetryDelay)
	}
	return nil
}

// Refresher keeps projections fresh: it refreshes the listed subjects on a
// schedule, and single subjects on a signal (Refresh, or the Signals
// channel). Its one goroutine is the caller of Run, which owns it; nothing
// runs before Run or after it returns. Refreshes run one at a time, in the
// order asked; a signalled subject waits at most for the refresh in
// progress, also during a long scheduled pass.
type Refresher struct {
	opts    RefresherConfig
	running atomic.Bool
	wake    chan struct{} // capacity 1: "pending may be non-empty"

	mu      sync.Mutex
	pending []Subject // signalled, in arrival order, each once
	queued  map[Subject]bool
}

// NewRefresher validates cfg and returns a Refresher that has not started.
func NewRefresher(cfg RefresherConfig) (*Refresher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Refresher{opts: cfg, wake: make(chan struct{}, 1), queued: make(map[Subject]bool)}, nil
}

// Refresh asks for the subject to be refreshed by Run as soon as the
// refresh in progress, if any, is done. It never blocks; a subject already
// waiting is not queued twice. Asked before Run, it waits for Run. It
// fails only for an invalid subject.
func (r *Refresher) Refresh(subject Subject) error {
	if err := subject.Validate(); err != nil {
		return err
	}
	r.enqueue(subject)
	return nil
}

func (r *Refresher) enqueue(subject Subject) {
	r.mu.Lock()
	if !r.queued[subject] {
		r.queued[subject] = true
		r.pending = append(r.pending, subject)
	}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default: // already signalled; Run drains everything pending
	}
}

// next takes the oldest pending subject.
func (r *Refresher) next() (Subject, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) == 0 {
		return Subject{}, false
	}
	s := r.pending[0]
	r.pending[0] = Subject{}
	r.pending = r.pending[1:]
	delete(r.queued, s)
	return s, true
}

// Run refreshes until ctx ends, then returns nil. With Subjects
// set, the first scheduled pass starts at once. A refresh that fails is
// logged and does not stop Run. Run returns ErrRunning when the
// Refresher is already running.
func (r *Refresher) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer r.running.Store(false)

	var scheduled <-chan time.Time
	schedule := time.NewTimer(0)
	defer schedule.Stop()
	if r.opts.Subjects != nil {
		scheduled = schedule.C
	}
	retryTimer := time.NewTimer(r.opts.RetryDelay)
	retryTimer.Stop()
	defer retryTimer.Stop()
	run := &refresherRun{r: r, retry: make(map[Subject]bool)}
	signals := r.opts.Signals
	for {
		run.drain(ctx)
		if len(run.retry) > 0 && !run.retryArmed {
			retryTimer.Reset(r.opts.RetryDelay)
			run.retryArmed = true
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case s, ok := <-signals:
			if !ok {
				signals = nil
				continue
			}
			if err := r.Refresh(s); err != nil {
				r.opts.Logger.WarnContext(ctx, "baton: projection refresh signal ignored", "subject", s.String(), "err", err)
			}
		case <-retryTimer.C:
			run.retryArmed = false
			for s := range run.retry {
				r.enqueue(s)
			}
			clear(run.retry)
		case <-scheduled:
			run.pass(ctx)
			schedule.Reset(r.opts.Interval)
		}
	}
}

// refresherRun is the state of one Run, touched only by its goroutine.
type refresherRun struct {
	r          *Refresher
	retry      map[Subject]bool // failed signalled refreshes
	retryArmed bool
}

// drain refreshes every pending subject.
func (run *refresherRun) drain(ctx context.Context) {
	for ctx.Err() == nil {
		s, ok := run.r.next()
		if !ok {
			return
		}
		if err := run.refresh(ctx, s); err != nil && ctx.Err() == nil {
			run.retry[s] = true
		}
	}
}

// pass refreshes every subject the schedule lists, handling signals between
// subjects.
func (run *refresherRun) pass(ctx context.Context) {
	log := run.r.opts.Logger
	subjects, err := run.r.opts.Subjects(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.WarnContext(ctx, "baton: listing the subjects to refresh failed", "err", err)
		}
		return
	}
	failed := 0
	for _, s := range subjects {
		if ctx.Err() != nil {
			return
		}
		if err := run.refresh(ctx, s); err != nil {
			failed++
		}
		run.drain(ctx)
	}
	log.DebugContext(ctx, "baton: projection refresh pass done", "subjects", len(subjects), "failed", failed)
}

func (run *refresherRun) refresh(ctx context.Context, s Subject) error {
	if err := s.Validate(); err != nil {
		run.r.opts.Logger.WarnContext(ctx, "baton: projection refresh skipped", "subject", s.String(), "err", err)
		return nil // no retry can fix it
	}
	gen, err := refresh(ctx, run.r.opts.Store, run.r.opts.Source, s)
	if errors.Is(err, ErrStale) {
		// Someone fresher won: the projection already holds a later
		// answer than this refresh fetched. Nothing to retry.
		run.r.opts.Logger.DebugContext(ctx, "baton: projection refresh overtaken by a fresher one", "subject", s.String())
		return nil
	}
	if err != nil {
		if ctx.Err() == nil {
			run.r.opts.Logger.WarnContext(ctx, "baton: projection refresh failed", "subject", s.String(), "err", err)
		}
		return err
	}
	run.r.opts.Logger.DebugContext(ctx, "baton: projection refreshed", "subject", s.String(), "generation", uint64(gen))
	return nil
}
