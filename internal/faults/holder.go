package faults

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

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
	samplePeriod   = 2 * time.Millisecond
)

// LeaseTimings are the manager settings of the holder children.
type LeaseTimings struct {
	Lease, Renew, Margin time.Duration
}

// DefaultLeaseTimings are the timings of the PostgreSQL scenarios.
var DefaultLeaseTimings = LeaseTimings{Lease: faultLease, Renew: faultRenew, Margin: faultMargin}

// LeaderRole is the single role every holder registers beside its
// partition set.
const LeaderRole = leaderRole

// EnvFaults set to "later" skips the scenarios: .ci/run sets it for the
// module-wide test run and runs the fault scenarios on their own afterwards.
const EnvFaults = "BATON_FAULTS"

// Scenario starts a fault scenario, unless it was deferred to a run of its
// own.
func Scenario(t *testing.T) {
	t.Helper()
	if os.Getenv(EnvFaults) == "later" {
		t.Skip("the fault suite runs on its own after the other packages (" + EnvFaults + "=later)")
	}
}

// StoreOpener opens the lease store of a holder child. target is the
// child's -target flag, how it reaches the server; closeStore releases what
// open made.
type StoreOpener func(ctx context.Context, target string) (store lease.Store, closeStore func(), err error)

// HolderMain is a lease holder child: one manager with the leader role and
// a 16-way partition, sampling every lease every samplePeriod and reporting
// each change of belief. SIGTERM closes the manager gracefully.
func HolderMain(args []string, open StoreOpener) int {
	fs := newChildFlags("holder")
	target := fs.String("target", "", "how to reach the lease store's server")
	linger := fs.Duration("linger", 0, "negative control: keep believing held this long after IsHeld turned false")
	leaseFor := fs.Duration("lease", faultLease, "LeaseDuration")
	renew := fs.Duration("renew", faultRenew, "RenewInterval")
	margin := fs.Duration("margin", faultMargin, "HeldSafetyMargin")
	rep, ctx, done, err := fs.start(args)
	if err != nil {
		return 2
	}
	defer done()
	name := fs.name

	store, closeStore, err := open(context.Background(), *target)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer closeStore()
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
	// The manager runs until the sampling below ends and closes it.
	running := make(chan error, 1)
	go func() { running <- m.Run(context.WithoutCancel(ctx)) }()
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
	<-running
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

// Holders runs holder children (the "holder" child role, which the test
// binary maps to HolderMain) and remembers when each was killed, for the
// intervals it could not close itself.
type Holders struct {
	t        *testing.T
	col      *collector
	gone     map[string]int64
	timings  LeaseTimings
	negative bool
}

// NewHolders starts a collector for holder children with these timings;
// negative makes every child linger on its beliefs (the negative control).
func NewHolders(t *testing.T, timings LeaseTimings, negative bool) *Holders {
	return &Holders{t: t, col: newCollector(t), gone: map[string]int64{}, timings: timings, negative: negative}
}

// Start starts a holder named name that reaches the server through target,
// with extra flags, which win over the timings' own.
func (h *Holders) Start(name, target string, extra ...string) *testenv.Child {
	args := []string{"-target", target, "-name", name, "-report", h.col.addr(),
		"-lease", h.timings.Lease.String(), "-renew", h.timings.Renew.String(), "-margin", h.timings.Margin.String()}
	args = append(args, extra...)
	if h.negative {
		args = append(args, "-linger", "1s")
	}
	c := testenv.StartChild(h.t, name, "holder", nil, args...)
	if !h.col.waitFor(30*time.Second, func(es []event) bool { return hasEvent(es, name, kindReady) }) {
		h.t.Fatalf("holder %s did not start:\n%s", name, c.Output())
	}
	return c
}

// Kill is kill -9 of a holder, remembering when.
func (h *Holders) Kill(c *testenv.Child) {
	h.gone[c.Name] = time.Now().UnixNano()
	c.Kill()
	<-c.Exited()
}

// HolderOf returns the live child that believes it holds role now, or "".
func (h *Holders) HolderOf(role string) string {
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

// AwaitHolder waits up to timeout for a live child to hold role and
// returns it ("" when none did).
func (h *Holders) AwaitHolder(role string, timeout time.Duration) string {
	var holder string
	h.col.waitFor(timeout, func([]event) bool { holder = h.HolderOf(role); return holder != "" })
	return holder
}

// TakenOver waits up to timeout for a child other than from to believe it
// holds role after since, and returns when it first did.
func (h *Holders) TakenOver(role, from string, since int64, timeout time.Duration) (int64, bool) {
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

// HeldAll reports whether each role is held by some live child right now.
func (h *Holders) HeldAll() bool {
	for _, role := range leaseRoles() {
		if h.HolderOf(role) == "" {
			return false
		}
	}
	return true
}

// LastHeldAfter is the latest moment at which a term that began before at
// was still believed held (at itself when none was).
func (h *Holders) LastHeldAfter(at int64) int64 {
	last := at
	for _, ivs := range heldIntervals(h.col.snapshot(), h.gone, time.Now().UnixNano()) {
		for _, iv := range ivs {
			if iv.from < at && iv.to > last {
				last = iv.to
			}
		}
	}
	return last
}

// Check asserts the lease invariants on everything reported so far: no
// role held by two children at once, every takeover with a greater token,
// and the extra checks.
func (h *Holders) Check(extra ...func(map[string][]interval) violations) {
	h.t.Helper()
	held := heldIntervals(h.col.snapshot(), h.gone, time.Now().UnixNano())
	v := append(checkNoOverlap(held), checkTokensIncrease(held)...)
	for _, f := range extra {
		v = append(v, f(held)...)
	}
	reportViolations(h.t, v)
}

// NoneHeldWithin is an extra check for Check: nobody believed it held any
// role during [from, to].
func NoneHeldWithin(from, to int64, why string) func(map[string][]interval) violations {
	return func(held map[string][]interval) violations { return checkNoneHeldWithin(held, from, to, why) }
}

// Roles is every role a holder child registers.
func Roles() []string { return leaseRoles() }

// Takeovers counts the terms that began within [from, to] in a child other
// than the one that held the role before.
func (h *Holders) Takeovers(from, to int64) int {
	n := 0
	for _, ivs := range heldIntervals(h.col.snapshot(), h.gone, time.Now().UnixNano()) {
		for i, iv := range ivs {
			if i > 0 && iv.from >= from && iv.from <= to && ivs[i-1].child != iv.child {
				n++
			}
		}
	}
	return n
}

// Gaps counts the roles that were not held by a single term throughout
// [from, to].
func (h *Holders) Gaps(from, to int64) int {
	return len(checkHeldThroughout(heldIntervals(h.col.snapshot(), h.gone, time.Now().UnixNano()), from, to, ""))
}

// HeldThroughout is an extra check for Check: every role was held by one
// child with one token from before from until after to.
func HeldThroughout(from, to int64, why string) func(map[string][]interval) violations {
	return func(held map[string][]interval) violations { return checkHeldThroughout(held, from, to, why) }
}

func checkHeldThroughout(held map[string][]interval, from, to int64, why string) violations {
	var v violations
	for _, role := range leaseRoles() {
		ok := false
		for _, iv := range held[role] {
			if iv.from <= from && iv.to >= to {
				ok = true
				break
			}
		}
		if !ok {
			v.add("role %s not held by one term throughout [%s, %s] %s: %v", role, clock(from), clock(to), why, held[role])
		}
	}
	return v
}

// HolderTarget is a lease store's server as the holder scenario sees it.
type HolderTarget struct {
	// Addr is the server's host:port, to which each holder's fault proxy
	// forwards.
	Addr string
	// Via is the -target of a holder child that reaches the server through
	// the proxy at addr.
	Via      func(addr string) string
	Timings  LeaseTimings
	Negative bool
	Seed     uint64
}

// RunHolderFaults: five holder children share the leader role and a 16-way
// partition. The holder of the leader role is, in a seeded order, killed
// (SIGKILL), paused (SIGSTOP until a successor holds, then SIGCONT),
// terminated (SIGTERM), blackholed and reset at its connection to the
// server. No two processes may ever believe they hold one role at once, and
// every takeover carries a greater token.
func RunHolderFaults(t *testing.T, target HolderTarget) {
	t.Helper()
	h := NewHolders(t, target.Timings, target.Negative)
	leaseFor := target.Timings.Lease
	const slots = 5
	proxies := make([]*testenv.FaultProxy, slots)
	children := make([]*testenv.Child, slots)
	generation := make([]int, slots)
	startSlot := func(i int) {
		generation[i]++
		children[i] = h.Start(fmt.Sprintf("h%d.%d", i, generation[i]), target.Via(proxies[i].Addr()))
	}
	for i := range slots {
		proxies[i] = testenv.NewFaultProxy(t, target.Addr)
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
	rng := rand.New(rand.NewPCG(target.Seed, 11))
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for _, kind := range kinds {
		holder := h.AwaitHolder(leaderRole, 10*time.Second)
		if holder == "" {
			t.Fatalf("before %s: nobody holds %s", kind, leaderRole)
		}
		i := slotOf(holder)
		c := children[i]
		at := time.Now().UnixNano()
		switch kind {
		case "kill":
			h.Kill(c)
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
		timeout := 3 * leaseFor
		if kind == "reset" {
			timeout = leaseFor // a reset connection is replaced at once: the holder usually keeps the role
		}
		took, ok := h.TakenOver(leaderRole, holder, at, timeout)
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
		time.Sleep(target.Timings.Renew)
	}
	time.Sleep(leaseFor) // let the last fault's aftermath be reported
	for _, c := range children {
		h.Kill(c)
	}
	h.Check()
}

func hasEvent(es []event, child, kind string) bool {
	for _, e := range es {
		if e.Child == child && e.Kind == kind {
			return true
		}
	}
	return false
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
