package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/outboxtest"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/locks/pglock"
)

// This file runs mixed nodes: a pgx node and a bun node over one database,
// competing for the same role lease and the same outbox leader lock.

// newPgxPool opens a pgx pool on the test's schema, closed when the test
// ends: the pgx node's view of the database.
func newPgxPool(t testing.TB, env *testenv.PostgresEnv) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), env.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// mixedLease is long, so that a takeover within half of it can only come
// from a released row, never from one that expired, however loaded the
// machine.
const mixedLease = 20 * time.Second

func startManager(t *testing.T, st lease.Store, id, role string) (*lease.Manager, *lease.Lease) {
	t.Helper()
	m, err := lease.NewManager(lease.Config{
		Store: st, InstanceID: id, Address: "http://" + id,
		LeaseDuration: mixedLease, RenewInterval: 300 * time.Millisecond, HeldSafetyMargin: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Register(role)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = m.Close(context.Background())
		<-done
	})
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m, l
}

// watchExclusive samples the leases until stop closes and fails the test if
// two of them ever claim the role at once.
func watchExclusive(t *testing.T, stop <-chan struct{}, leases ...*lease.Lease) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			held := 0
			for _, l := range leases {
				if l.IsHeld() {
					held++
				}
			}
			if held > 1 {
				t.Errorf("%d instances hold the role at once", held)
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	return &wg
}

func awaitHeld(t *testing.T, l *lease.Lease, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !l.IsHeld() {
		if time.Since(start) > within {
			t.Fatalf("the role was not taken within %v", within)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

// TestMixedNodes_PgxAndBunShareOneRoleLeaseAndHandOverBothWays: a pgx
// manager and a bun manager register the same role; exactly one holds it
// at any moment, and a graceful close on either side hands it to the other
// long before the lease could have run out (the release's NOTIFY wakes the
// other adapter's watcher), with a larger fencing token each time.
func TestMixedNodes_PgxAndBunShareOneRoleLeaseAndHandOverBothWays(t *testing.T) {
	env, db := bunEnv(t)
	channel := "releases " + env.Schema
	pgxStore, err := pgxstore.NewLeaseStore(newPgxPool(t, env), pgxstore.LeaseStoreOptions{Channel: channel})
	if err != nil {
		t.Fatal(err)
	}
	bunStore := mustLeaseStore(t, db, LeaseStoreOptions{Channel: channel})
	const role = "maintenance-coordinator"

	mPgx, lPgx := startManager(t, pgxStore, "pgx-node", role)
	mBun, lBun := startManager(t, bunStore, "bun-node", role)
	stop := make(chan struct{})
	wg := watchExclusive(t, stop, lPgx, lBun)
	defer func() { close(stop); wg.Wait() }()

	// One of them takes the free role; let both heartbeat a while.
	deadline := time.Now().Add(5 * time.Second)
	for !lPgx.IsHeld() && !lBun.IsHeld() {
		if time.Now().After(deadline) {
			t.Fatal("nobody took the free role within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(time.Second)
	holder, holderM, other := lPgx, mPgx, lBun
	otherStore, otherName := lease.Store(pgxStore), "pgx-node-2"
	if lBun.IsHeld() {
		holder, holderM, other = lBun, mBun, lPgx
		otherStore, otherName = bunStore, "bun-node-2"
	}
	firstToken := holder.Token()

	// Handover one way: the holder closes, the other adapter takes over.
	if err := holderM.Close(testContext(t)); err != nil {
		t.Fatal(err)
	}
	took := awaitHeld(t, other, mixedLease/2)
	if other.Token() <= firstToken {
		t.Fatalf("the successor's token %d is not above its predecessor's %d", other.Token(), firstToken)
	}
	secondToken := other.Token()

	// And back: a fresh node of the first adapter waits, the second holder
	// closes.
	_, back := startManager(t, otherStore, otherName, role)
	stop2 := make(chan struct{})
	wg2 := watchExclusive(t, stop2, other, back)
	time.Sleep(500 * time.Millisecond)
	if back.IsHeld() {
		t.Fatal("a new node took a role that was held")
	}
	otherM := mPgx
	if other == lBun {
		otherM = mBun
	}
	if err := otherM.Close(testContext(t)); err != nil {
		t.Fatal(err)
	}
	tookBack := awaitHeld(t, back, mixedLease/2)
	close(stop2)
	wg2.Wait()
	if back.Token() <= secondToken {
		t.Fatalf("the token went from %d to %d; it must grow at every takeover", secondToken, back.Token())
	}
	t.Logf("handover took %v, and %v back; tokens %d, %d, %d", took.Round(time.Millisecond), tookBack.Round(time.Millisecond),
		firstToken, secondToken, back.Token())
}

// TestMixedNodes_OutboxOrderHoldsWithAProducerAndADriverOnEachAdapter: one
// producer enqueues through pgx, one through bun (300 transactions each,
// random lanes, about 10 % rolled back); a pgx driver and a bun driver
// compete for the leader lock (locks/pglock for both); the leader is killed
// mid-run and the other takes over. With duplicates removed, the
// destination must have seen exactly the committed entries, in (xid, id)
// order, and duplicates only from the batch in flight at the takeover.
func TestMixedNodes_OutboxOrderHoldsWithAProducerAndADriverOnEachAdapter(t *testing.T) {
	env, db := bunEnv(t)
	ctx := testContext(t)
	lanes := []string{"profiles", "devices", "tenants"}
	log := &outboxtest.Log{}
	const lockName = "mixed-outbox-driver"

	type node struct {
		name   string
		cancel context.CancelFunc
		done   chan struct{}
	}
	startNode := func(name string, store outbox.Store) *node {
		locks, err := pglock.NewProvider(newPgxPool(t, env), pglock.Options{PingInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var procs []outbox.Processor
		for _, lane := range lanes {
			procs = append(procs, log.Processor(name, lane))
		}
		d, err := outbox.NewDriver(outbox.Config{
			Store: store, Locks: locks, Processors: procs,
			Notify:    func(context.Context, outbox.Notice) error { return nil },
			BatchSize: 50, IdleDelay: 20 * time.Millisecond, ErrorDelay: 50 * time.Millisecond,
			LeaderLockName: lockName, LeaderWait: 200 * time.Millisecond, RetentionDisabled: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithCancel(context.Background())
		n := &node{name: name, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(n.done)
			_ = d.Run(dctx)
		}()
		t.Cleanup(func() { cancel(); <-n.done })
		return n
	}
	pgxStore, err := pgxstore.NewOutboxStore(newPgxPool(t, env), pgxstore.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodes := []*node{startNode("pgx", pgxStore), startNode("bun", mustOutboxStore(t, openBun(t, env), OutboxStoreOptions{}))}

	var (
		mu         sync.Mutex
		committed  []outboxtest.Committed
		rolledBack = map[outbox.ID]bool{}
		txs        atomic.Int64
	)
	record := func(xid uint64, ids []outbox.ID, commit bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if commit {
				committed = append(committed, outboxtest.Committed{XID: xid, ID: id})
			} else {
				rolledBack[id] = true
			}
		}
	}
	const perProducer = 300
	pgxPool := newPgxPool(t, env)
	var wg sync.WaitGroup
	// The pgx producer: pgxstore.Enqueue on a pgx.Tx.
	wg.Go(func() {
		r := rand.New(rand.NewPCG(1, 42))
		for range perProducer {
			tx, err := pgxPool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			var ids []outbox.ID
			for range 1 + r.IntN(3) {
				id := outbox.NewID()
				if err := pgxstore.Enqueue(ctx, tx, id, lanes[r.IntN(len(lanes))], []byte(`{"p":"pgx"}`)); err != nil {
					t.Error(err)
					_ = tx.Rollback(ctx)
					return
				}
				ids = append(ids, id)
				if r.IntN(4) == 0 {
					time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				}
			}
			var xid uint64
			if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text::numeric::bigint").Scan(&xid); err != nil {
				t.Error(err)
				_ = tx.Rollback(ctx)
				return
			}
			if r.IntN(10) == 0 {
				_ = tx.Rollback(ctx)
				record(xid, ids, false)
				continue
			}
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
				return
			}
			txs.Add(1)
			record(xid, ids, true)
		}
	})
	// The bun producer: bunstore.Enqueue inside bun's RunInTx.
	wg.Go(func() {
		r := rand.New(rand.NewPCG(2, 42))
		errRollback := errors.New("roll back") // RunInTx rolls back on an error
		for range perProducer {
			var ids []outbox.ID
			var xid uint64
			rollback := r.IntN(10) == 0
			err := db.RunInTx(ctx, &sql.TxOptions{}, func(ctx context.Context, tx bun.Tx) error {
				for range 1 + r.IntN(3) {
					id := outbox.NewID()
					if err := Enqueue(ctx, tx, id, lanes[r.IntN(len(lanes))], []byte(`{"p":"bun"}`)); err != nil {
						return err
					}
					ids = append(ids, id)
					if r.IntN(4) == 0 {
						time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
					}
				}
				if err := tx.NewRaw("SELECT pg_current_xact_id()::text::numeric::bigint").Scan(ctx, &xid); err != nil {
					return err
				}
				if rollback {
					return errRollback
				}
				return nil
			})
			switch {
			case rollback && err == errRollback:
				record(xid, ids, false)
			case err != nil:
				t.Error(err)
				return
			default:
				txs.Add(1)
				record(xid, ids, true)
			}
		}
	})

	// Kill the leader once it has delivered a good part of the stream.
	var killed *node
	for deadline := time.Now().Add(time.Minute); killed == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the leader never delivered 300 entries")
		}
		seen, by := log.Snapshot()
		if len(seen) >= 300 {
			for _, n := range nodes {
				if by[n.name] > 0 {
					killed = n
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A crash: the lock's session dies with the process, and the process
	// stops wherever it was.
	key := uint64(pglock.Key(lockName))
	if _, err := pgxPool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND classid::text::bigint = $1 AND objid::text::bigint = $2`, int64(key>>32), int64(key&0xffffffff)); err != nil {
		t.Fatal(err)
	}
	killed.cancel()
	<-killed.done
	killedAt := time.Now()

	wg.Wait()
	if t.Failed() {
		return
	}
	res := outboxtest.Verify(t, log, committed, rolledBack, killedAt, 50, time.Minute)
	by := res.ByDriver
	if by["pgx"] == 0 || by["bun"] == 0 {
		t.Errorf("deliveries per driver %v: both adapters should have led (one before the kill, the other after)", by)
	}
	t.Logf("%d transactions committed, %d rolled back entries, %d entries delivered in order by %s then the other; %d duplicates at the takeover; deliveries per driver %v",
		txs.Load(), len(rolledBack), res.Distinct, killed.name, res.Duplicates, by)
}
