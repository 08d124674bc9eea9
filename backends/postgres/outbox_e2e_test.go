package postgres

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
	"github.com/baton-go/baton/locks/pg"
)

// delivery is one entry as a processor saw it, with when.
type delivery struct {
	id outbox.ID
	at time.Time
}

// deliveryLog is shared by the processors of every driver in a test: the
// order in which the destination saw the entries.
type deliveryLog struct {
	mu   sync.Mutex
	seen []delivery
	by   map[string]int // deliveries per driver
}

func (l *deliveryLog) processor(driver, lane string) outbox.Processor {
	return outbox.ProcessorFunc{LaneName: lane, Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
		out := make([]outbox.Outcome, len(run))
		for i, e := range run {
			if ctx.Err() != nil { // lost the lock: stop, like a real processor's request would
				for j := i; j < len(run); j++ {
					out[j] = outbox.Retry("not attempted")
				}
				return out, nil
			}
			l.mu.Lock()
			l.seen = append(l.seen, delivery{e.ID, time.Now()})
			l.by[driver]++
			l.mu.Unlock()
			out[i] = outbox.Delivered()
		}
		return out, nil
	}}
}

func (l *deliveryLog) snapshot() ([]delivery, map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	by := map[string]int{}
	for k, v := range l.by {
		by[k] = v
	}
	return slices.Clone(l.seen), by
}

type committedEntry struct {
	xid uint64
	id  outbox.ID
}

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
	log := &deliveryLog{by: map[string]int{}}

	const lockName = "e2e-outbox-driver"
	type node struct {
		name   string
		pool   *pgxpool.Pool
		cancel context.CancelFunc
		done   chan struct{}
	}
	startNode := func(name string) *node {
		pool := newPool(t, env, nil)
		locks, err := pg.New(pool, pg.Options{PingInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		store, err := NewOutboxStore(pool, OutboxStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var procs []outbox.Processor
		for _, lane := range lanes {
			procs = append(procs, log.processor(name, lane))
		}
		d, err := outbox.New(outbox.Config{
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
		committed  []committedEntry
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
					committed = append(committed, committedEntry{xid, id})
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
		seen, by := log.snapshot()
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
	key := uint64(pg.Key(lockName))
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
	slices.SortFunc(committed, func(a, b committedEntry) int {
		return cmp.Or(cmp.Compare(a.xid, b.xid), a.id.Compare(b.id))
	})

	// Wait until the survivor has delivered everything committed.
	var seen []delivery
	var by map[string]int
	for deadline := time.Now().Add(2 * time.Minute); ; {
		seen, by = log.snapshot()
		if len(dedup(seen)) >= len(committed) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := dedup(seen)
	if len(got) != len(committed) {
		t.Fatalf("delivered %d distinct entries, committed %d", len(got), len(committed))
	}
	for i := range committed {
		if got[i] != committed[i].id {
			t.Fatalf("delivery %d is %s, want %s: the walk is not in (xid, id) order", i, got[i], committed[i].id)
		}
	}
	for _, d := range seen {
		if rolledBack[d.id] {
			t.Fatalf("rolled-back entry %s was delivered", d.id)
		}
	}
	// Duplicates: only entries first delivered by the dead leader and then
	// again by its successor, at most the batch it had in flight.
	first := map[outbox.ID]time.Time{}
	dups := 0
	for _, d := range seen {
		at, ok := first[d.id]
		if !ok {
			first[d.id] = d.at
			continue
		}
		dups++
		if at.After(killedAt) || d.at.Before(killedAt) {
			t.Errorf("entry %s delivered twice away from the takeover (%v then %v, leader killed at %v)", d.id, at, d.at, killedAt)
		}
	}
	if dups > 100 {
		t.Errorf("%d duplicate deliveries; want at most one batch (100)", dups)
	}
	t.Logf("%d transactions committed, %d rolled back entries, %d entries delivered in order; %d duplicates at the takeover; deliveries per driver %v",
		txs.Load(), len(rolledBack), len(got), dups, by)
}

// dedup keeps the first delivery of each entry, in order.
func dedup(seen []delivery) []outbox.ID {
	done := make(map[outbox.ID]bool, len(seen))
	out := make([]outbox.ID, 0, len(seen))
	for _, d := range seen {
		if !done[d.id] {
			done[d.id] = true
			out = append(out, d.id)
		}
	}
	return out
}
