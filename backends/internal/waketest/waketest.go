// Package waketest holds the wake-up scenarios both PostgreSQL adapters
// run against a real server: a driver and a worker woken by a signalled
// commit with an IdleDelay so long that only a wake-up can deliver, the
// fallback to polling when the listening connection is killed and the
// return of wake-ups once it listens again, delivery after a pinned
// horizon, poll-only mode, producers that must not signal, the folding of
// one transaction's signals, one further pass for a burst of commits, the
// work-row channel of each table, and two idle listeners of one table
// sharing its gate. The adapters' tests give the
// scenarios their stores.
package waketest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	"github.com/baton-go/baton/locks/memory"
)

// Bound is how long a scenario waits for what must happen: only a hang
// reaches it.
const Bound = 30 * time.Second

// Quiet is how long a scenario watches for a wake-up that must not come. A
// correct store never sends one, so no timing can fail it; a broken one
// wakes the worker within milliseconds.
const Quiet = 300 * time.Millisecond

// Producer is the Enqueue a producer transaction calls.
type Producer int

const (
	// PackageEnqueue is the adapter's package-level Enqueue, which always
	// signals.
	PackageEnqueue Producer = iota
	// StoreEnqueue is the Enqueue method of an OutboxStore built with the
	// default options.
	StoreEnqueue
	// QuietEnqueue is the Enqueue method of an OutboxStore built with
	// OutboxStoreOptions.SignalDisabled.
	QuietEnqueue
)

func (p Producer) String() string {
	switch p {
	case PackageEnqueue:
		return "the package-level Enqueue"
	case StoreEnqueue:
		return "a store's Enqueue"
	case QuietEnqueue:
		return "the Enqueue of a store with SignalDisabled"
	}
	return "Producer(" + strconv.Itoa(int(p)) + ")"
}

// Outbox is an adapter's outbox, as the scenarios use it.
type Outbox struct {
	// Store is the adapter's store; it must be an outbox.Waker.
	Store outbox.Store
	// Admin reaches the same database, for pg_locks, pg_terminate_backend
	// and transactions held open.
	Admin *pgxpool.Pool
	// Table is the outbox table, quoted and qualified as the store's
	// statements name it.
	Table string
	// Commit commits one producer transaction that enqueues n entries on
	// Lane, each by its own call of p, and returns their ids.
	Commit func(ctx context.Context, p Producer, n int) ([]outbox.ID, error)
}

// enqueue commits one producer transaction with one entry, through the
// package-level Enqueue, and returns the entry's id.
func (o Outbox) enqueue(ctx context.Context) (outbox.ID, error) {
	ids, err := o.Commit(ctx, PackageEnqueue, 1)
	if err != nil {
		return outbox.ID{}, err
	}
	if len(ids) != 1 {
		return outbox.ID{}, fmt.Errorf("waketest: Commit returned %d ids for one entry", len(ids))
	}
	return ids[0], nil
}

// Work is an adapter's work table, as the scenarios use it: columns id
// (bigint), completed_at (timestamptz NULL) and the two lock columns.
type Work[R any] struct {
	Store workrow.Store[int64, R]
	Admin *pgxpool.Pool
	Table string // quoted and qualified
	// Insert commits one producer transaction that inserts row id and,
	// when signal is set, signals the table with the adapter's helper.
	Insert func(ctx context.Context, id int64, signal bool) error
}

// Gate returns the pid of the session holding table's idle gate
// exclusively, 0 when none: the listener that is idle.
func Gate(ctx context.Context, admin *pgxpool.Pool, table string) (int32, error) {
	var pid int32
	err := admin.QueryRow(ctx, `SELECT coalesce((SELECT l.pid FROM pg_locks AS l
WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ExclusiveLock' AND l.objsubid = 1
  AND l.classid::int8 = $1 AND l.objid::int8 = $2::text::regclass::oid::int8
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
LIMIT 1), 0)`, int64(pgsql.GateKeyPrefix), table).Scan(&pid)
	return pid, err
}

// AwaitGate waits until a session other than not holds table's gate, and
// returns its pid.
func AwaitGate(t *testing.T, ctx context.Context, admin *pgxpool.Pool, table string, not int32) int32 {
	t.Helper()
	for deadline := time.Now().Add(Bound); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		pid, err := Gate(ctx, admin, table)
		if err != nil {
			t.Fatal(err)
		}
		if pid != 0 && pid != not {
			return pid
		}
	}
	t.Fatalf("no listener took the idle gate of %s within %v", table, Bound)
	return 0
}

// terminate ends the backend pid with pg_terminate_backend.
func terminate(t *testing.T, ctx context.Context, admin *pgxpool.Pool, pid int32) {
	t.Helper()
	var killed bool
	if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, killed, err)
	}
}

// gateFree fails unless nobody holds table's gate, that is, nobody
// listens; while says what the scenario is doing, for the message.
func gateFree(t *testing.T, ctx context.Context, admin *pgxpool.Pool, table, while string) {
	t.Helper()
	if pid, err := Gate(ctx, admin, table); err != nil || pid != 0 {
		t.Fatalf("the gate of %s is held by session %d (%v) while %s", table, pid, err, while)
	}
}

// watched is a store whose listening the scenario can cut off and watch.
type watched struct {
	inner   outbox.Waker
	mu      sync.Mutex
	blocked bool
	woken   []uint64
	listens int // calls of Listen
}

var errBlocked = errors.New("waketest: listening is blocked")

func (w *watched) Listen(ctx context.Context) (outbox.Listener, error) {
	w.mu.Lock()
	blocked := w.blocked
	w.listens++
	w.mu.Unlock()
	if blocked {
		return nil, errBlocked
	}
	l, err := w.inner.Listen(ctx)
	if err != nil {
		return nil, err
	}
	return &watchedListener{Listener: l, w: w}, nil
}

// listened is how many times the driver called Listen.
func (w *watched) listened() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listens
}

func (w *watched) block(b bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blocked = b
}

func (w *watched) wokenBy(xid uint64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.woken {
		if x >= xid {
			return true
		}
	}
	return false
}

type watchedListener struct {
	outbox.Listener
	w *watched
}

func (l *watchedListener) Wait(ctx context.Context) (uint64, error) {
	xid, err := l.Listener.Wait(ctx)
	if err == nil {
		l.w.mu.Lock()
		l.w.woken = append(l.w.woken, xid)
		l.w.mu.Unlock()
	}
	return xid, err
}

type watchedStore struct {
	outbox.Store
	*watched
}

// delivered is a processor's record of the entries it was given.
type delivered struct {
	// hold, when set, is called with every run before it is recorded.
	hold func(ctx context.Context, run []outbox.Entry)
	mu   sync.Mutex
	seen map[outbox.ID]outbox.Entry
	at   map[outbox.ID]time.Time
}

func (d *delivered) processor(lane string) outbox.Processor {
	return outbox.ProcessorFunc{LaneName: lane, Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
		if d.hold != nil {
			d.hold(ctx, run)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		out := make([]outbox.Outcome, len(run))
		for i, e := range run {
			d.seen[e.ID], d.at[e.ID] = e, time.Now()
			out[i] = outbox.Delivered()
		}
		return out, nil
	}}
}

func (d *delivered) get(id outbox.ID) (outbox.Entry, time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.seen[id]
	return e, d.at[id], ok
}

// await waits until id is delivered.
func (d *delivered) await(t *testing.T, id outbox.ID, what string) (outbox.Entry, time.Time) {
	t.Helper()
	for deadline := time.Now().Add(Bound); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if e, at, ok := d.get(id); ok {
			return e, at
		}
	}
	t.Fatalf("%s: entry %s not delivered within %v", what, id, Bound)
	return outbox.Entry{}, time.Time{}
}

// Lane is the lane the scenarios enqueue on.
const Lane = "wake"

// runDriver runs a driver over store until the test ends; with, when
// given, changes its config first.
func runDriver(t *testing.T, store outbox.Store, idle time.Duration, d *delivered, with ...func(*outbox.Config)) {
	t.Helper()
	locks, err := memory.NewProvider(memory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := outbox.Config{
		Store: store, Locks: locks, Processors: []outbox.Processor{d.processor(Lane)},
		Notify:    func(context.Context, outbox.Notice) error { return nil },
		IdleDelay: idle, ErrorDelay: time.Second, RetentionDisabled: true,
	}
	for _, f := range with {
		f(&cfg)
	}
	drv, err := outbox.NewDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = drv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func newDelivered() *delivered {
	return &delivered{seen: map[outbox.ID]outbox.Entry{}, at: map[outbox.ID]time.Time{}}
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// DriverWakes: with IdleDelay an hour, an entry committed while the
// leader is idle is delivered, which only a wake-up can do.
func DriverWakes(t *testing.T, o Outbox) {
	ctx := ctxFor(t)
	d := newDelivered()
	runDriver(t, o.Store, time.Hour, d)
	AwaitGate(t, ctx, o.Admin, o.Table, 0)
	for range 3 {
		committed := time.Now()
		id, err := o.enqueue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, at := d.await(t, id, "woken")
		t.Logf("delivered %v after the commit returned", at.Sub(committed).Round(10*time.Microsecond))
		AwaitGate(t, ctx, o.Admin, o.Table, 0) // idle again
	}
}

// DriverFallback kills the leader's listening connection with
// pg_terminate_backend: the entries go on being delivered by polling
// while it cannot listen again, and once it listens again a commit wakes
// it.
func DriverFallback(t *testing.T, o Outbox) {
	ctx := ctxFor(t)
	waker, ok := o.Store.(outbox.Waker)
	if !ok {
		t.Fatalf("the store %T is no outbox.Waker", o.Store)
	}
	w := &watched{inner: waker}
	d := newDelivered()
	const idle = 300 * time.Millisecond
	runDriver(t, watchedStore{o.Store, w}, idle, d)
	first := AwaitGate(t, ctx, o.Admin, o.Table, 0)

	w.block(true)
	terminate(t, ctx, o.Admin, first)
	for range 3 {
		id, err := o.enqueue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		d.await(t, id, "polling with the listening connection killed")
		gateFree(t, ctx, o.Admin, o.Table, "listening is blocked")
	}

	w.block(false)
	AwaitGate(t, ctx, o.Admin, o.Table, first)
	id, err := o.enqueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := d.await(t, id, "listening again")
	for deadline := time.Now().Add(Bound); !w.wokenBy(e.XID); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the listener that came back was never woken by the commit of xid %d", e.XID)
		}
	}
}

// PinnedHorizon runs on a server of its own (no other test's transactions
// move its horizon): while a transaction holding an xid stays open for 2s,
// a signalled entry committed after it cannot be delivered; once it ends,
// the entry is delivered, with IdleDelay an hour, so by the driver's
// re-scans after the signal, not by a poll.
func PinnedHorizon(t *testing.T, o Outbox) {
	ctx := ctxFor(t)
	d := newDelivered()
	runDriver(t, o.Store, time.Hour, d)
	AwaitGate(t, ctx, o.Admin, o.Table, 0)

	holder, err := o.Admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.WithoutCancel(ctx))
	if _, err := holder.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	id, err := o.enqueue(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if _, _, ok := d.get(id); ok {
		t.Fatal("the entry was delivered while an older transaction held the horizon back")
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ended := time.Now()
	_, at := d.await(t, id, "after the horizon passed")
	t.Logf("delivered %v after the pinning transaction ended", at.Sub(ended).Round(100*time.Microsecond))
}

// runWorker runs a Worker over store until the test ends, recording the
// rows whose handler started.
func runWorker[R any](t *testing.T, store workrow.Store[int64, R], idle time.Duration, with ...func(*workrow.Config[int64, R])) *started {
	t.Helper()
	s := &started{at: map[int64]time.Time{}}
	cfg := workrow.Config[int64, R]{
		Store:    store,
		Eligible: workrow.IsNull("completed_at"),
		Attempt:  func(R) int { return 1 },
		OnComplete: func(now time.Time) []workrow.Set {
			return []workrow.Set{workrow.Assign("completed_at", now)}
		},
		Handler: func(_ context.Context, c workrow.Claimed[int64, R]) workrow.Outcome {
			s.mu.Lock()
			s.at[c.ID] = time.Now()
			s.mu.Unlock()
			return workrow.Complete()
		},
		IdleDelay: idle, ErrorDelay: time.Second, FlushInterval: time.Millisecond,
	}
	for _, f := range with {
		f(&cfg)
	}
	wk, err := workrow.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = wk.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s
}

type started struct {
	mu sync.Mutex
	at map[int64]time.Time
}

// handled reports whether row id's handler has started.
func (s *started) handled(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.at[id]
	return ok
}

func (s *started) await(t *testing.T, id int64, what string) time.Time {
	t.Helper()
	for deadline := time.Now().Add(Bound); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		at, ok := s.at[id]
		s.mu.Unlock()
		if ok {
			return at
		}
	}
	t.Fatalf("%s: row %d was not handled within %v", what, id, Bound)
	return time.Time{}
}

// WorkerWakes: with IdleDelay an hour, a row inserted and signalled while
// the worker is idle is handled, which only a wake-up can do.
func WorkerWakes[R any](t *testing.T, w Work[R]) {
	ctx := ctxFor(t)
	s := runWorker(t, w.Store, time.Hour)
	AwaitGate(t, ctx, w.Admin, w.Table, 0)
	for id := int64(1); id <= 3; id++ {
		committed := time.Now()
		if err := w.Insert(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		at := s.await(t, id, "woken")
		t.Logf("handler started %v after the insert committed", at.Sub(committed).Round(10*time.Microsecond))
		AwaitGate(t, ctx, w.Admin, w.Table, 0)
	}
}

// watchedRows is a work store whose listening the scenario can cut off
// and watch.
type watchedRows[R any] struct {
	workrow.Store[int64, R]
	inner   workrow.Waker
	mu      sync.Mutex
	blocked bool
	woken   int
	listens int // calls of Listen
	waiting int // calls of Wait in progress
}

func (w *watchedRows[R]) Listen(ctx context.Context) (workrow.Listener, error) {
	w.mu.Lock()
	blocked := w.blocked
	w.listens++
	w.mu.Unlock()
	if blocked {
		return nil, errBlocked
	}
	l, err := w.inner.Listen(ctx)
	if err != nil {
		return nil, err
	}
	return watchedRowListener[R]{l, w}, nil
}

func (w *watchedRows[R]) set(blocked bool) (woken int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.blocked = blocked
	return w.woken
}

// counts returns how many times Listen was called and how many times
// Wait returned a signal.
func (w *watchedRows[R]) counts() (listens, woken int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.listens, w.woken
}

// awaitWaiting waits until the worker waits for a signal: it has made the
// claim that follows its Idle, and claims again only when woken.
func (w *watchedRows[R]) awaitWaiting(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(Bound); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		w.mu.Lock()
		waiting := w.waiting
		w.mu.Unlock()
		if waiting > 0 {
			return
		}
	}
	t.Fatalf("the worker did not wait for a signal within %v", Bound)
}

type watchedRowListener[R any] struct {
	workrow.Listener
	w *watchedRows[R]
}

func (l watchedRowListener[R]) Wait(ctx context.Context) error {
	l.w.mu.Lock()
	l.w.waiting++
	l.w.mu.Unlock()
	err := l.Listener.Wait(ctx)
	l.w.mu.Lock()
	l.w.waiting--
	if err == nil {
		l.w.woken++
	}
	l.w.mu.Unlock()
	return err
}

// WorkerFallback kills the worker's listening connection with
// pg_terminate_backend: rows go on being handled by polling while it
// cannot listen again, and once a new session holds the gate a signalled
// insert wakes it.
func WorkerFallback[R any](t *testing.T, w Work[R]) {
	ctx := ctxFor(t)
	waker, ok := w.Store.(workrow.Waker)
	if !ok {
		t.Fatalf("the store %T is no workrow.Waker", w.Store)
	}
	ws := &watchedRows[R]{Store: w.Store, inner: waker}
	const idle = 300 * time.Millisecond
	s := runWorker[R](t, ws, idle)
	first := AwaitGate(t, ctx, w.Admin, w.Table, 0)
	ws.set(true)
	terminate(t, ctx, w.Admin, first)
	for id := int64(1); id <= 3; id++ {
		if err := w.Insert(ctx, id, true); err != nil {
			t.Fatal(err)
		}
		s.await(t, id, "polling with the listening connection killed")
		gateFree(t, ctx, w.Admin, w.Table, "listening is blocked")
	}
	ws.set(false)
	AwaitGate(t, ctx, w.Admin, w.Table, first)
	before := ws.set(false)
	if err := w.Insert(ctx, 4, true); err != nil {
		t.Fatal(err)
	}
	s.await(t, 4, "listening again")
	for deadline := time.Now().Add(Bound); ws.set(false) == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the listener that came back was never woken by the signalled insert")
		}
	}
}
