package pgxstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/internal/testenv"
)

// These tests run the core lease Manager on the PostgreSQL store: a role
// changes hands after a graceful close, a frozen holder and a database
// outage, and no two instances ever hold one role at once. They log how
// long a role went without a holder, but bound only what a rule decides:
// IsHeld is a clock check, so when it must have turned false is checked
// exactly; when a successor gets round to taking over depends on the
// scheduler, so that gets a deadline long enough for a loaded machine and
// short enough to tell a working expiry or release from a missing one.

const (
	failoverLease  = 2 * time.Second
	failoverRenew  = 400 * time.Millisecond
	failoverMargin = 500 * time.Millisecond

	// failoverEventually is how long a first holder, a giving-up or a
	// successor may take, counted from the start, the freeze or the cut:
	// five leases, where a working expiry needs about one.
	failoverEventually = 5 * failoverLease
)

// chaosStore wraps a lease store so a test can freeze one instance's
// heartbeats, as a paused process or a stuck connection would.
type chaosStore struct {
	*LeaseStore
	mu           sync.Mutex
	stalledUntil time.Time
}

func (s *chaosStore) stall(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stalledUntil = time.Now().Add(d)
}

func (s *chaosStore) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	s.mu.Lock()
	until := s.stalledUntil
	s.mu.Unlock()
	if wait := time.Until(until); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	return s.LeaseStore.Heartbeat(ctx, req)
}

// poolVia opens a pool on the test's schema whose connections go through
// addr instead of straight to the server.
func poolVia(t *testing.T, env *testenv.PostgresEnv, addr string) *pgxpool.Pool {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return newPool(t, env, func(cfg *pgxpool.Config) {
		var p uint16
		fmt.Sscan(port, &p)
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, p
		cfg.ConnConfig.ConnectTimeout = time.Second
	})
}

func serverAddr(t *testing.T, env *testenv.PostgresEnv) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(env.URL)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port))
}

func startManager(t *testing.T, store lease.Store, id string, roles ...string) (*lease.Manager, []*lease.Lease) {
	t.Helper()
	return startManagerFor(t, store, id, failoverLease, roles...)
}

// startManagerFor is startManager with a LeaseDuration of its own.
func startManagerFor(t *testing.T, store lease.Store, id string, leaseFor time.Duration, roles ...string) (*lease.Manager, []*lease.Lease) {
	t.Helper()
	m, err := lease.NewManager(lease.Config{
		Store: store, InstanceID: id, Address: "http://" + id,
		LeaseDuration: leaseFor, RenewInterval: failoverRenew, HeldSafetyMargin: failoverMargin,
	})
	if err != nil {
		t.Fatal(err)
	}
	leases := make([]*lease.Lease, len(roles))
	for i, r := range roles {
		if leases[i], err = m.Register(r); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = m.Close(context.Background())
		<-done
	})
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, leases
}

// waitFor polls cond every millisecond and returns when it became true, or
// fails the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(time.Millisecond)
	}
}

// holders counts the leases that hold right now.
func holders(ls ...*lease.Lease) int {
	n := 0
	for _, l := range ls {
		if l.IsHeld() {
			n++
		}
	}
	return n
}

// TestLeaseFailover_GracefulCloseHandsOverBeforeTheTermRunsOut: the lease
// here lasts 20 s, so a successor within half of it can only come from the
// released row, never from expiry.
func TestLeaseFailover_GracefulCloseHandsOverBeforeTheTermRunsOut(t *testing.T) {
	env := testenv.Postgres(t)
	mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
	const leaseFor = 20 * time.Second
	var ms []*lease.Manager
	var ls []*lease.Lease
	for i := range 3 {
		m, l := startManagerFor(t, mustLeaseStore(t, newPool(t, env, nil), LeaseStoreOptions{}), fmt.Sprintf("node-%d", i), leaseFor, "maintenance")
		ms, ls = append(ms, m), append(ls, l[0])
	}
	waitFor(t, failoverEventually, "a first holder", func() bool { return holders(ls...) == 1 })
	first := slices.IndexFunc(ls, (*lease.Lease).IsHeld)
	firstToken := ls[first].Token()

	closed := time.Now()
	if err := ms[first].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rest := slices.Delete(slices.Clone(ls), first, first+1)
	took := waitFor(t, leaseFor/2, "a successor after graceful Close", func() bool { return holders(rest...) == 1 }).Sub(closed)
	t.Logf("graceful handover: %v", took.Round(time.Microsecond))
	next := rest[slices.IndexFunc(rest, (*lease.Lease).IsHeld)]
	if next.Token() <= firstToken {
		t.Fatalf("successor token %d is not above %d", next.Token(), firstToken)
	}
}

// TestLeaseFailover_FrozenHolderIsReplacedOnceItsTermRunsOut: a holder
// that stops renewing, without closing, stops believing it holds before
// anyone else does, and is then replaced.
func TestLeaseFailover_FrozenHolderIsReplacedOnceItsTermRunsOut(t *testing.T) {
	env := testenv.Postgres(t)
	mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
	stores := make([]*chaosStore, 3)
	ls := make([]*lease.Lease, 3)
	for i := range stores {
		stores[i] = &chaosStore{LeaseStore: mustLeaseStore(t, newPool(t, env, nil), LeaseStoreOptions{})}
		_, l := startManager(t, stores[i], fmt.Sprintf("node-%d", i), "maintenance")
		ls[i] = l[0]
	}
	waitFor(t, failoverEventually, "a first holder", func() bool { return holders(ls...) == 1 })
	first := slices.IndexFunc(ls, (*lease.Lease).IsHeld)

	stores[first].stall(time.Hour) // alive, never releasing, never renewing
	frozen := time.Now()
	rest := slices.Delete(slices.Clone(ls), first, first+1)
	var overlap bool
	took := waitFor(t, failoverEventually, "a successor to a frozen holder", func() bool {
		if ls[first].IsHeld() && holders(rest...) > 0 {
			overlap = true
		}
		return holders(rest...) == 1
	}).Sub(frozen)
	if overlap {
		t.Fatal("the successor held while the frozen holder still believed it held")
	}
	if ls[first].IsHeld() {
		t.Fatal("the frozen holder still believes it holds")
	}
	t.Logf("frozen holder replaced after %v (LeaseDuration %v, RenewInterval %v)", took.Round(time.Millisecond), failoverLease, failoverRenew)
}

func TestLeaseFailover_UnreachableDatabaseFailsClosed(t *testing.T) {
	env := testenv.Postgres(t)
	mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
	proxy := testenv.NewFaultProxy(t, serverAddr(t, env))
	cutStore := mustLeaseStore(t, poolVia(t, env, proxy.Addr()), LeaseStoreOptions{})
	_, cut := startManager(t, cutStore, "cut", "maintenance")
	waitFor(t, failoverEventually, "the proxied instance holding", cut[0].IsHeld)
	_, others := startManager(t, mustLeaseStore(t, newPool(t, env, nil), LeaseStoreOptions{}), "other", "maintenance")

	time.Sleep(2 * failoverRenew) // a few renewals through the proxy
	proxy.SetMode(testenv.Reset)  // every connection reset, new ones refused
	severed := time.Now()

	// The last good renewal started before the cut, so IsHeld must answer
	// false to any call made later than LeaseDuration − HeldSafetyMargin
	// after it. Each call's time is read before the call: a late poll on a
	// loaded machine only reads a later time, never a false violation.
	failClosed := failoverLease - failoverMargin
	var overlap bool
	var heldTooLong time.Duration
	lostAt := waitFor(t, failoverEventually, "the cut-off holder giving up", func() bool {
		asked := time.Since(severed)
		held := cut[0].IsHeld()
		if held && asked > failClosed {
			heldTooLong = asked
		}
		if held && others[0].IsHeld() {
			overlap = true
		}
		return !held
	})
	if heldTooLong > 0 {
		t.Fatalf("IsHeld answered true %v after the cut, beyond LeaseDuration-HeldSafetyMargin (%v)", heldTooLong, failClosed)
	}
	gaveUp := lostAt.Sub(severed)
	if overlap {
		t.Fatal("another instance held while the cut-off one still did")
	}
	// Nobody holds until the database lets the row expire; then the other
	// instance takes over, and the cut-off one never comes back.
	tookOver := waitFor(t, failoverEventually, "the reachable instance taking over", func() bool {
		if cut[0].IsHeld() {
			overlap = true
		}
		return others[0].IsHeld()
	})
	if overlap {
		t.Fatal("the cut-off instance believed it held again")
	}
	t.Logf("database cut: holder gave up after %v, successor after %v, no holder for %v",
		gaveUp.Round(time.Millisecond), tookOver.Sub(severed).Round(time.Millisecond), tookOver.Sub(lostAt).Round(time.Millisecond))
}

// heldInterval is one stretch of time in which a lease reported IsHeld.
type heldInterval struct {
	lease      *lease.Lease
	who        string
	from, to   time.Duration // since the test's origin, one monotonic clock
	token      uint64
	tokenTwice bool // the token changed inside the stretch
}

// TestLeaseChurn_NoTwoHoldersEverAndTokensRise runs five instances over
// three roles for 20 s on one database while a chaos loop freezes their
// heartbeats for random spells, closes them, crashes them (freezes them
// for good) and starts replacements. A sampler records, on one monotonic
// clock, every stretch in which any lease reported IsHeld.
func TestLeaseChurn_NoTwoHoldersEverAndTokensRise(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 20 s")
	}
	// Mostly waiting on heartbeats, in a schema of its own: it runs beside
	// the other parallel tests of the package.
	t.Parallel()
	env := testenv.Postgres(t)
	mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
	roles := []string{"alpha", "beta", "gamma"}
	const (
		slots    = 5
		duration = 20 * time.Second
	)
	origin := time.Now()

	type instance struct {
		m      *lease.Manager
		store  *chaosStore
		pool   *pgxpool.Pool
		leases []*lease.Lease
		id     string
	}
	var (
		mu        sync.Mutex
		all       []*lease.Lease // every lease ever created, sampled to the end
		names     = map[*lease.Lease]string{}
		instances []*instance
		gen       int
	)
	spawn := func(slot int) *instance {
		mu.Lock()
		gen++
		id := fmt.Sprintf("slot%d-gen%d", slot, gen)
		mu.Unlock()
		// A process of its own: its own small pool (one connection for the
		// release watch, one for heartbeats and releases).
		pool := newPool(t, env, func(cfg *pgxpool.Config) { cfg.MaxConns = 2 })
		st := &chaosStore{LeaseStore: mustLeaseStore(t, pool, LeaseStoreOptions{})}
		m, ls := startManager(t, st, id, roles...)
		mu.Lock()
		defer mu.Unlock()
		all = append(all, ls...)
		for _, l := range ls {
			names[l] = id
		}
		inst := &instance{m: m, store: st, pool: pool, leases: ls, id: id}
		instances = append(instances, inst)
		return inst
	}
	current := make([]*instance, slots)
	for i := range slots {
		current[i] = spawn(i)
	}

	// The sampler.
	type open struct {
		from  time.Duration
		token uint64
		twice bool
	}
	stop := make(chan struct{})
	var intervals []heldInterval
	samplerDone := make(chan struct{})
	// who names a lease's instance; spawn writes names under mu while the
	// sampler runs.
	who := func(l *lease.Lease) string {
		mu.Lock()
		defer mu.Unlock()
		return names[l]
	}
	go func() {
		defer close(samplerDone)
		opened := map[*lease.Lease]*open{}
		last := map[*lease.Lease]time.Duration{}
		for {
			select {
			case <-stop:
				for l, o := range opened {
					intervals = append(intervals, heldInterval{l, who(l), o.from, last[l], o.token, o.twice})
				}
				return
			default:
			}
			mu.Lock()
			ls := slices.Clone(all)
			mu.Unlock()
			for _, l := range ls {
				now := time.Since(origin)
				held, tok := l.IsHeld(), l.Token()
				o := opened[l]
				switch {
				case held && o == nil:
					opened[l] = &open{from: now, token: tok}
				case held:
					if tok != o.token && tok != 0 {
						o.twice = true
					}
				case o != nil:
					intervals = append(intervals, heldInterval{l, who(l), o.from, last[l], o.token, o.twice})
					delete(opened, l)
				}
				if held {
					last[l] = now
				}
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()

	// The chaos loop.
	r := rand.New(rand.NewPCG(7, 11))
	var closes, crashes, stalls int
	for end := origin.Add(duration); time.Now().Before(end); {
		time.Sleep(time.Duration(100+r.IntN(400)) * time.Millisecond)
		slot := r.IntN(slots)
		inst := current[slot]
		switch x := r.IntN(10); {
		case x < 5: // a pause: heartbeats stall, sometimes past the lease
			stalls++
			inst.store.stall(time.Duration(200+r.IntN(2500)) * time.Millisecond)
		case x < 8: // a graceful restart
			closes++
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := inst.m.Close(ctx); err != nil {
				t.Errorf("Close %s: %v", inst.id, err)
			}
			cancel()
			inst.pool.Close()
			current[slot] = spawn(slot)
		default: // a crash: the process never heartbeats or releases again
			crashes++
			inst.store.stall(time.Hour)
			current[slot] = spawn(slot)
		}
	}
	close(stop)
	<-samplerDone

	perRole := map[string][]heldInterval{}
	for _, iv := range intervals {
		perRole[iv.lease.Role()] = append(perRole[iv.lease.Role()], iv)
	}
	total := 0
	for _, role := range roles {
		ivs := perRole[role]
		total += len(ivs)
		slices.SortFunc(ivs, func(a, b heldInterval) int { return int(a.from - b.from) })
		for i := 1; i < len(ivs); i++ {
			prev, cur := ivs[i-1], ivs[i]
			if cur.from <= prev.to && cur.lease != prev.lease {
				t.Errorf("%s: %s held %v–%v while %s held %v–%v", role, prev.who, prev.from, prev.to, cur.who, cur.from, cur.to)
			}
			switch {
			case cur.lease == prev.lease && cur.token < prev.token:
				t.Errorf("%s: %s's token went back from %d to %d", role, cur.who, prev.token, cur.token)
			case cur.lease != prev.lease && cur.token <= prev.token:
				t.Errorf("%s: %s got token %d after %s had %d", role, cur.who, cur.token, prev.who, prev.token)
			}
		}
		if len(ivs) < 3 {
			t.Errorf("%s: only %d held stretches; the churn did not exercise takeovers", role, len(ivs))
		}
	}
	t.Logf("%d held stretches over %d roles; %d stalls, %d graceful restarts, %d crashes; %d instances in all",
		total, len(roles), stalls, closes, crashes, len(instances))
}
