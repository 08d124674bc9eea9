package faults

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/postgres"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/internal/testenv"
)

// Lease timings of the scenarios: short, so a failover takes about two
// seconds, and in the proportions of the defaults.
const (
	faultLease  = 2 * time.Second
	faultRenew  = 500 * time.Millisecond
	faultMargin = 300 * time.Millisecond

	leaderRole     = "leader"
	partitionName  = "part"
	partitionCount = 16
	faultSchema    = "faults"
	samplePeriod   = 2 * time.Millisecond
)

// holderMain is a lease holder child: one manager with the leader role and
// a 16-way partition, sampling every lease every samplePeriod and reporting
// each change of belief. SIGTERM closes the manager gracefully.
func holderMain(args []string) int {
	fs := flag.NewFlagSet("holder", flag.ContinueOnError)
	url := fs.String("url", "", "PostgreSQL URL")
	name := fs.String("name", "", "child name and instance id")
	report := fs.String("report", "", "collector address")
	linger := fs.Duration("linger", 0, "negative control: keep believing held this long after IsHeld turned false")
	leaseFor := fs.Duration("lease", faultLease, "LeaseDuration")
	renew := fs.Duration("renew", faultRenew, "RenewInterval")
	margin := fs.Duration("margin", faultMargin, "HeldSafetyMargin")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	rep := dialReporter(*report, *name)
	defer rep.close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()

	pool, err := pgxpool.New(context.Background(), *url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	store, err := postgres.NewLeaseStore(pool, postgres.LeaseStoreOptions{Schema: faultSchema, Channel: "faults_leases"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	m, err := lease.NewManager(lease.Config{Store: store, InstanceID: *name, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		LeaseDuration: *leaseFor, RenewInterval: *renew, HeldSafetyMargin: *margin})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	leader, err := m.Register(leaderRole)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	part, err := m.RegisterPartition(partitionName, partitionCount)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	leases := []*lease.Lease{leader}
	for i := range part.Count() {
		leases = append(leases, part.Lease(i))
	}
	if err := m.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rep.send(event{Kind: kindReady})

	s := newSampler(rep, leases, *linger)
	tick := time.NewTicker(samplePeriod)
	defer tick.Stop()
	for ctx.Err() == nil {
		s.sample()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.Close(closeCtx)
	// A lingering holder goes on acting after it gave the roles up.
	for end := time.Now().Add(*linger); time.Now().Before(end); time.Sleep(samplePeriod) {
		s.sample()
	}
	s.sample()
	return 0
}

// sampler reports each change of what a child believes of its leases.
type sampler struct {
	rep    *reporter
	leases []*lease.Lease
	linger time.Duration
	state  []belief
}

type belief struct {
	held      bool
	token     uint64
	seen      int64 // last sample with this belief
	heldUntil int64 // last sample at which IsHeld was true
}

func newSampler(rep *reporter, leases []*lease.Lease, linger time.Duration) *sampler {
	return &sampler{rep: rep, leases: leases, linger: linger, state: make([]belief, len(leases))}
}

// sample reads every lease once. The clock is read before the lease: a
// lease that reports held at some moment after the reading was also held at
// the reading, so a pause between the two can only shorten what is
// reported, never invent an overlap.
func (s *sampler) sample() {
	for i, l := range s.leases {
		now := time.Now().UnixNano()
		token := l.Token()
		held := token != 0
		st := &s.state[i]
		if held {
			st.heldUntil = now
		} else if s.linger > 0 && st.held && now-st.heldUntil < int64(s.linger) {
			held, token = true, st.token // the misuse: acting on an old belief
		}
		if held != st.held || (held && token != st.token) {
			s.rep.send(event{Kind: kindBelief, Role: l.Role(), Held: held, Token: token, At: now, Since: st.seen})
			st.held, st.token = held, token
		}
		st.seen = now
	}
}

// leaseRoles is every role a holder registers.
func leaseRoles() []string {
	roles := []string{leaderRole}
	for i := range partitionCount {
		roles = append(roles, lease.PartitionRole(partitionName, i))
	}
	return roles
}

// holders runs holder children against one server and remembers when each
// was killed, for the intervals it could not close itself.
type holders struct {
	t    *testing.T
	pg   *testenv.PostgresServer
	col  *collector
	gone map[string]int64
}

func newHolders(t *testing.T, pg *testenv.PostgresServer) *holders {
	migrateSchema(t, pg.URL(), faultSchema)
	return &holders{t: t, pg: pg, col: newCollector(t), gone: map[string]int64{}}
}

// start starts a holder named name that reaches the server at url, with
// extra flags.
func (h *holders) start(name, url string, extra ...string) *testenv.Child {
	args := append([]string{"-url", url, "-name", name, "-report", h.col.addr()}, extra...)
	if *negative {
		args = append(args, "-linger", "1s")
	}
	c := testenv.StartChild(h.t, name, "holder", nil, args...)
	if !h.col.waitFor(30*time.Second, func(es []event) bool { return hasEvent(es, name, kindReady) }) {
		h.t.Fatalf("holder %s did not start:\n%s", name, c.Output())
	}
	return c
}

func (h *holders) kill(c *testenv.Child) {
	h.gone[c.Name] = time.Now().UnixNano()
	c.Kill()
	<-c.Exited()
}

// holderOf returns the child that believes it holds role now, or "".
func (h *holders) holderOf(role string) string {
	last := map[string]event{}
	for _, e := range h.col.snapshot() {
		if e.Kind == kindBelief && e.Role == role {
			last[e.Child] = e
		}
	}
	best := ""
	for child, e := range last {
		if _, dead := h.gone[child]; !dead && e.Held && (best == "" || e.At > last[best].At) {
			best = child
		}
	}
	return best
}

// takenOver waits up to timeout for a child other than from to believe it
// holds role after since, and returns when it first did.
func (h *holders) takenOver(role, from string, since int64, timeout time.Duration) (int64, bool) {
	var at int64
	ok := h.col.waitFor(timeout, func(es []event) bool {
		for _, e := range es {
			if e.Kind == kindBelief && e.Role == role && e.Held && e.Child != from && e.At >= since {
				at = e.At
				return true
			}
		}
		return false
	})
	return at, ok
}

// check asserts the lease invariants on everything reported so far.
func (h *holders) check(extra ...func(map[string][]interval) violations) {
	held := heldIntervals(h.col.snapshot(), h.gone, time.Now().UnixNano())
	v := append(checkNoOverlap(held), checkTokensIncrease(held)...)
	for _, f := range extra {
		v = append(v, f(held)...)
	}
	reportViolations(h.t, v)
}

// TestLeases_HoldersUnderProcessAndConnectionFaults: five holder children
// share the leader role and a 16-way partition. The holder of the leader
// role is, in a seeded order, killed (SIGKILL), paused (SIGSTOP until a
// successor holds, then SIGCONT), terminated (SIGTERM), blackholed and
// reset at its database connection. No two processes may ever believe they
// hold one role at once, and every takeover carries a greater token.
func TestLeases_HoldersUnderProcessAndConnectionFaults(t *testing.T) {
	scenario(t)
	pg := testenv.StartPostgresServer(t)
	h := newHolders(t, pg)
	const slots = 5
	proxies := make([]*testenv.FaultProxy, slots)
	children := make([]*testenv.Child, slots)
	generation := make([]int, slots)
	startSlot := func(i int) {
		generation[i]++
		children[i] = h.start(fmt.Sprintf("h%d.%d", i, generation[i]), pg.URLVia(proxies[i].Addr()))
	}
	for i := range slots {
		proxies[i] = testenv.NewFaultProxy(t, pg.Addr())
		startSlot(i)
	}
	slotOf := func(name string) int {
		for i, c := range children {
			if c.Name == name {
				return i
			}
		}
		return -1
	}

	kinds := []string{"kill", "pause", "term", "blackhole", "reset"}
	rng := rand.New(rand.NewPCG(*seed, 11))
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for _, kind := range kinds {
		var holder string
		if !h.col.waitFor(10*time.Second, func([]event) bool { holder = h.holderOf(leaderRole); return holder != "" }) {
			t.Fatalf("before %s: nobody holds %s", kind, leaderRole)
		}
		i := slotOf(holder)
		c := children[i]
		at := time.Now().UnixNano()
		switch kind {
		case "kill":
			h.kill(c)
		case "pause":
			c.Pause()
		case "term":
			c.Terminate()
		case "blackhole":
			proxies[i].SetMode(testenv.Blackhole)
		case "reset":
			proxies[i].SetMode(testenv.Reset)
			time.Sleep(50 * time.Millisecond)
			proxies[i].SetMode(testenv.Pass)
		}
		timeout := 3 * faultLease
		if kind == "reset" {
			timeout = faultLease // a reset connection is replaced at once: the holder usually keeps the role
		}
		took, ok := h.takenOver(leaderRole, holder, at, timeout)
		switch {
		case ok:
			t.Logf("figure lease failover %-9s %v", kind, time.Duration(took-at).Round(time.Millisecond))
		case kind == "reset":
			t.Logf("figure lease failover %-9s none: the holder kept the role", kind)
		default:
			t.Fatalf("%s of %s: nobody took %s over within %v", kind, holder, leaderRole, timeout)
		}
		switch kind {
		case "kill":
			startSlot(i)
		case "pause":
			c.Resume()
		case "term":
			if code, err := c.Wait(10 * time.Second); err != nil || code != 0 {
				t.Fatalf("%s after SIGTERM: exit %d, %v", holder, code, err)
			}
			startSlot(i)
		case "blackhole":
			proxies[i].SetMode(testenv.Pass)
		}
		time.Sleep(faultRenew)
	}
	time.Sleep(faultLease) // let the last fault's aftermath be reported
	for _, c := range children {
		h.kill(c)
	}
	h.check()
}

// TestLeases_NobodyHoldsWhileTheDatabaseIsDown: two holders run while their
// database is stopped (-m immediate) and started again. Once LeaseDuration −
// HeldSafetyMargin has passed since the stop, nobody may believe it holds
// anything until the database is back.
func TestLeases_NobodyHoldsWhileTheDatabaseIsDown(t *testing.T) {
	scenario(t)
	pg := testenv.StartPostgresServer(t)
	h := newHolders(t, pg)
	a, b := h.start("a", pg.URL()), h.start("b", pg.URL())
	if !h.col.waitFor(10*time.Second, func([]event) bool { return h.holderOf(leaderRole) != "" }) {
		t.Fatal("nobody holds the leader role")
	}
	time.Sleep(faultRenew)
	down := time.Now().UnixNano()
	pg.Stop(true)
	time.Sleep(3 * faultLease)
	up := time.Now().UnixNano()
	pg.Start()
	took, ok := h.takenOver(leaderRole, "", up, 4*faultLease)
	if !ok {
		t.Fatal("nobody holds the leader role after the database came back")
	}
	h.kill(a)
	h.kill(b)

	held := heldIntervals(h.col.snapshot(), h.gone, time.Now().UnixNano())
	var lastHeld int64
	for _, ivs := range held {
		for _, iv := range ivs {
			if iv.from < down && iv.to > lastHeld {
				lastHeld = iv.to
			}
		}
	}
	t.Logf("figure lease fail-closed after database stop %v (bound %v)", time.Duration(lastHeld-down).Round(time.Millisecond), faultLease-faultMargin)
	t.Logf("figure lease recovered after database start %v", time.Duration(took-up).Round(time.Millisecond))
	h.check(func(held map[string][]interval) violations {
		return checkNoneHeldWithin(held, down+int64(faultLease-faultMargin), up, "while the database was down")
	})
}

func hasEvent(es []event, child, kind string) bool {
	for _, e := range es {
		if e.Child == child && e.Kind == kind {
			return true
		}
	}
	return false
}

// migrateSchema creates baton's tables in schema.
func migrateSchema(t *testing.T, url, schema string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := postgres.Migrate(ctx, pool, postgres.MigrateOptions{Schema: schema}); err != nil {
		t.Fatal(err)
	}
}

// reportViolations fails the test with what broke; in a negative control
// run, a scenario that finds nothing is what fails.
func reportViolations(t *testing.T, v violations) {
	t.Helper()
	switch {
	case len(v) > 0:
		t.Errorf("invariant violated (%d):\n%s", len(v), v)
	default:
		t.Logf("invariants held")
	}
}

// TestLeases_OneLostHeartbeatKeepsTheTerm: the holder's connection is
// blackholed for one RenewInterval, five times, so that each time exactly
// one heartbeat is lost. The timings leave room for that: the holder must
// keep believing it holds, with the same token, and nobody else may take
// the role. The negative control blackholes for four heartbeats instead,
// more than the timings promise to survive. The timings are those of the
// other scenarios doubled (4 s, 1 s, 500 ms), so that the heartbeat after
// the lost one, which must open a new connection through the proxy, has a
// whole second even on a loaded machine.
func TestLeases_OneLostHeartbeatKeepsTheTerm(t *testing.T) {
	scenario(t)
	pg := testenv.StartPostgresServer(t)
	h := newHolders(t, pg)
	proxies := map[string]*testenv.FaultProxy{}
	var children []*testenv.Child
	for _, name := range []string{"a", "b"} {
		proxies[name] = testenv.NewFaultProxy(t, pg.Addr())
		children = append(children, h.start(name, pg.URLVia(proxies[name].Addr()), "-lease", "4s", "-renew", "1s", "-margin", "500ms"))
	}
	var holder string
	if !h.col.waitFor(10*time.Second, func([]event) bool { holder = h.holderOf(leaderRole); return holder != "" }) {
		t.Fatal("nobody holds the leader role")
	}
	const renew = time.Second
	cut := renew
	if *negative {
		cut = 4 * renew
	}
	from := time.Now().UnixNano()
	for range 5 {
		proxies[holder].SetMode(testenv.Blackhole)
		time.Sleep(cut)
		proxies[holder].SetMode(testenv.Pass)
		time.Sleep(3 * renew)
	}
	to := time.Now().UnixNano()
	for _, c := range children {
		h.kill(c)
	}
	h.check(func(held map[string][]interval) violations {
		var v violations
		var kept []interval
		for _, iv := range held[leaderRole] {
			if iv.from < to && iv.to > from {
				kept = append(kept, iv)
			}
		}
		if len(kept) != 1 || kept[0].child != holder || kept[0].from > from || kept[0].to < to {
			v.add("role %s across five lost heartbeats of %s in [%s, %s]: held as %v; want one unbroken term of %s",
				leaderRole, holder, clock(from), clock(to), kept, holder)
		}
		return v
	})
}
