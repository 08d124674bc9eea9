package pgxstore

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/outboxtest"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/locks/pglock"
)

// TestOutbox_EndToEndOrderSurvivesConcurrencyRollbacksAndLeaderLoss runs 8
// producers × 1 000 transactions (random lanes, about 10 % rolled back,
// random pauses inside the transactions) while two drivers compete for the
// leader lock; the leader is killed mid-run (its lock session terminated,
// its process gone) and the other takes over. With duplicates removed, the
// destination must have seen exactly the committed entries in (xid, id)
// order; nothing lost, nothing rolled back, and duplicates only from the
// batch in flight at the takeover.
func TestOutbox_EndToEndOrderSurvivesConcurrencyRollbacksAndLeaderLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("8 000 transactions")
	}
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	lanes := []string{"profiles", "devices", "tenants"}
	log := &outboxtest.Log{}

	const lockName = "e2e-outbox-driver"
	type node struct {
		name   string
		pool   *pgxpool.Pool
		cancel context.CancelFunc
		done   chan struct{}
	}
	startNode := func(name string) *node {
		pool := newPool(t, env, nil)
		locks, err := pglock.NewProvider(pool, pglock.Options{PingInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		store, err := NewOutboxStore(pool, OutboxStoreOptions{})
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
			BatchSize: 100, IdleDelay: 20 * time.Millisecond, ErrorDelay: 50 * time.Millisecond,
			LeaderLockName: lockName, LeaderWait: 200 * time.Millisecond, RetentionDisabled: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		dctx, cancel := context.WithCancel(context.Background())
		n := &node{name: name, pool: pool, cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(n.done)
			d.Run(dctx)
		}()
		t.Cleanup(func() { cancel(); <-n.done })
		return n
	}
	nodes := []*node{startNode("a"), startNode("b")}

	// The producers.
	var (
		mu         sync.Mutex
		committed  []outboxtest.Committed
		rolledBack = map[outbox.ID]bool{}
		txs        atomic.Int64
	)
	const producers, perProducer = 8, 1000
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(p), 42))
			for range perProducer {
				tx, err := env.Pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				n := 1 + r.IntN(3)
				var mine []outbox.ID
				for range n {
					id := outbox.NewID()
					if err := Enqueue(ctx, tx, id, lanes[r.IntN(len(lanes))], []byte(`{"p":1}`)); err != nil {
						t.Error(err)
						tx.Rollback(ctx)
						return
					}
					mine = append(mine, id)
					if r.IntN(4) == 0 {
						time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
					}
				}
				var xid uint64
				if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text::numeric::bigint").Scan(&xid); err != nil {
					t.Error(err)
					tx.Rollback(ctx)
					return
				}
				if r.IntN(10) == 0 {
					tx.Rollback(ctx)
					mu.Lock()
					for _, id := range mine {
						rolledBack[id] = true
					}
					mu.Unlock()
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					t.Error(err)
					return
				}
				txs.Add(1)
				mu.Lock()
				for _, id := range mine {
					committed = append(committed, outboxtest.Committed{XID: xid, ID: id})
				}
				mu.Unlock()
			}
		})
	}

	// Kill the leader once it has delivered a good part of the stream.
	var killedAt time.Time
	var killed *node
	deadline := time.Now().Add(2 * time.Minute)
	for killed == nil {
		if time.Now().After(deadline) {
			t.Fatal("the leader never delivered 4 000 entries")
		}
		seen, by := log.Snapshot()
		if len(seen) >= 4000 {
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
	if _, err := env.Pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND objsubid = 1
  AND classid::text::bigint = $1 AND objid::text::bigint = $2`, int64(key>>32), int64(key&0xffffffff)); err != nil {
		t.Fatal(err)
	}
	killed.cancel()
	<-killed.done
	killedAt = time.Now()

	wg.Wait()
	if t.Failed() {
		return
	}
	res := outboxtest.Verify(t, log, committed, rolledBack, killedAt, 100, 2*time.Minute)
	t.Logf("%d transactions committed, %d rolled back entries, %d entries delivered in order; %d duplicates at the takeover; deliveries per driver %v",
		txs.Load(), len(rolledBack), res.Distinct, res.Duplicates, res.ByDriver)
}
