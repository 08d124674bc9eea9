package waketest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
)

// probe is a listening session of the scenario's own on a table's
// channel. It holds the table's idle gate, as an idle listener does, so
// producers signal; it counts the signals a commit sends.
type probe struct {
	conn     *pgx.Conn
	admin    *pgxpool.Pool
	channel  string
	sentinel int
}

// listenOn opens a probe on the channel of table (quoted, qualified) whose
// name starts with prefix.
func listenOn(t *testing.T, ctx context.Context, admin *pgxpool.Pool, table, prefix string) *probe {
	t.Helper()
	pc, err := admin.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn := pc.Hijack()
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	})
	var oid uint32
	if err := conn.QueryRow(ctx, "SELECT $1::text::regclass::oid", table).Scan(&oid); err != nil {
		t.Fatalf("the oid of %s: %v", table, err)
	}
	var took bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", pgsql.GateKey(oid)).Scan(&took); err != nil || !took {
		t.Fatalf("take the idle gate of %s: %v, %v", table, took, err)
	}
	p := &probe{conn: conn, admin: admin, channel: prefix + strconv.FormatUint(uint64(oid), 10)}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{p.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return p
}

// signals runs commit, then sends a sentinel on the channel from another
// session, and returns the payloads of the signals received before the
// sentinel. PostgreSQL delivers a channel's notifications in the order of
// their transactions' commits, so these are all that commit sent.
func (p *probe) signals(t *testing.T, ctx context.Context, commit func() error) []string {
	t.Helper()
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	p.sentinel++
	sentinel := fmt.Sprintf("waketest sentinel %d", p.sentinel)
	if _, err := p.admin.Exec(ctx, "SELECT pg_notify($1, $2)", p.channel, sentinel); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		wctx, cancel := context.WithTimeout(ctx, Bound)
		n, err := p.conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for the sentinel on %s: %v", p.channel, err)
		}
		if n.Payload == sentinel {
			return got
		}
		got = append(got, n.Payload)
	}
}

// xidOf is the xid an entry was enqueued under, as text.
func xidOf(t *testing.T, ctx context.Context, o Outbox, id outbox.ID) string {
	t.Helper()
	var xid string
	if err := o.Admin.QueryRow(ctx, "SELECT xid::text FROM "+o.Table+" WHERE id = $1", [16]byte(id)).Scan(&xid); err != nil {
		t.Fatalf("the xid of entry %s: %v", id, err)
	}
	return xid
}

// commitWith is o.Commit for a probe.
func commitWith(ctx context.Context, o Outbox, p Producer, n int, ids *[]outbox.ID) func() error {
	return func() error {
		got, err := o.Commit(ctx, p, n)
		*ids = append(*ids, got...)
		return err
	}
}

// SignalDisabledNeverSignals: with a listener idle (the probe holds the
// gate), a transaction that enqueues through a store built with
// SignalDisabled sends no signal, where the same transaction through a
// store without it sends one.
func SignalDisabledNeverSignals(t *testing.T, o Outbox) {
	ctx := ctxFor(t)
	p := listenOn(t, ctx, o.Admin, o.Table, pgsql.OutboxChannelPrefix)
	var ids []outbox.ID
	if got := p.signals(t, ctx, commitWith(ctx, o, QuietEnqueue, 3, &ids)); len(got) != 0 {
		t.Fatalf("%v sent %d signals %q to an idle listener, want none", QuietEnqueue, len(got), got)
	}
	if got := p.signals(t, ctx, commitWith(ctx, o, StoreEnqueue, 3, &ids)); len(got) != 1 {
		t.Fatalf("%v sent %d signals %q to an idle listener, want one", StoreEnqueue, len(got), got)
	}
}

// SignalsOfOneTransactionFold: several Enqueue calls in one transaction
// send one signal, carrying the transaction's xid, through the package's
// Enqueue and a store's; two transactions send two.
func SignalsOfOneTransactionFold(t *testing.T, o Outbox) {
	ctx := ctxFor(t)
	p := listenOn(t, ctx, o.Admin, o.Table, pgsql.OutboxChannelPrefix)
	for _, prod := range []Producer{PackageEnqueue, StoreEnqueue} {
		var ids []outbox.ID
		got := p.signals(t, ctx, commitWith(ctx, o, prod, 5, &ids))
		if xid := xidOf(t, ctx, o, ids[0]); len(got) != 1 || got[0] != xid {
			t.Fatalf("5 calls of %v in one transaction sent the signals %q, want one carrying its xid %s", prod, got, xid)
		}
	}
	var ids []outbox.ID
	got := p.signals(t, ctx, func() error {
		for range 2 {
			if err := commitWith(ctx, o, PackageEnqueue, 1, &ids)(); err != nil {
				return err
			}
		}
		return nil
	})
	if want := []string{xidOf(t, ctx, o, ids[0]), xidOf(t, ctx, o, ids[1])}; len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("two transactions sent the signals %q, want %q", got, want)
	}
}

// DriverPollOnly: a driver with PollOnly over a store that can wake it
// never listens (it never calls Listen, and no session takes the table's
// idle gate), and delivers by polling.
func DriverPollOnly(t *testing.T, o Outbox) {
	ctx := ctxFor(t)
	waker, ok := o.Store.(outbox.Waker)
	if !ok {
		t.Fatalf("the store %T is no outbox.Waker", o.Store)
	}
	w := &watched{inner: waker}
	d := newDelivered()
	runDriver(t, watchedStore{o.Store, w}, 100*time.Millisecond, d, func(c *outbox.Config) { c.PollOnly = true })
	for range 3 {
		id, err := o.enqueue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d.await(t, id, "polling only")
		gateFree(t, ctx, o.Admin, o.Table, "the driver polls only")
	}
	if n := w.listened(); n != 0 {
		t.Fatalf("the driver with PollOnly called Listen %d times", n)
	}
}

// passes records the passes a driver ended.
type passes struct {
	outbox.NopHooks
	mu   sync.Mutex
	ends []outbox.PassEnd
}

func (p *passes) PassEnded(_ context.Context, e outbox.PassEnd) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ends = append(p.ends, e)
}

func (p *passes) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ends)
}

func (p *passes) since(n int) []outbox.PassEnd {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]outbox.PassEnd(nil), p.ends[n:]...)
}

// BurstIsOneFurtherPass runs on a server of its own (no other test's
// transactions move its horizon): 20 commits while a woken pass is
// delivering are delivered by one further pass, not one per commit, and
// the leader then waits, so that the next commit is one pass again. The
// passes are counted through the driver's hooks.
func BurstIsOneFurtherPass(t *testing.T, o Outbox) {
	ctx := ctxFor(t)
	d := newDelivered()
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d.hold = func(ctx context.Context, _ []outbox.Entry) {
		once.Do(func() {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
	}
	ps := &passes{}
	runDriver(t, o.Store, time.Hour, d, func(c *outbox.Config) { c.Hooks, c.BatchSize = ps, 100 })
	AwaitGate(t, ctx, o.Admin, o.Table, 0)

	first, err := o.enqueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(Bound):
		t.Fatalf("the commit woke no pass within %v", Bound)
	}
	before := ps.count() // the woken pass is delivering: it has not ended
	burst := make([]outbox.ID, 20)
	for i := range burst {
		if burst[i], err = o.enqueue(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	d.await(t, first, "woken")
	for _, id := range burst {
		d.await(t, id, "the burst")
	}
	AwaitGate(t, ctx, o.Admin, o.Table, 0) // idle again
	last, err := o.enqueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d.await(t, last, "after the burst")
	AwaitGate(t, ctx, o.Admin, o.Table, 0)

	ends := ps.since(before)
	var got []string
	for _, e := range ends {
		got = append(got, fmt.Sprintf("%s: scanned %d, delivered %d", e.Outcome, e.Scanned, e.Delivered))
	}
	if len(ends) != 3 || ends[0].Delivered != 1 || ends[1].Delivered != len(burst) || ends[2].Delivered != 1 {
		t.Fatalf("the passes from the woken one on:\n  %s\nwant three: the woken pass (1 entry), one for the burst (%d), one for the next commit (1)",
			strings.Join(got, "\n  "), len(burst))
	}
}

// WorkerPollOnly: a worker with PollOnly over a store that can wake it
// never listens (it never calls Listen, and no session takes the table's
// idle gate), and claims signalled rows by polling.
func WorkerPollOnly[R any](t *testing.T, w Work[R]) {
	ctx := ctxFor(t)
	waker, ok := w.Store.(workrow.Waker)
	if !ok {
		t.Fatalf("the store %T is no workrow.Waker", w.Store)
	}
	ws := &watchedRows[R]{Store: w.Store, inner: waker}
	s := runWorker[R](t, ws, 100*time.Millisecond, func(c *workrow.Config[int64, R]) { c.PollOnly = true })
	for id := int64(1); id <= 3; id++ {
		if err := w.Insert(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		s.await(t, id, "polling only")
		gateFree(t, ctx, w.Admin, w.Table, "the worker polls only")
	}
	if n, _ := ws.counts(); n != 0 {
		t.Fatalf("the worker with PollOnly called Listen %d times", n)
	}
}

// WorkerOwnTable: a signal for other, another table in the same schema,
// wakes other's worker and not w's, which claims a row inserted without a
// signal only when its own table is signalled.
func WorkerOwnTable[R any](t *testing.T, w, other Work[R]) {
	ctx := ctxFor(t)
	waker, ok := w.Store.(workrow.Waker)
	if !ok {
		t.Fatalf("the store %T is no workrow.Waker", w.Store)
	}
	ws := &watchedRows[R]{Store: w.Store, inner: waker}
	s := runWorker[R](t, ws, time.Hour)
	so := runWorker(t, other.Store, time.Hour)
	AwaitGate(t, ctx, w.Admin, w.Table, 0)
	AwaitGate(t, ctx, other.Admin, other.Table, 0)
	ws.awaitWaiting(t)

	if err := w.Insert(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	if err := other.Insert(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	so.await(t, 1, "the other table's worker, woken") // the signal was sent
	time.Sleep(Quiet)
	if _, woken := ws.counts(); woken != 0 || s.handled(1) {
		t.Fatalf("a signal for %s woke the worker of %s (%d wake-ups; row 1 handled: %v)", other.Table, w.Table, woken, s.handled(1))
	}

	if err := w.Insert(ctx, 2, true); err != nil {
		t.Fatal(err)
	}
	s.await(t, 1, "woken by its own table's signal")
	s.await(t, 2, "woken by its own table's signal")
}

// WorkersShareTheGate: a second listener of a table, finding the idle gate
// held by the first, is idle as well, since producers notify while any
// listener holds it; and one signalled commit wakes both. A second listener
// that answered busy would claim again every few milliseconds on an empty
// queue instead of waiting.
func WorkersShareTheGate[R any](t *testing.T, w Work[R]) {
	ctx := ctxFor(t)
	waker, ok := w.Store.(workrow.Waker)
	if !ok {
		t.Fatalf("the store %T is no workrow.Waker", w.Store)
	}
	listeners := make([]workrow.Listener, 2)
	for i := range listeners {
		l, err := waker.Listen(ctx)
		if err != nil {
			t.Fatalf("Listen: %v", err)
		}
		defer l.Close()
		listeners[i] = l
	}
	for i, l := range listeners {
		idle, err := l.Idle(ctx)
		if err != nil || !idle {
			t.Fatalf("listener %d of %s: Idle = %v, %v; want idle, with no producer in flight", i+1, w.Table, idle, err)
		}
	}
	if err := w.Insert(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	for i, l := range listeners {
		wctx, cancel := context.WithTimeout(ctx, Bound)
		err := l.Wait(wctx)
		cancel()
		if err != nil {
			t.Fatalf("listener %d of %s, idle, was not woken by a signalled commit: %v", i+1, w.Table, err)
		}
	}
}
