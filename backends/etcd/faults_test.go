package etcd_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/backends/etcd"
	"github.com/baton-go/baton/backends/etcd/internal/etcdtest"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/internal/faults"
	"github.com/baton-go/baton/internal/testenv"
)

// The fault tests start clusters of their own and kill, pause and stop
// members and holders; like the fault suite of the main module, they wait
// for a run of their own (BATON_FAULTS=later defers them), and
// -faults.negative switches the holder scenario to its negative control.
var (
	negative = flag.Bool("faults.negative", false, "run the negative control of the holder scenario: it must fail")
	seed     = flag.Uint64("faults.seed", 1, "seed of the fault schedule")
)

// childRoles are the child processes this test binary can run, beside the
// etcd members.
var childRoles = map[string]func([]string) int{
	"holder": func(args []string) int { return faults.HolderMain(args, openHolderStore) },
	"locker": lockerMain,
}

// Timings of the holders: for process and connection faults, the shortest
// lease the members grant; for member faults, a lease that outlasts an
// election (2 to 4 election timeouts of 2s, with the pre-vote), so that
// holders can keep their roles through one.
var (
	holderTimings = faults.LeaseTimings{Lease: etcdtest.MinLeaseTTL, Renew: time.Second, Margin: 500 * time.Millisecond}
	memberTimings = faults.LeaseTimings{Lease: 8 * time.Second, Renew: time.Second, Margin: time.Second}
)

// openHolderStore is a holder child's store: target lists the endpoints,
// comma separated.
func openHolderStore(_ context.Context, target string) (lease.Store, func(), error) {
	cli, err := etcd.NewClient(etcd.ClientOptions{Endpoints: strings.Split(target, ",")})
	if err != nil {
		return nil, nil, err
	}
	store, err := etcd.NewLeaseStore(cli, etcd.LeaseStoreOptions{Prefix: "faults/"})
	if err != nil {
		cli.Close()
		return nil, nil, err
	}
	return store, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = store.Close(ctx)
		cli.Close()
	}, nil
}

// TestFaults_HolderScenario is the fault suite's lease scenario
// (faults.RunHolderFaults) on a three-member cluster: holders killed,
// paused, terminated, blackholed and reset at their connection, each
// holder reaching member 0 through a fault proxy of its own.
func TestFaults_HolderScenario(t *testing.T) {
	faults.Scenario(t)
	c := etcdtest.StartCluster(t, 3)
	faults.RunHolderFaults(t, faults.HolderTarget{
		Addr:     c.Addr(0),
		Via:      func(addr string) string { return "http://" + addr },
		Timings:  holderTimings,
		Negative: *negative,
		Seed:     *seed,
	})
}

// failoverKills is how many holders TestFaults_KilledHolderFailover kills.
const failoverKills = 6

// TestFaults_KilledHolderFailover: kill -9 the holder of the leader role,
// again and again, each time at a seeded moment of its renewal period, and
// time the takeover in two parts: from the kill until etcd revokes the
// holder's session (the role key's deletion, as a watch in this process
// sees it), and from there until the successor believes it holds. The
// first is the lease running out, then etcd's expiry check; the second is
// baton's handover.
func TestFaults_KilledHolderFailover(t *testing.T) {
	faults.Scenario(t)
	c := etcdtest.StartCluster(t, 3)
	h := faults.NewHolders(t, holderTimings, *negative)
	target := strings.Join(c.Endpoints(), ",")

	// The role key's deletions, as they reach this process.
	cli := etcdtest.NewClient(t, c.Endpoints())
	key := "faults/lease/role/" + faults.LeaderRole
	var (
		mu      sync.Mutex
		deleted []int64
	)
	wctx, stop := context.WithCancel(context.Background())
	var watching sync.WaitGroup
	defer watching.Wait()
	defer stop()
	watch := cli.Watch(clientv3.WithRequireLeader(wctx), key, clientv3.WithFilterPut())
	watching.Go(func() {
		for resp := range watch {
			at := time.Now().UnixNano()
			mu.Lock()
			for range resp.Events {
				deleted = append(deleted, at)
			}
			mu.Unlock()
		}
	})
	deletedAfter := func(at int64) (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, d := range deleted {
			if d >= at {
				return d, true
			}
		}
		return 0, false
	}

	children := map[string]*testenv.Child{}
	started := 0
	start := func() {
		started++
		name := fmt.Sprintf("k%d", started)
		children[name] = h.Start(name, target)
	}
	start()
	start()
	// took is when the holder came to believe it holds the role: a few
	// milliseconds after the start of the heartbeat that took it, which
	// its later heartbeats follow every RenewInterval.
	took, ok := h.TakenOver(faults.LeaderRole, "", 0, 10*time.Second)
	if !ok {
		t.Fatalf("nobody took %s", faults.LeaderRole)
	}
	rng := rand.New(rand.NewPCG(*seed, 22))
	var total, lags, handover []time.Duration
	for i := range failoverKills {
		holder := h.AwaitHolder(faults.LeaderRole, 10*time.Second)
		if holder == "" {
			t.Fatalf("kill %d: nobody holds %s", i+1, faults.LeaderRole)
		}
		// Kill phase into one of the holder's renewal periods.
		phase := time.Duration(rng.Int64N(int64(holderTimings.Renew)))
		renew := int64(holderTimings.Renew)
		periods := (time.Now().UnixNano() - took + renew - 1) / renew
		time.Sleep(time.Until(time.Unix(0, took+periods*renew).Add(phase)))
		at := time.Now().UnixNano()
		h.Kill(children[holder])
		delete(children, holder)
		if took, ok = h.TakenOver(faults.LeaderRole, holder, at, 3*holderTimings.Lease); !ok {
			t.Fatalf("kill %d of %s: nobody took %s over within %v", i+1, holder, faults.LeaderRole, 3*holderTimings.Lease)
		}
		start()
		// gone is when this test's own watch heard of the deletion, and
		// took when the successor's heartbeat began: two observers, so took
		// may come a moment before gone. That no two holders overlap is
		// h.Check's; here the kill must have been followed by a deletion.
		gone, ok := deletedAfter(at)
		if !ok {
			t.Errorf("invariant violated: kill %d: %s was taken over at %s with its key not deleted since the kill (deletions %v)", i+1, faults.LeaderRole, time.Unix(0, took).Format(time.RFC3339Nano), deleted)
			continue
		}
		gone = min(gone, took)
		// The session's TTL ran out LeaseDuration after its last renewal,
		// about phase before the kill; etcd revoked it lag later.
		lag := time.Duration(gone-at) - (holderTimings.Lease - phase)
		total = append(total, time.Duration(took-at))
		lags = append(lags, lag)
		handover = append(handover, time.Duration(took-gone))
		t.Logf("figure etcd failover after kill -9 of a holder %v into its renewal period: %v (etcd revoked its session %v after the kill, about %v after its TTL; the successor held %v later)",
			phase.Round(time.Millisecond), time.Duration(took-at).Round(time.Millisecond), time.Duration(gone-at).Round(time.Millisecond),
			lag.Round(time.Millisecond), time.Duration(took-gone).Round(time.Millisecond))
	}
	time.Sleep(holderTimings.Lease) // let the last takeover's aftermath be reported
	for _, ch := range children {
		h.Kill(ch)
	}
	t.Logf("figure etcd failover after kill -9 of a holder, %d kills, LeaseDuration %v, RenewInterval %v: %s (etcd revoked the sessions %s after their TTL; the successors held %s after the revoke)",
		len(total), holderTimings.Lease, holderTimings.Renew, span(total), span(lags), span(handover))
	h.Check()
}

// span prints the smallest and the largest of ds.
func span(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	return fmt.Sprintf("%v–%v", slices.Min(ds).Round(time.Millisecond), slices.Max(ds).Round(time.Millisecond))
}

// memberFaults starts a cluster and three holders whose clients list every
// member, and waits until every role is held.
func memberFaults(t *testing.T) (*etcdtest.Cluster, *faults.Holders, []*testenv.Child) {
	t.Helper()
	c := etcdtest.StartCluster(t, 3)
	h := faults.NewHolders(t, memberTimings, false)
	target := strings.Join(c.Endpoints(), ",")
	var children []*testenv.Child
	for i := range 3 {
		children = append(children, h.Start(fmt.Sprintf("h%d", i), target))
	}
	if !awaitAllHeld(h, 30*time.Second) {
		t.Fatal("the holders did not take every role")
	}
	return c, h, children
}

func awaitAllHeld(h *faults.Holders, timeout time.Duration) bool {
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if h.HeldAll() {
			return true
		}
	}
	return false
}

// TestFaults_KillAMemberTheClientsTalkTo: kill -9 a follower member that
// every holder's client has a connection to (clients spread their calls
// over all members). The cluster keeps its quorum, so every role must stay
// with its holder, without a gap.
func TestFaults_KillAMemberTheClientsTalkTo(t *testing.T) {
	faults.Scenario(t)
	c, h, children := memberFaults(t)
	cli := etcdtest.NewClient(t, c.Endpoints())
	leader := c.Leader(cli)
	victim := (leader + 1) % 3
	time.Sleep(memberTimings.Renew)
	at := time.Now().UnixNano()
	c.Kill(victim)
	time.Sleep(2 * memberTimings.Lease)
	end := time.Now().UnixNano()
	for _, ch := range children {
		h.Kill(ch)
	}
	t.Logf("figure etcd kill -9 of follower member m%d: roles changed hands %d times", victim, h.Takeovers(at, end))
	h.Check(faults.HeldThroughout(at, end, "while a follower member was down"))
}

// TestFaults_KillTheLeaderMember: kill -9 the leader member. Leases
// outlast the election, so the holders should keep their roles; whatever
// happens, no two holders may hold a role at once, and once a new leader
// is elected every role is held again.
func TestFaults_KillTheLeaderMember(t *testing.T) {
	faults.Scenario(t)
	c, h, children := memberFaults(t)
	cli := etcdtest.NewClient(t, c.Endpoints())
	leader := c.Leader(cli)
	if leader < 0 {
		t.Fatal("no leader")
	}
	time.Sleep(memberTimings.Renew)
	at := time.Now()
	c.Kill(leader)
	var elected time.Duration
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if l := c.Leader(cli); l >= 0 && l != leader {
			elected = time.Since(at)
			break
		}
	}
	if elected == 0 {
		t.Fatal("no new leader within 30s of killing the leader")
	}
	time.Sleep(2 * memberTimings.Lease)
	if !awaitAllHeld(h, 30*time.Second) {
		t.Fatal("not every role is held again after the election")
	}
	end := time.Now().UnixNano()
	for _, ch := range children {
		h.Kill(ch)
	}
	t.Logf("figure etcd kill -9 of the leader member m%d: new leader after %v; roles changed hands %d times, %d of %d roles had a gap",
		leader, elected.Round(time.Millisecond), h.Takeovers(at.UnixNano(), end), h.Gaps(at.UnixNano(), end), len(faults.Roles()))
	h.Check()
}

// TestFaults_StopTwoOfThreeMembers: stop two of the three members (the
// cluster loses its quorum). From LeaseDuration − HeldSafetyMargin after
// the stop, nobody may believe it holds anything until a member is back;
// then the roles are held again.
func TestFaults_StopTwoOfThreeMembers(t *testing.T) {
	faults.Scenario(t)
	c, h, children := memberFaults(t)
	time.Sleep(memberTimings.Renew)
	c.Kill(1)
	down := time.Now().UnixNano()
	c.Kill(2)
	time.Sleep(memberTimings.Lease + 2*memberTimings.Renew)
	up := time.Now().UnixNano()
	c.Start(1)
	if !awaitAllHeld(h, 60*time.Second) {
		t.Fatal("not every role is held again after a member came back")
	}
	back := time.Now().UnixNano()
	for _, ch := range children {
		h.Kill(ch)
	}
	lastHeld := h.LastHeldAfter(down)
	bound := memberTimings.Lease - memberTimings.Margin
	t.Logf("figure etcd quorum lost: last role given up %v after the stop (bound %v)", time.Duration(lastHeld-down).Round(time.Millisecond), bound)
	t.Logf("figure etcd quorum back: every role held %v after a member restarted", time.Duration(back-up).Round(time.Millisecond))
	h.Check(faults.NoneHeldWithin(down+int64(bound), up, "while the cluster had no quorum"))
}

// lockerMain is a lock holder child: it waits for the lock, prints
// "granted", then samples the lock every 2ms. A gap between two samples
// longer than a second means it was paused: it prints what it finds at its
// first sample after the gap ("resumed", with Trusted and whether Lost is
// closed), then "lost" once Lost is closed.
func lockerMain(args []string) int {
	fs := flag.NewFlagSet("locker", flag.ContinueOnError)
	endpoints := fs.String("endpoints", "", "comma separated")
	prefix := fs.String("prefix", "", "key prefix")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	cli, err := etcd.NewClient(etcd.ClientOptions{Endpoints: strings.Split(*endpoints, ",")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	p, err := etcd.NewLockProvider(cli, etcd.LockProviderOptions{Prefix: *prefix, TTL: testLockTTL, SafetyMargin: testLockMargin})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer p.Close(context.Background())
	l, err := p.Acquire(ctx, "paused", lock.AcquireOptions{Wait: lock.WaitForever})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	el := l.(*etcd.Lock)
	fmt.Printf("EVENT granted token=%d at=%d\n", l.Token(), time.Now().UnixNano())
	last, lastTrusted := time.Now(), time.Now()
sampling:
	for ctx.Err() == nil {
		now := time.Now()
		trusted := el.Trusted()
		if now.Sub(last) > time.Second {
			lost := false
			select {
			case <-l.Lost():
				lost = true
			default:
			}
			fmt.Printf("EVENT resumed at=%d trusted=%v lost=%v last_trusted=%d\n", now.UnixNano(), trusted, lost, lastTrusted.UnixNano())
			select {
			case <-l.Lost():
				fmt.Printf("EVENT lost after=%v\n", time.Since(now))
			case <-time.After(10 * time.Second):
				fmt.Printf("EVENT lost never\n")
			}
			break sampling
		}
		if trusted {
			lastTrusted = now
		}
		last = now
		time.Sleep(2 * time.Millisecond)
	}
	<-ctx.Done()
	return 0
}

// lockerEvent waits for the child's first line "EVENT kind ...", and returns
// its key=value fields.
func lockerEvent(t *testing.T, c *testenv.Child, kind string, timeout time.Duration) map[string]string {
	t.Helper()
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(c.Output()))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 || f[0] != "EVENT" || f[1] != kind {
				continue
			}
			kv := map[string]string{}
			for _, p := range f[2:] {
				k, v, _ := strings.Cut(p, "=")
				kv[k] = v
			}
			return kv
		}
	}
	t.Fatalf("%s printed no %q within %v:\n%s", c.Name, kind, timeout, c.Output())
	return nil
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// TestFaults_PausedLockHolderLosesItsLock: pause (SIGSTOP) a lock holder
// past its TTL while another waits. The lock must pass to the waiter with a
// higher token, only after the paused holder's trust ended; when the
// paused holder resumes, its first look finds the lock untrusted, and its
// Lost closes.
func TestFaults_PausedLockHolderLosesItsLock(t *testing.T) {
	faults.Scenario(t)
	c := etcdtest.StartCluster(t, 3)
	args := []string{"-endpoints", strings.Join(c.Endpoints(), ","), "-prefix", "faults/"}
	a := testenv.StartChild(t, "locker-a", "locker", nil, args...)
	granted := lockerEvent(t, a, "granted", 30*time.Second)
	b := testenv.StartChild(t, "locker-b", "locker", nil, args...)
	time.Sleep(500 * time.Millisecond) // b is waiting
	paused := time.Now()
	a.Pause()
	successor := lockerEvent(t, b, "granted", 4*testLockTTL)
	a.Resume()
	resumed := lockerEvent(t, a, "resumed", 10*time.Second)
	lost := lockerEvent(t, a, "lost", 15*time.Second)

	tokA, tokB := atoi(t, granted["token"]), atoi(t, successor["token"])
	takeover := atoi(t, successor["at"])
	t.Logf("figure etcd lock: the waiter got the lock %v after its holder was paused (TTL %v)", time.Duration(takeover-paused.UnixNano()).Round(time.Millisecond), testLockTTL)
	t.Logf("figure etcd lock: the resumed holder's Lost closed %v after it resumed", lost["after"])
	if tokB <= tokA {
		t.Errorf("invariant violated: the successor's token %d is not above the paused holder's %d", tokB, tokA)
	}
	if lastTrusted := atoi(t, resumed["last_trusted"]); takeover <= lastTrusted {
		t.Errorf("invariant violated: the successor got the lock at %d, before the paused holder last trusted it at %d", takeover, lastTrusted)
	}
	if resumed["trusted"] != "false" {
		t.Errorf("invariant violated: the resumed holder still trusted the lock at its first look (%v)", resumed)
	}
	if _, never := lost["never"]; never {
		t.Errorf("invariant violated: the resumed holder's Lost never closed")
	}
	if resumed["lost"] != "true" {
		t.Errorf("invariant violated: the resumed holder's Lost was still open at its first look (%v)", resumed)
	}
}
