package demo

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/internal/cli"
)

// instanceCount is how many instances of the demo service run.
const instanceCount = 3

// Timings are the demo's durations. They are much shorter than the
// library's defaults so that a failover takes seconds, not a quarter of a
// minute; the header says so. A Coordination may adjust them to what its
// service grants.
type Timings struct {
	LeaseDuration    time.Duration
	RenewInterval    time.Duration
	HeldSafetyMargin time.Duration
	LockTTL          time.Duration // memory and Redis locks
	LockSafetyMargin time.Duration
	LockBackoff      lock.Backoff
	PingInterval     time.Duration // PostgreSQL advisory locks
	IdleDelay        time.Duration
	ErrorDelay       time.Duration
	LeaderWait       time.Duration
	StuckAfter       time.Duration
	RefreshInterval  time.Duration
	// Allowance is added to every failover bound for scheduling on a busy
	// machine; the bounds are otherwise the configured durations.
	Allowance time.Duration
	// Deadline bounds each wait of the scenario.
	Deadline time.Duration
}

// DefaultTimings are the timings of a demo run.
func DefaultTimings() Timings {
	return Timings{
		LeaseDuration:    2 * time.Second,
		RenewInterval:    400 * time.Millisecond,
		HeldSafetyMargin: 300 * time.Millisecond,
		LockTTL:          1500 * time.Millisecond,
		LockSafetyMargin: 300 * time.Millisecond,
		LockBackoff:      lock.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		PingInterval:     250 * time.Millisecond,
		IdleDelay:        outbox.DefaultIdleDelay, // the leader is woken by each commit; the poll is the fallback
		ErrorDelay:       200 * time.Millisecond,
		LeaderWait:       time.Second,
		StuckAfter:       time.Second,
		RefreshInterval:  250 * time.Millisecond,
		Allowance:        time.Second,
		Deadline:         30 * time.Second,
	}
}

// demoScale is how much traffic each step makes.
type demoScale struct {
	Creates      int           // step 2, per instance
	Updates      int           // step 2, per instance
	KillUpdates  int           // step 3, per instance
	KillAfter    int           // step 3: deliveries into the step before the kill
	BurstUpdates int           // step 4, per surviving instance
	Spacing      time.Duration // mean pause between a producer's transactions
}

func defaultScale() demoScale {
	return demoScale{Creates: 5, Updates: 20, KillUpdates: 100, KillAfter: 40, BurstUpdates: 3, Spacing: 12 * time.Millisecond}
}

// Config configure one run of the demo.
type Config struct {
	Postgres string // "" runs on the memory stores
	Redis    string // with Postgres: Redis locks instead of advisory locks
	Keep     bool   // keep the PostgreSQL schema
	// Coordination, if set, holds the instances' role leases, partitions
	// and locks instead of the memory or PostgreSQL stores, which keep the
	// outbox, the projections and the profiles. Not with Redis.
	Coordination Coordination
	Seed         uint64
	Timings      Timings
	Scale        demoScale
	Out          io.Writer // the narrative
	// Terminal is what Out can do: redraw the progress line in place, use
	// colour, and how wide it is. The zero value logs plain lines.
	Terminal cli.Terminal
	Logger   *slog.Logger
	// beforeVerify, for tests, runs after the scenario and before the
	// verification (to show the verification catches what it should).
	beforeVerify func(ctx context.Context, d *demo) error
}

// demoSubjects are the projection subjects of step 6.
var demoSubjects = []projection.Subject{{Type: "user", ID: "alice"}, {Type: "user", ID: "bob"}}

// Result is what the demo found, computed from what the fake engine
// received and what the stores hold.
type Result struct {
	Backend  string `json:"backend"`
	Schema   string `json:"schema,omitempty"`
	Seed     uint64 `json:"seed"`
	Passed   bool   `json:"passed"`
	Duration string `json:"duration"`

	Transactions struct {
		Committed  int `json:"committed"`
		RolledBack int `json:"rolled_back"`
		// InDoubt were cut off by the kill during their commit; each was
		// resolved by reading the store.
		InDoubt int `json:"in_doubt"`
	} `json:"transactions"`
	CommittedEntries  int            `json:"committed_entries"`
	RolledBackEntries int            `json:"rolled_back_entries"`
	Delivered         int            `json:"delivered"`
	DeliveredByLane   map[string]int `json:"delivered_by_lane"`
	// InOrder: the deliveries, deduplicated, are exactly the committed
	// entries (parked ones replaced by their requeued copies) sorted by
	// (xid, id).
	InOrder             bool `json:"in_order"`
	OrderViolations     int  `json:"order_violations"`
	Lost                int  `json:"lost"`
	Unexpected          int  `json:"unexpected"`
	RolledBackDelivered int  `json:"rolled_back_delivered"`
	Duplicates          int  `json:"duplicates"`
	Profiles            int  `json:"profiles"`
	InitAfterMetadata   int  `json:"init_after_metadata"`
	LabelMismatches     int  `json:"label_mismatches"`

	StuckNotices      int `json:"stuck_notices"`
	DeadLetterNotices int `json:"dead_letter_notices"`
	Parked            int `json:"parked"`
	Requeued          int `json:"requeued"`
	RequeuedDelivered int `json:"requeued_delivered"`

	PermissionChecks   int `json:"permission_checks"`
	PermissionFailures int `json:"permission_failures"`

	Failovers   []Failover `json:"failovers"`
	MaxFailover string     `json:"max_failover"`

	Checks []Check `json:"checks"`
}

// Failover is one takeover measured in step 3.
type Failover struct {
	What string `json:"what"`
	By   string `json:"by"`
	// Took is from the kill to the survivor holding it; Bound is what the
	// configuration allows.
	Took    time.Duration `json:"-"`
	Bound   time.Duration `json:"-"`
	TookMS  int64         `json:"took_ms"`
	BoundMS int64         `json:"bound_ms"`
	Why     string        `json:"bound_from"`
}

// Check is one line of the verification summary.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// demo is one run of the scenario.
type demo struct {
	opts  Config
	t     Timings
	scale demoScale

	ui      *ui
	logger  *slog.Logger
	backend demoBackend

	engine         *graphtest.Engine
	receiver       *noticeReceiver
	notify         outbox.Notify
	grantsSource   projection.Source
	board          *lockBoard
	reaper         *reaper
	proxyTransport *http.Transport
	hookTransport  *http.Transport
	client         *http.Client
	ledger         *ledger

	placed     atomic.Bool
	subjectsOn atomic.Bool
	insts      []*instance

	parkedIDs   map[outbox.ID]bool
	requeuedIDs map[outbox.ID]bool
	res         *Result
	// facts gathered along the way for the checks
	oneHolderBefore, oneHolderAfter string
}

// Run runs the scenario and returns its result. An error means the
// scenario could not run (or was interrupted); a run that completed returns
// its result, Passed or not.
func Run(ctx context.Context, opts Config) (*Result, error) {
	if opts.Timings == (Timings{}) {
		opts.Timings = DefaultTimings()
	}
	if opts.Coordination != nil {
		if opts.Redis != "" {
			return nil, cli.Usagef("Redis locks and a Coordination: the locks live in one place or the other")
		}
		opts.Timings = opts.Coordination.Timings(opts.Timings)
	}
	if opts.Scale == (demoScale{}) {
		opts.Scale = defaultScale()
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	d := &demo{
		opts: opts, t: opts.Timings, scale: opts.Scale,
		ui: newUI(opts.Out, opts.Terminal), logger: opts.Logger,
		board: newLockBoard(), reaper: newReaper(), ledger: newLedger(),
		parkedIDs: map[outbox.ID]bool{}, requeuedIDs: map[outbox.ID]bool{},
		res: &Result{Seed: opts.Seed},
	}
	coordinated := opts.Coordination != nil
	if opts.Postgres == "" {
		d.backend = newMemoryBackend(d.t, coordinated)
		d.res.Backend = "memory"
	} else {
		pb := newPostgresBackend(d.t, opts.Postgres, opts.Redis, opts.Keep, coordinated)
		d.backend = pb
		d.res.Backend = "postgres+pg-locks"
		if opts.Redis != "" {
			d.res.Backend = "postgres+redis-locks"
		}
		d.res.Schema = pb.schema
	}
	if coordinated {
		d.res.Backend = strings.TrimSuffix(d.res.Backend, "+pg-locks") + "+" + opts.Coordination.Name()
	}
	return d.run(ctx)
}

func (d *demo) run(ctx context.Context) (res *Result, err error) {
	start := time.Now()
	if err := d.backend.Check(ctx); err != nil {
		return nil, err
	}
	d.header()
	d.proxyTransport = newTransport()
	d.hookTransport = newTransport()
	d.client = &http.Client{Transport: newTransport(), Timeout: 10 * time.Second}
	if d.engine, err = graphtest.NewEngine(); err != nil {
		return nil, err
	}
	d.receiver = newNoticeReceiver()

	progressCtx, stopProgress := context.WithCancel(ctx)
	var progress sync.WaitGroup
	defer func() {
		stopProgress()
		progress.Wait()
		d.ui.done()
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, in := range d.insts {
			in.stop(cctx)
		}
		d.reaper.stop()
		d.engine.Close()
		d.receiver.close()
		for _, t := range []*http.Transport{d.proxyTransport, d.hookTransport, d.client.Transport.(*http.Transport)} {
			t.CloseIdleConnections()
		}
		if c := d.opts.Coordination; c != nil {
			if terr := c.Teardown(cctx); terr != nil {
				d.ui.textf("cleanup: %v\n", terr)
				if err == nil {
					err = terr
				}
			}
		}
		if terr := d.backend.Teardown(cctx); terr != nil {
			d.ui.textf("cleanup: %v\n", terr)
			if err == nil {
				err = terr
			}
		} else if pb, ok := d.backend.(*postgresBackend); ok && pb.created {
			if pb.keep {
				d.ui.textf("kept schema %s (--keep)\n", pb.schema)
			} else {
				d.ui.textf("dropped schema %s\n", pb.schema)
			}
		}
		if err != nil && ctx.Err() != nil {
			err = cli.ErrInterrupted
		}
	}()

	if err := d.backend.Setup(ctx); err != nil {
		return nil, err
	}
	if d.notify, err = graph.WebhookNotifier(d.receiver.url(), &http.Client{Transport: d.hookTransport}); err != nil {
		return nil, err
	}
	grants, err := graph.NewGrantsClient(graph.ClientOptions{BaseURL: d.engine.URL(), Client: d.engine.Client()})
	if err != nil {
		return nil, err
	}
	d.grantsSource = projection.SourceFunc(func(ctx context.Context, s projection.Subject) ([]projection.Grant, error) {
		gs, err := grants.Grants(ctx, s.Type, s.ID)
		if err != nil {
			return nil, err
		}
		out := make([]projection.Grant, len(gs))
		for i, g := range gs {
			out[i] = projection.Grant{ResourceType: g.ResourceType, ResourceID: g.ResourceID, Mask: projection.Mask(g.Mask)}
		}
		return out, nil
	})
	for i := range instanceCount {
		in, err := newInstance(ctx, d, i)
		if err != nil {
			return nil, err
		}
		d.insts = append(d.insts, in)
	}
	progress.Go(func() { d.progressLoop(progressCtx) })

	steps := []func(context.Context) error{d.stepHolders, d.stepTraffic, d.stepKill, d.stepBurst, d.stepPark, d.stepProjections}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, cli.ErrInterrupted
			}
			return nil, err
		}
	}
	// Stop the survivors together, so they do not hand their roles to
	// each other on the way out.
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	var stopping sync.WaitGroup
	for _, in := range d.alive() {
		stopping.Go(func() { in.stop(sctx) })
	}
	stopping.Wait()
	cancel()
	if f := d.opts.beforeVerify; f != nil {
		if err := f(ctx, d); err != nil {
			return nil, err
		}
	}
	if err := d.verify(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, cli.ErrInterrupted
		}
		return nil, err
	}
	d.res.Duration = cli.FormatDuration(time.Since(start))
	stopProgress()
	progress.Wait()
	d.ui.done()
	d.summary()
	return d.res, nil
}

// newTransport is an HTTP transport owned by the demo, closed at the end.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	return t
}

func (d *demo) header() {
	t := d.t
	lockTiming, lockDefault := "lock TTL "+t.LockTTL.String(), "3s"
	switch {
	case d.opts.Coordination != nil:
		lockTiming, lockDefault = d.opts.Coordination.LockTiming(t)
	case d.opts.Postgres != "" && d.opts.Redis == "":
		lockTiming, lockDefault = "lock session ping "+t.PingInterval.String(), "1s"
	case d.opts.Redis != "":
		lockDefault = "10s"
	}
	where := d.backend.Describe()
	if c := d.opts.Coordination; c != nil {
		where += ";\n            role leases, partitions and locks on " + c.Describe()
	}
	d.ui.textf(`baton demo: three instances of a small "profiles" service, in one process
  runs on   %s;
            the graph engine is the fake one from graph/graphtest
  instance  role lease %q · %d-way partition %q · outbox driver (lanes graph.init, graph.metadata)
            · producers (profile change + outbox entries in one transaction) · projection refresher
            and LocalReader · holder proxy and outbox admin API over HTTP
  timings   shortened for the demo: lease %s (renew %s), %s, outbox idle %s / error delay %s,
            stuck notice after %s (the defaults are 15s, 5s, %s, 5s / 30s, 2m)
  seed      %d

`, where, coordinatorRole, partitionCount, partitionName,
		t.LeaseDuration.String(), t.RenewInterval.String(), lockTiming,
		t.IdleDelay.String(), t.ErrorDelay.String(), t.StuckAfter.String(), lockDefault, d.opts.Seed)
}

// alive lists the instances still running.
func (d *demo) alive() []*instance {
	var out []*instance
	for _, in := range d.insts {
		if !in.dead.Load() {
			out = append(out, in)
		}
	}
	return out
}

// waitFor polls cond every few milliseconds until it holds, ctx ends or
// timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", cli.FormatDuration(timeout), what)
		}
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}
