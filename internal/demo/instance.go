package demo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/core/holder"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/graph"
)

// The demo service's roles.
const (
	coordinatorRole = "profiles-coordinator"
	partitionName   = "profiles"
	partitionCount  = 16
	instanceHeader  = "X-Baton-Demo-Instance"
)

// instance is one instance of the demo service, as one process of a real
// deployment would be: its own lease manager, outbox driver, projection
// refresher and reader, HTTP endpoint and producers, over its own
// connections to the shared stores.
type instance struct {
	d    *demo
	name string
	idx  int
	deps *instanceDeps

	mgr       *lease.Manager
	coord     *lease.Lease
	part      *lease.Partition
	driver    *outbox.Driver
	refresher *projection.Refresher
	local     *projection.LocalReader
	srv       *httptest.Server
	addr      string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	dead   atomic.Bool
	done   bool
}

func newInstance(ctx context.Context, d *demo, idx int) (*instance, error) {
	in := &instance{d: d, idx: idx, name: fmt.Sprintf("instance-%d", idx+1)}
	deps, err := d.instanceDeps(ctx, in.name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", in.name, err)
	}
	in.deps = deps
	if err := in.wire(); err != nil {
		if in.srv != nil {
			in.srv.Close()
		}
		deps.Close()
		return nil, fmt.Errorf("%s: %w", in.name, err)
	}
	return in, nil
}

func (in *instance) wire() error {
	d, t := in.d, in.d.t
	in.srv = httptest.NewUnstartedServer(nil)
	addr, err := holder.InstanceAddress(in.srv.Listener.Addr().String(), "")
	if err != nil {
		return err
	}
	in.addr = addr

	leases := &instanceLeases{inner: in.deps.Leases, in: in, placed: &d.placed, partition: partitionName, instances: instanceCount}
	in.mgr, err = lease.NewManager(lease.Config{
		Store:            leases,
		InstanceID:       in.name,
		Address:          addr,
		LeaseDuration:    t.LeaseDuration,
		RenewInterval:    t.RenewInterval,
		HeldSafetyMargin: t.HeldSafetyMargin,
		Logger:           d.logger.With("instance", in.name),
	})
	if err != nil {
		return err
	}
	if in.coord, err = in.mgr.Register(coordinatorRole); err != nil {
		return err
	}
	if in.part, err = in.mgr.RegisterPartition(partitionName, partitionCount); err != nil {
		return err
	}

	procs, err := graph.StandardProcessors(graph.ProcessorOptions{
		DeliveryURL: d.engine.URL(),
		Client:      d.engine.Client(),
		Timeout:     2 * time.Second,
		Logger:      d.logger.With("instance", in.name),
	})
	if err != nil {
		return err
	}
	locks := &instanceLocks{inner: in.deps.Locks, in: in, board: d.board, lapse: in.deps.LockLapse, reaper: d.reaper}
	in.driver, err = outbox.NewDriver(outbox.Config{
		Store:             in.deps.Outbox,
		Locks:             locks,
		Processors:        procs,
		Notify:            d.notify,
		IdleDelay:         t.IdleDelay,
		ErrorDelay:        t.ErrorDelay,
		LeaderWait:        t.LeaderWait,
		StuckAfter:        t.StuckAfter,
		LeaderLockName:    d.backend.LeaderLockName(),
		RetentionDisabled: true, // the verification reads every entry back
		Logger:            d.logger.With("instance", in.name),
	})
	if err != nil {
		return err
	}

	// Only the coordinator refreshes projections: the schedule lists the
	// subjects while this instance holds the role, and nothing otherwise.
	in.refresher, err = projection.NewRefresher(projection.RefresherConfig{
		Store:  in.deps.Projection,
		Source: d.grantsSource,
		Subjects: func(context.Context) ([]projection.Subject, error) {
			if !in.coord.IsHeld() || !d.subjectsOn.Load() {
				return nil, nil
			}
			return demoSubjects, nil
		},
		Interval: t.RefreshInterval,
		Logger:   d.logger.With("instance", in.name),
	})
	if err != nil {
		return err
	}
	if in.local, err = projection.NewLocalReader(in.deps.Projection); err != nil {
		return err
	}

	// The HTTP endpoint: profile requests run on their partition's holder
	// (the holder proxy forwards them there), and the outbox admin API.
	proxy, err := holder.PartitionProxy(in.mgr.Registry(), partitionName,
		func(r *http.Request) (string, bool) {
			id := r.PathValue("id")
			return id, id != ""
		},
		// The demo's instances all listen on 127.0.0.1: loopback must be
		// named to be a peer.
		holder.Config{Peers: []string{"127.0.0.1"}, Transport: d.proxyTransport, Self: addr, RetryAfter: time.Second,
			Logger: d.logger.With("instance", in.name)},
		"/profiles/")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /profiles/{id}", proxy(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(instanceHeader, in.name)
		fmt.Fprintf(w, "profile %s, served by %s\n", r.PathValue("id"), in.name)
	})))
	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", outbox.AdminHandler(in.deps.Outbox, d.logger)))
	in.srv.Config.Handler = mux
	return nil
}

// start runs the instance: HTTP endpoint, heartbeat, outbox driver and
// refresher. They stop when stop or kill is called, or parent ends.
func (in *instance) start(parent context.Context) error {
	in.ctx, in.cancel = context.WithCancel(parent)
	in.srv.Start()
	in.wg.Go(func() { _ = in.mgr.Run(in.ctx) })
	in.wg.Go(func() { _ = in.driver.Run(in.ctx) })
	in.wg.Go(func() { _ = in.refresher.Run(in.ctx) })
	return nil
}

// stop shuts the instance down gracefully: the driver releases its lock,
// the manager its leases, so the others take over at once.
func (in *instance) stop(ctx context.Context) {
	if in.done {
		return
	}
	in.done = true
	if in.cancel != nil {
		in.cancel()
	}
	in.wg.Wait()
	_ = in.mgr.Close(ctx)
	in.srv.Close()
	in.deps.Close()
}

// kill stops the instance abruptly, like a killed process: nothing is
// released. Its sessions end (PostgreSQL, Redis) or its lock lapses after
// the TTL (memory locks); its leases expire by the store's clock.
func (in *instance) kill(ctx context.Context) error {
	in.dead.Store(true)
	err := in.deps.Crash(ctx)
	in.stop(ctx) // releases are refused: the instance is down
	return err
}

// holds reports whether the instance is alive and holds the lease.
func (in *instance) holds(l *lease.Lease) bool { return !in.dead.Load() && l.IsHeld() }

// op is one business transaction of a producer.
type op struct {
	create   bool
	profile  string
	label    string
	rollback bool
}

// do runs one business transaction: the profile's row first, then its
// outbox entries, then commit, or rollback when op says so. The ledger
// records what was committed, rolled back or left in doubt.
func (in *instance) do(ctx context.Context, o op) error {
	rec := &txRecord{Instance: in.name, Profile: o.profile}
	tx, err := in.deps.Begin(ctx)
	if err != nil {
		return err
	}
	abort := func(err error) error {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		if len(rec.Entries) > 0 {
			rec.Outcome = txRolledBack
			in.d.ledger.add(rec)
		}
		return err
	}
	if o.create {
		err = tx.Create(ctx, o.profile, o.label)
	} else {
		err = tx.Update(ctx, o.profile, o.label)
	}
	if err != nil {
		return abort(err)
	}
	var next entryRecord
	enqueue := func(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
		if err := tx.Enqueue(ctx, id, lane, payload); err != nil {
			return err
		}
		next.ID, next.Lane = id, lane
		rec.Entries = append(rec.Entries, next)
		return nil
	}
	// The entries of one transaction are delivered in id order. Two
	// outbox.NewID calls within one millisecond come out in random order,
	// so the ids are made first and sorted: graph.init before graph.metadata.
	ids := []outbox.ID{outbox.NewID(), outbox.NewID()}
	slices.SortFunc(ids, outbox.ID.Compare)
	if o.create {
		next = entryRecord{Profile: o.profile}
		if err := graph.EnqueueInit(ctx, enqueue, ids[0], graph.InitPayload{
			ResourceType: "profile",
			ResourceID:   o.profile,
			Relations:    []graph.Relation{{Relation: "owner", SubjectType: "user", SubjectID: "alice"}},
			RequestedBy:  in.name,
		}); err != nil {
			return abort(err)
		}
	}
	next = entryRecord{Profile: o.profile, Label: o.label}
	if err := graph.EnqueueMetadata(ctx, enqueue, ids[1], graph.MetadataPayload{
		EntityType: "profile", EntityID: o.profile, Label: o.label,
	}); err != nil {
		return abort(err)
	}
	if rec.XID, err = tx.XID(ctx); err != nil {
		return abort(err)
	}
	if o.rollback {
		return abort(nil)
	}
	if err := tx.Commit(ctx); err != nil {
		// The commit may or may not have happened (the connection died
		// under it): the verification looks the entries up.
		rec.Outcome = txInDoubt
		in.d.ledger.add(rec)
		return err
	}
	rec.Outcome = txCommitted
	in.d.ledger.add(rec)
	if o.create {
		in.d.ledger.addProfile(o.profile)
	}
	return nil
}

// produce runs a producer: creates profiles of its own, then changes the
// labels of profiles picked at random among those committed so far, some
// of the changes rolled back. It stops early when the instance is killed.
func (in *instance) produce(ctx context.Context, rnd *rand.Rand, creates, updates int, spacing time.Duration) {
	for i := range creates + updates {
		if ctx.Err() != nil || in.dead.Load() {
			return
		}
		seq := in.d.ledger.nextSeq()
		o := op{label: fmt.Sprintf("%s #%d", labelNames[rnd.IntN(len(labelNames))], seq)}
		if i < creates {
			o.create = true
			o.profile = fmt.Sprintf("p%d-%02d", in.idx+1, in.d.ledger.nextProfileNumber(in.idx))
			o.rollback = rnd.IntN(12) == 0
		} else {
			profiles := in.d.ledger.profileList()
			if len(profiles) == 0 {
				continue
			}
			o.profile = profiles[rnd.IntN(len(profiles))]
			o.rollback = rnd.IntN(7) == 0
		}
		err := in.do(ctx, o)
		if err != nil && !errors.Is(err, errNoProfile) && ctx.Err() == nil && !in.dead.Load() {
			in.d.logger.Warn("demo: a producer transaction failed", "instance", in.name, "err", err)
		}
		jitter := time.Duration(rnd.Int64N(int64(spacing) + 1))
		if !sleepCtx(ctx, spacing/2+jitter) {
			return
		}
	}
}

var labelNames = []string{"Ada", "Grace", "Alan", "Edsger", "Barbara", "Donald", "Frances", "Ken", "Radia", "Leslie"}

// sleepCtx waits d or until ctx ends (false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
