package faults

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/locks/pglock"
	redislock "github.com/baton-go/baton/locks/redis"
)

// Outbox timings: a leader lock that a paused leader loses within two or
// three seconds, and a walk that polls often.
const (
	outboxLockTTL    = 2 * time.Second
	outboxLockMargin = 300 * time.Millisecond
	outboxLockName   = "faults-outbox"
	// outboxBatch is the drivers' BatchSize: the most entries one pass
	// reads, across every lane, and so the most a takeover repeats.
	outboxBatch = 100
)

var outboxLanes = []string{"a", "b", "c"}

// producerMain enqueues for -for: transactions of one to three entries, one
// in ten rolled back, each reported once its outcome is known.
func producerMain(args []string) int {
	fs := newChildFlags("producer")
	url := fs.String("url", "", "PostgreSQL URL, search_path set to the outbox's schema")
	seedFlag := fs.Uint64("seed", 1, "seed")
	run := fs.Duration("for", 5*time.Second, "how long to produce")
	outside := fs.Bool("outside", false, "negative control: also write a rolled-back transaction's entries in a transaction of their own")
	rep, _, done, err := fs.start(args)
	if err != nil {
		return 2
	}
	defer done()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	rng := rand.New(rand.NewPCG(*seedFlag, 7))
	rep.send(event{Kind: kindReady})
	for end := time.Now().Add(*run); time.Now().Before(end); {
		tx, err := pool.Begin(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		var ids []outbox.ID
		for range 1 + rng.IntN(3) {
			id := outbox.NewID()
			if err := pgxstore.Enqueue(ctx, tx, id, outboxLanes[rng.IntN(len(outboxLanes))], []byte(`{"n":1}`)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			ids = append(ids, id)
		}
		if rng.IntN(10) == 0 {
			if err := tx.Rollback(ctx); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			for _, id := range ids {
				rep.send(event{Kind: kindRolled, ID: id.String()})
			}
			if *outside {
				side, err := pool.Begin(ctx)
				if err == nil {
					for _, id := range ids {
						_ = pgxstore.Enqueue(ctx, side, id, outboxLanes[0], []byte(`{"n":1}`))
					}
					_ = side.Commit(ctx)
				}
			}
			continue
		}
		if err := tx.Commit(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		for _, id := range ids {
			rep.send(event{Kind: kindCommitted, ID: id.String()})
		}
	}
	return 0
}

// driverMain runs an outbox driver whose processors deliver every run to
// the fencing destination (fencingDestination) with the fencing token the
// driver put on their context, as a real processor does: Delivered when it
// accepts, an error wrapping outbox.ErrFenced when it refuses. SIGTERM
// stops it.
func driverMain(args []string) int {
	fs := newChildFlags("driver")
	url := fs.String("url", "", "PostgreSQL URL, search_path set to the outbox's schema")
	locks := fs.String("locks", "pg", "leader lock provider: pg or redis")
	redisAddr := fs.String("redis", "", "Redis address for -locks redis")
	namespace := fs.String("namespace", "", "lock namespace or key prefix")
	logSlot := fs.String("log", "", "read the outbox from the log, with this slot and publication (outbox.Config.Log)")
	destAddr := fs.String("destination", "", "the fencing destination's address")
	rep, ctx, done, err := fs.start(args)
	if err != nil {
		return 2
	}
	defer done()
	dest := dialDestination(*destAddr, *fs.name)
	defer dest.close()
	pool, err := pgxpool.New(context.Background(), *url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()

	var provider lock.Provider
	switch *locks {
	case "pg":
		provider, err = pglock.NewProvider(pool, pglock.Options{Namespace: *namespace, PingInterval: 100 * time.Millisecond})
	case "redis":
		client := goredis.NewClient(&goredis.Options{Addr: *redisAddr, MaxRetries: -1,
			DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
		defer client.Close()
		provider, err = redislock.NewProvider(client, redislock.Options{Prefix: *namespace + ":", TTL: outboxLockTTL, SafetyMargin: outboxLockMargin})
	default:
		err = fmt.Errorf("unknown -locks %q", *locks)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tracked := &trackedLocks{Provider: provider, rep: rep}
	var (
		store outbox.Store
		log   outbox.LogStore
	)
	if *logSlot != "" {
		ls, lerr := pgxstore.NewOutboxLogStore(pool, pgxstore.OutboxLogOptions{Slot: *logSlot, Publication: *logSlot, StatusInterval: time.Second})
		store, log, err = ls, ls, lerr
	} else {
		store, err = pgxstore.NewOutboxStore(pool, pgxstore.OutboxStoreOptions{})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var procs []outbox.Processor
	for _, lane := range outboxLanes {
		procs = append(procs, outbox.ProcessorFunc{LaneName: lane, Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			token, _ := outbox.FencingToken(ctx)
			// The clock is read before the request: whatever the
			// destination accepts was sent after this reading, and a pause
			// in between can only make a delivery look earlier than the
			// moment the destination judged it, never later.
			req := deliveryRequest{Token: token, At: time.Now().UnixNano()}
			for _, e := range run {
				req.Entries = append(req.Entries, deliveredEntry{ID: e.ID.String(), XID: e.XID})
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if ans := dest.deliver(req); !ans.Accepted {
				return nil, fmt.Errorf("the destination refused fencing token %d, having seen %d: %w", token, ans.Highest, outbox.ErrFenced)
			}
			out := make([]outbox.Outcome, len(run))
			for i := range out {
				out[i] = outbox.Delivered()
			}
			return out, nil
		}})
	}
	d, err := outbox.NewDriver(outbox.Config{
		Store: store, Log: log, Locks: tracked, Processors: procs,
		Notify:    func(context.Context, outbox.Notice) error { return nil },
		BatchSize: outboxBatch, IdleDelay: 20 * time.Millisecond, ErrorDelay: 50 * time.Millisecond,
		LeaderLockName: outboxLockName, LeaderWait: 200 * time.Millisecond, RetentionDisabled: true,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	rep.send(event{Kind: kindReady})
	_ = d.Run(ctx)
	return 0
}

// trackedLocks reports every leader lock this process is granted.
type trackedLocks struct {
	lock.Provider
	rep *reporter
}

func (p *trackedLocks) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	start := time.Now().UnixNano()
	l, err := p.Provider.Acquire(ctx, name, opts)
	if err == nil {
		// The grant happened between start and now: Since and At bound it.
		p.rep.send(event{Kind: kindGranted, Token: l.Token(), Since: start})
	}
	return l, err
}

// fencingDestination is where the drivers' processors deliver, in the
// parent: a fencing destination, such as graphtest's engine, that refuses a
// run whose token is lower than the highest it has accepted. It also
// refuses one lower than the highest token granted so far, which it reads
// from the collector: a grant is known to it the moment it is reported,
// where a real destination learns a token only from the first request that
// carries it. That makes the invariant "no delivery under a token lower
// than one already granted" one the deployment can have at all (a real
// destination accepts a deposed leader's token until the new leader's first
// request), and it is what checkNoDeliveryByDeposedLeader asserts; see
// docs/testing.md for what that proves. An accepted run is recorded as one
// delivered event per entry, stamped with the sender's clock.
type fencingDestination struct {
	col *collector
	ln  net.Listener
	wg  sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn

	accepted uint64 // under col.mu
}

// deliveryRequest is one run sent to the destination.
type deliveryRequest struct {
	Child   string           `json:"child"`
	Token   uint64           `json:"token"`
	At      int64            `json:"at"`
	Entries []deliveredEntry `json:"entries"`
}

type deliveredEntry struct {
	ID  string `json:"id"`
	XID uint64 `json:"xid"`
}

// deliveryAnswer is the destination's: accepted, or refused for a token
// below Highest.
type deliveryAnswer struct {
	Accepted bool   `json:"accepted"`
	Highest  uint64 `json:"highest"`
}

func newFencingDestination(t *testing.T, col *collector) *fencingDestination {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &fencingDestination{col: col, ln: ln}
	d.wg.Go(d.accept)
	t.Cleanup(d.close)
	return d
}

func (d *fencingDestination) addr() string { return d.ln.Addr().String() }

func (d *fencingDestination) accept() {
	for {
		conn, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.mu.Lock()
		d.conns = append(d.conns, conn)
		d.mu.Unlock()
		d.wg.Go(func() { d.serve(conn) })
	}
}

// serve answers one driver's requests, one at a time.
func (d *fencingDestination) serve(conn net.Conn) {
	dec, enc := json.NewDecoder(bufio.NewReader(conn)), json.NewEncoder(conn)
	for {
		var r deliveryRequest
		if dec.Decode(&r) != nil {
			return
		}
		if enc.Encode(d.admit(r)) != nil {
			return // the driver is gone; what it sent was judged all the same
		}
	}
}

// admit judges a run and records it, under the collector's lock, so that
// it is judged against every grant the collector has recorded.
func (d *fencingDestination) admit(r deliveryRequest) deliveryAnswer {
	c := d.col
	c.mu.Lock()
	defer c.mu.Unlock()
	highest := max(c.granted, d.accepted)
	if r.Token < highest {
		c.events = append(c.events, event{Child: r.Child, Kind: kindFenced, Token: r.Token, At: time.Now().UnixNano()})
		return deliveryAnswer{Highest: highest}
	}
	d.accepted = r.Token
	for _, e := range r.Entries {
		c.events = append(c.events, event{Child: r.Child, Kind: kindDelivered, ID: e.ID, XID: e.XID, Token: r.Token, At: r.At})
	}
	return deliveryAnswer{Accepted: true, Highest: r.Token}
}

func (d *fencingDestination) close() {
	d.ln.Close()
	d.mu.Lock()
	for _, conn := range d.conns {
		conn.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
}

// destinationClient is a driver child's connection to the destination.
type destinationClient struct {
	child string
	mu    sync.Mutex
	conn  net.Conn
	enc   *json.Encoder
	dec   *json.Decoder
}

func dialDestination(addr, child string) *destinationClient {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: the destination at %s: %v\n", child, addr, err)
		os.Exit(3)
	}
	return &destinationClient{child: child, conn: conn, enc: json.NewEncoder(conn), dec: json.NewDecoder(bufio.NewReader(conn))}
}

// deliver sends a run and waits for the answer.
func (c *destinationClient) deliver(r deliveryRequest) deliveryAnswer {
	r.Child = c.child
	c.mu.Lock()
	defer c.mu.Unlock()
	var ans deliveryAnswer
	if c.enc.Encode(r) != nil || c.dec.Decode(&ans) != nil {
		// The parent is gone: nothing left to deliver to.
		os.Exit(3)
	}
	return ans
}

func (c *destinationClient) close() { c.conn.Close() }

// TestOutbox_LeadersKilledAndPaused: eight producer children enqueue for a
// few seconds, a tenth of their transactions rolled back, while three
// driver children compete for the leader lock and the leader is killed or
// paused past its lock's TTL in turn; first with PostgreSQL advisory locks,
// then with Redis locks, whose server is also restarted once. Every
// committed entry is delivered, no rolled-back one is, first deliveries
// follow (xid, id) order, every grant of the leader lock carries a greater
// token than the grants before it, no delivery is made under a token
// lower than one already granted, and no term delivers again more than one
// pass.
func TestOutbox_LeadersKilledAndPaused(t *testing.T) {
	scenario(t)
	pgsrv := testenv.StartPostgresServer(t)
	for _, locks := range []string{"pg", "redis"} {
		t.Run(locks, func(t *testing.T) {
			var redisSrv *testenv.RedisServer
			if locks == "redis" {
				redisSrv = testenv.StartRedisServer(t)
			}
			runOutboxScenario(t, pgsrv, locks, redisSrv, false)
		})
	}
}

// TestOutbox_LogLeadersKilledAndPaused is the same scenario with the
// drivers reading the outbox from the log (outbox.Config.Log), with Redis
// locks, so that a paused leader loses its lock while its reader is still
// attached to the slot: the next leader ends that reader (its fencing
// token above the paused one's) and reads on. First deliveries follow
// commit order, as a second slot decoding the same commits with
// test_decoding tells it, and the slot never confirms past the settled
// position.
func TestOutbox_LogLeadersKilledAndPaused(t *testing.T) {
	scenario(t)
	pgsrv := testenv.StartPostgresServer(t, testenv.LogicalSettings...)
	runOutboxScenario(t, pgsrv, "redis", testenv.StartRedisServer(t), true)
}

// runOutboxScenario runs the outbox under faults with the leader lock on
// locks ("pg", or "redis" on redisSrv, which is also restarted once: a
// server without persistence comes back empty).
func runOutboxScenario(t *testing.T, pgsrv *testenv.PostgresServer, locks string, redisSrv *testenv.RedisServer, fromLog bool) {
	var redisAddr string
	if redisSrv != nil {
		redisAddr = redisSrv.Addr()
	}
	schema := "faults_outbox_" + locks
	if fromLog {
		schema += "_log"
	}
	migrateSchema(t, pgsrv.URL(), schema)
	url := pgsrv.URL() + "&search_path=" + schema
	var logArgs []string
	label := locks // of the figures
	if fromLog {
		logArgs, label = []string{"-log", schema}, locks+"+log"
	}
	col := newCollector(t)
	dest := newFencingDestination(t, col)
	gone := map[string]int64{}

	const slots = 3
	drivers := make([]*testenv.Child, slots)
	generation := make([]int, slots)
	startDriver := func(i int) {
		generation[i]++
		name := fmt.Sprintf("d%d.%d", i, generation[i])
		drivers[i] = testenv.StartChild(t, name, "driver", nil, append([]string{"-url", url, "-name", name, "-report", col.addr(),
			"-locks", locks, "-redis", redisAddr, "-namespace", schema, "-destination", dest.addr()}, logArgs...)...)
	}
	for i := range slots {
		startDriver(i)
	}
	var oracle *logOracle
	if fromLog {
		oracle = newLogOracle(t, url, schema)
	}
	const producers = 8
	produce := 12 * time.Second
	var prods []*testenv.Child
	for i := range producers {
		name := fmt.Sprintf("p%d", i)
		args := []string{"-url", url, "-name", name, "-report", col.addr(), "-seed", fmt.Sprint(*seed*100 + uint64(i)), "-for", produce.String()}
		if *negative {
			args = append(args, "-outside")
		}
		prods = append(prods, testenv.StartChild(t, name, "producer", nil, args...))
	}

	// leaderNow is the driver granted the leader lock last, if alive.
	leaderNow := func() string {
		es := col.snapshot()
		for i := len(es) - 1; i >= 0; i-- {
			if e := es[i]; e.Kind == kindGranted {
				if _, dead := gone[e.Child]; !dead {
					return e.Child
				}
				return ""
			}
		}
		return ""
	}
	slotOf := func(name string) int {
		for i, c := range drivers {
			if c.Name == name {
				return i
			}
		}
		return -1
	}

	kinds := []string{"kill", "pause", "kill", "pause"}
	if redisSrv != nil {
		kinds = append(kinds, "restart")
	}
	rng := rand.New(rand.NewPCG(*seed, 12))
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	started := time.Now()
	for _, kind := range kinds {
		var leader string
		if !col.waitFor(10*time.Second, func([]event) bool { leader = leaderNow(); return leader != "" }) {
			t.Fatalf("before %s: no driver leads", kind)
		}
		i := slotOf(leader)
		c := drivers[i]
		at := time.Now().UnixNano()
		switch kind {
		case "kill":
			gone[c.Name] = at
			c.Kill()
			<-c.Exited()
		case "pause":
			c.Pause()
		case "restart":
			redisSrv.Restart()
		}
		// A paused PostgreSQL session keeps its advisory lock: nobody can
		// take over until it resumes.
		expectTakeover := kind == "kill" || (kind == "pause" && locks == "redis")
		wait := 3 * outboxLockTTL
		if !expectTakeover {
			wait = outboxLockTTL + time.Second
		}
		if kind == "restart" {
			// The lock is gone with the server's memory: whoever acquires
			// it next, the old leader included, holds a new term.
			leader = ""
		}
		// The leader may have changed just before the fault, its new
		// grant not yet reported when leaderNow looked (a lock lost on
		// resuming from the previous pause, say): a grant to another driver
		// after the victim's last one is a takeover too, and the fault then
		// hit a standby.
		var took int64
		ok := col.waitFor(wait, func(es []event) bool {
			var victimGranted int64
			for _, e := range es {
				if e.Kind == kindGranted && e.Child == leader {
					victimGranted = e.At
				}
			}
			if leader == "" {
				victimGranted = at
			}
			for _, e := range es {
				if e.Kind == kindGranted && e.Child != leader && e.At > victimGranted {
					took = max(e.At, at) // at: already taken over when the fault came
					return true
				}
			}
			return false
		})
		switch {
		case ok:
			t.Logf("figure outbox %-9s failover %-9s %v", label, kind, time.Duration(took-at).Round(time.Millisecond))
		case !expectTakeover:
			t.Logf("figure outbox %-9s failover %-9s none: the paused session keeps its advisory lock until it resumes", label, kind)
		default:
			for _, c := range drivers {
				t.Logf("driver %s (pid %d) output:\n%s", c.Name, c.Pid(), c.Output())
			}
			t.Logf("sessions holding or waiting for advisory locks:\n%s", advisorySessions(pgsrv.URL()))
			t.Fatalf("%s of leader %s: no other driver was granted the lock within %v", kind, leader, wait)
		}
		switch kind {
		case "kill":
			startDriver(i)
		case "pause":
			c.Resume()
		}
		time.Sleep(time.Second)
	}
	for _, p := range prods {
		if code, err := p.Wait(produce + 30*time.Second); err != nil || code != 0 {
			t.Fatalf("producer %s: exit %d, %v\n%s", p.Name, code, err, p.Output())
		}
	}
	producedAt := time.Now()

	// Drain: wait until every committed entry has been delivered.
	var lost []string
	drained := col.waitFor(30*time.Second, func(es []event) bool {
		lost = lostEntries(es)
		return len(lost) == 0
	})
	if drained {
		t.Logf("figure outbox %-9s drain after the last commit %v", label, time.Since(producedAt).Round(time.Millisecond))
	}
	time.Sleep(200 * time.Millisecond) // late deliveries of rolled-back entries, if any
	for _, c := range drivers {
		gone[c.Name] = time.Now().UnixNano()
		c.Kill()
		<-c.Exited()
	}
	es := col.snapshot()
	committed, deliveries, duplicates, fenced := outboxCounts(es)
	t.Logf("figure outbox %-9s %d committed entries in %v, %d deliveries, %d duplicates, %d runs refused by the destination",
		label, committed, time.Since(started).Round(time.Millisecond), deliveries, duplicates, fenced)
	terms, most := 0, 0
	for _, e := range es {
		if e.Kind == kindGranted {
			terms++
		}
	}
	for _, n := range repeatsPerTerm(es) {
		most = max(most, n)
	}
	t.Logf("figure outbox %-9s %d leadership terms, at most %d entries delivered again in one (one pass: %d)", label, terms, most, outboxBatch)

	var v violations
	for _, id := range lost {
		v.add("lost: committed entry %s never delivered", id)
	}
	v = append(v, checkRolledBackNotDelivered(es)...)
	v = append(v, checkGrantTokensIncrease(es)...)
	v = append(v, checkNoDeliveryByDeposedLeader(es)...)
	v = append(v, checkRepeatsBoundedByOnePass(es, outboxBatch)...)
	if oracle != nil {
		v = append(v, oracle.check(t, es)...)
	} else {
		v = append(v, checkFirstDeliveriesInOrder(es)...)
	}
	reportViolations(t, v)
}

// lostEntries lists the committed entries not delivered yet.
func lostEntries(es []event) []string {
	delivered := map[string]bool{}
	for _, e := range es {
		if e.Kind == kindDelivered {
			delivered[e.ID] = true
		}
	}
	var lost []string
	for _, e := range es {
		if e.Kind == kindCommitted && !delivered[e.ID] {
			lost = append(lost, e.ID)
		}
	}
	return lost
}

func outboxCounts(es []event) (committed, deliveries, duplicates, fenced int) {
	seen := map[string]bool{}
	for _, e := range es {
		switch e.Kind {
		case kindFenced:
			fenced++
		case kindCommitted:
			committed++
		case kindDelivered:
			deliveries++
			if seen[e.ID] {
				duplicates++
			}
			seen[e.ID] = true
		}
	}
	return committed, deliveries, duplicates, fenced
}

// repeatsPerTerm counts, for each leadership term (the token it delivered
// under), its deliveries of entries delivered before (by the clock their
// deliverers read, as firstDeliveries takes them).
func repeatsPerTerm(es []event) map[uint64]int {
	first := map[string]int64{}
	for _, e := range es {
		if e.Kind != kindDelivered {
			continue
		}
		if at, ok := first[e.ID]; !ok || e.At < at {
			first[e.ID] = e.At
		}
	}
	repeats := map[uint64]int{}
	counted := map[string]bool{} // the first delivery, counted as such once
	for _, e := range es {
		if e.Kind != kindDelivered {
			continue
		}
		if e.At == first[e.ID] && !counted[e.ID] {
			counted[e.ID] = true
			continue
		}
		repeats[e.Token]++
	}
	return repeats
}

// checkRepeatsBoundedByOnePass: a term starts from the settled position
// and delivers again only what earlier terms delivered past it without
// settling. Each of them got no further than one pass past it, and the
// entries after a settled position come in one order whoever reads them,
// so together that is at most one pass, batch entries (docs/outbox.md,
// "Failure table"): no term repeats more.
func checkRepeatsBoundedByOnePass(es []event, batch int) violations {
	repeats := repeatsPerTerm(es)
	var v violations
	for _, token := range slices.Sorted(maps.Keys(repeats)) {
		if n := repeats[token]; n > batch {
			v.add("the term of token %d delivered %d entries again, more than one pass of %d", token, n, batch)
		}
	}
	return v
}

// checkRolledBackNotDelivered: an entry whose transaction rolled back never
// reaches a processor.
func checkRolledBackNotDelivered(es []event) violations {
	rolled := map[string]bool{}
	for _, e := range es {
		if e.Kind == kindRolled {
			rolled[e.ID] = true
		}
	}
	var v violations
	for _, e := range es {
		if e.Kind == kindDelivered && rolled[e.ID] {
			v.add("rolled-back entry %s delivered by %s", e.ID, e.Child)
			rolled[e.ID] = false
		}
	}
	return v
}

// checkFirstDeliveriesInOrder: taken in the order they happened, the first
// delivery of each entry follows the walk's (xid, id) order. Redeliveries
// after a takeover may repeat entries; they never reorder new ones.
func checkFirstDeliveriesInOrder(es []event) violations {
	firsts := firstDeliveries(es)
	var v violations
	var prev outbox.Cursor
	for _, e := range firsts {
		id, err := outbox.ParseID(e.ID)
		if err != nil {
			v.add("delivery of a malformed id %q", e.ID)
			continue
		}
		cur := outbox.Cursor{XID: e.XID, ID: id}
		if cur.Compare(prev) < 0 {
			v.add("entry %s (xid %d) first delivered by %s after entry %s (xid %d)", e.ID, e.XID, e.Child, prev.ID, prev.XID)
		}
		prev = cur
	}
	return v
}

// firstDeliveries is each entry's first delivery, by the clock its
// deliverer read, in the order they happened. The collector's order is not
// that order: it reads every child's connection on a goroutine of its own,
// so after a takeover the new leader's repeat of an entry can arrive before
// the deposed leader's earlier delivery of it, still in a socket buffer.
func firstDeliveries(es []event) []event {
	first := map[string]int{}
	var firsts []event
	for _, e := range es {
		if e.Kind != kindDelivered {
			continue
		}
		i, ok := first[e.ID]
		switch {
		case !ok:
			first[e.ID] = len(firsts)
			firsts = append(firsts, e)
		case e.At < firsts[i].At:
			firsts[i] = e
		}
	}
	slices.SortStableFunc(firsts, func(a, b event) int { return cmp.Compare(a.At, b.At) })
	return firsts
}

// checkNoDeliveryByDeposedLeader: no delivery is made under a lock token
// lower than one already granted to another process. That holds across a
// Redis restart without persistence too: the next grant waits until no
// holder from before the restart can still trust its lock (docs/locks.md).
func checkNoDeliveryByDeposedLeader(es []event) violations {
	type grant struct {
		child string
		token uint64
		at    int64
	}
	var grants []grant
	for _, e := range es {
		if e.Kind == kindGranted {
			grants = append(grants, grant{e.Child, e.Token, e.At})
		}
	}
	var v violations
	for _, e := range es {
		if e.Kind != kindDelivered {
			continue
		}
		for _, g := range grants {
			if g.child != e.Child && g.token > e.Token && g.at < e.At {
				v.add("entry %s delivered by %s under token %d, %v after %s was granted token %d",
					e.ID, e.Child, e.Token, time.Duration(e.At-g.at).Round(time.Millisecond), g.child, g.token)
				break
			}
		}
	}
	return v
}

// checkGrantTokensIncrease: a leader lock granted after another carries a
// greater token. A grant is known to lie between its Acquire's start (Since)
// and its end (At), so b is after a for sure when b started after a ended.
func checkGrantTokensIncrease(es []event) violations {
	var grants []event
	for _, e := range es {
		if e.Kind == kindGranted {
			grants = append(grants, e)
		}
	}
	var v violations
	for _, a := range grants {
		for _, b := range grants {
			if b.Since > a.At && b.Token <= a.Token {
				v.add("lock granted to %s with token %d after %s was granted token %d", b.Child, b.Token, a.Child, a.Token)
			}
		}
	}
	return v
}

// advisorySessions describes the server's advisory locks and the sessions
// that hold them, for the report of a takeover that did not happen.
func advisorySessions(url string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err.Error()
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `SELECT l.pid, l.granted, coalesce(a.client_port, 0), coalesce(a.state, ''),
	coalesce(a.wait_event_type, ''), coalesce(a.wait_event, ''), coalesce(left(a.query, 120), ''), coalesce(a.state_change::text, '')
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory'`)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b []byte
	for rows.Next() {
		var (
			pid, port                                int
			granted                                  bool
			state, waitType, waitEvent, query, since string
		)
		if err := rows.Scan(&pid, &granted, &port, &state, &waitType, &waitEvent, &query, &since); err != nil {
			return err.Error()
		}
		b = fmt.Appendf(b, "pid %d granted %v port %d state %q wait %s/%s since %s query %q\n", pid, granted, port, state, waitType, waitEvent, since, query)
	}
	if err := rows.Err(); err != nil {
		return err.Error()
	}
	return string(b)
}
