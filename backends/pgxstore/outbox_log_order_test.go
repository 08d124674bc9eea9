package pgxstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/outboxtest"
	"github.com/baton-go/baton/internal/testenv"
)

// The two properties the logical source is for: commit order under load,
// with a leader killed mid-run, and delivery while the horizon is pinned.

// Sizes of TestOutboxLog_DeliversExactlyTheCommittedEntriesInCommitOrder.
const (
	orderProducers = 8
	orderTxs       = 1000
	orderEntities  = 5
	orderBatch     = 100
)

// sequence records every entry delivered, across lanes and leaders, in
// delivery order.
type sequence struct {
	mu  sync.Mutex
	ids []outbox.ID
}

func (s *sequence) add(run []outbox.Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range run {
		s.ids = append(s.ids, e.ID)
	}
}

func (s *sequence) snapshot() []outbox.ID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

// lanesTo is a processor per lane, recording into seq; block, when it
// returns true for a run, holds that delivery until ctx ends.
func lanesTo(seq *sequence, block func() bool, lanes ...string) []outbox.Processor {
	var procs []outbox.Processor
	for _, lane := range lanes {
		procs = append(procs, outbox.ProcessorFunc{LaneName: lane, Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			seq.add(run)
			if block != nil && block() {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			out := make([]outbox.Outcome, len(run))
			for i := range out {
				out[i] = outbox.Delivered()
			}
			return out, nil
		}})
	}
	return procs
}

// produce runs one producer: txs transactions, each first writing to a
// random place (an unrelated table, a contended entity row, or nothing),
// then changing a contended entity, enqueueing one to three entries, and
// committing, or, one in ten, rolling back.
func produce(ctx context.Context, pool *pgxpool.Pool, seed uint64, txs int, lanes []string, rolledBack *atomic.Int64) error {
	rnd := rand.New(rand.NewPCG(seed, seed*7919))
	for range txs {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// Two entity rows are always taken in id order, so producers
			// wait for each other but never deadlock.
			e1, e2 := rnd.IntN(orderEntities), rnd.IntN(orderEntities)
			e1, e2 = min(e1, e2), max(e1, e2)
			switch rnd.IntN(3) {
			case 0:
				if _, err := tx.Exec(ctx, `INSERT INTO elsewhere VALUES ($1)`, rnd.IntN(1000)); err != nil {
					return err
				}
			case 1:
				if _, err := tx.Exec(ctx, `UPDATE entity SET v = v + 1 WHERE id = $1`, e1); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `UPDATE entity SET v = v + 1 WHERE id = $1`, e2); err != nil {
				return err
			}
			for range 1 + rnd.IntN(3) {
				if err := Enqueue(ctx, tx, outbox.NewID(), lanes[rnd.IntN(len(lanes))], []byte(`{}`)); err != nil {
					return err
				}
			}
			if rnd.IntN(10) == 0 {
				rolledBack.Add(1)
				return errRollBack
			}
			return nil
		})
		if err != nil && !errors.Is(err, errRollBack) {
			return err
		}
	}
	return nil
}

var errRollBack = errors.New("rolled back on purpose")

// firstOccurrences drops repeats, keeping each id where it first came.
func firstOccurrences(ids []outbox.ID) (out []outbox.ID, repeats int) {
	seen := map[outbox.ID]bool{}
	for _, id := range ids {
		if seen[id] {
			repeats++
			continue
		}
		seen[id] = true
		out = append(out, id)
	}
	return out, repeats
}

func TestOutboxLog_DeliversExactlyTheCommittedEntriesInCommitOrder(t *testing.T) {
	e := newLogEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	pool := newPool(t, e.PostgresEnv, func(c *pgxpool.Config) { c.MaxConns = orderProducers + 4 })
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE entity (id int PRIMARY KEY, v int);
CREATE TABLE elsewhere (n int);
INSERT INTO entity SELECT g, 0 FROM generate_series(0, %d) AS g`, orderEntities-1)); err != nil {
		t.Fatal(err)
	}
	lanes := []string{"orders", "invoices"}
	seq := &sequence{}

	// The first leader: killed mid-pass once a third of the transactions
	// are in, while a delivery is under way.
	var passes atomic.Int64
	kill := make(chan struct{})
	var killOnce sync.Once
	first := runDriver(t, e.store, e.store, func(c *outbox.Config) { c.BatchSize = orderBatch; c.IdleDelay = 200 * time.Millisecond },
		lanesTo(seq, func() bool {
			passes.Add(1)
			select {
			case <-kill:
				return true
			default:
				return false
			}
		}, lanes...)...)
	awaitSource(t, e.store, outbox.SourceLogical)

	// The oracle: a second slot, decoding the same commits with
	// test_decoding, from before the first producer's first write.
	oracleSlot := e.slot + "_oracle"
	if err := outboxtest.CreateOracle(ctx, pool, oracleSlot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = e.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, oracleSlot)
	})

	var (
		wg         sync.WaitGroup
		rolledBack atomic.Int64
		done       atomic.Int64
		errs       = make(chan error, orderProducers)
	)
	for p := range orderProducers {
		wg.Go(func() {
			for chunk := 0; chunk < orderTxs; chunk += 100 {
				if err := produce(ctx, pool, uint64(p*orderTxs+chunk+1), 100, lanes, &rolledBack); err != nil {
					errs <- fmt.Errorf("producer %d: %w", p, err)
					return
				}
				if done.Add(100) >= orderProducers*orderTxs/3 {
					killOnce.Do(func() { close(kill) })
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The kill: the first leader is stopped while a delivery blocks, so
	// that pass settles nothing; the second leader takes over.
	eventually(t, 30*time.Second, "the first leader never reached the blocked delivery", func() bool { return len(seq.snapshot()) > 0 })
	first()
	before := len(seq.snapshot())
	runDriver(t, e.store, e.store, func(c *outbox.Config) { c.BatchSize = orderBatch }, lanesTo(seq, nil, lanes...)...)

	want, err := outboxtest.CommitOrder(ctx, pool, oracleSlot, e.Schema)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, fmt.Sprintf("the second leader did not deliver all %d committed entries", len(want)), func() bool {
		got, _ := firstOccurrences(seq.snapshot())
		return len(got) >= len(want)
	})
	got, repeats := firstOccurrences(seq.snapshot())
	if !slices.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		t.Fatalf("delivered %d distinct entries, committed %d; the sequences part at index %d", len(got), len(want), i)
	}
	if repeats > orderBatch {
		t.Fatalf("%d entries delivered twice, more than one pass of %d (what the killed leader delivered and did not settle)", repeats, orderBatch)
	}
	inversions := xidInversions(t, ctx, pool, want)
	t.Logf("%d transactions (%d rolled back), %d entries in commit order, %d delivered before the kill, %d delivered again after it; %d adjacent pairs whose xids are in the opposite order",
		orderProducers*orderTxs, rolledBack.Load(), len(want), before, repeats, inversions)
	if inversions == 0 {
		t.Fatal("no two entries committed in the opposite order of their xids: the load did not test commit order")
	}
}

// xidInversions counts adjacent entries of ids (in commit order) whose
// xids are in the opposite order.
func xidInversions(t *testing.T, ctx context.Context, pool *pgxpool.Pool, ids []outbox.ID) int {
	t.Helper()
	raw := make([][16]byte, len(ids))
	for i, id := range ids {
		raw[i] = id
	}
	rows, err := pool.Query(ctx, `SELECT o.xid::text::numeric FROM unnest($1::uuid[]) WITH ORDINALITY AS u (id, n) JOIN baton_outbox AS o ON o.id = u.id ORDER BY u.n`, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev float64
	n := 0
	for rows.Next() {
		var x float64
		if err := rows.Scan(&x); err != nil {
			t.Fatal(err)
		}
		if x < prev {
			n++
		}
		prev = x
	}
	return n
}

func TestOutboxLog_KeepsDeliveringWhileATransactionPinsTheWalk(t *testing.T) {
	// A server of its own: the transaction held open pins every walk on
	// the server. Mostly waiting, so it runs beside the package's other
	// parallel tests.
	t.Parallel()
	const pinWindows, pinWindow = 4, 3 * time.Second
	srv := testenv.StartPostgresServer(t, testenv.LogicalSettings...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := pgxpool.New(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	schemaPool := func(name string) *testenv.PostgresEnv {
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
			t.Fatal(err)
		}
		cfg, err := pgxpool.ParseConfig(srv.URL() + "&search_path=" + name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return &testenv.PostgresEnv{ServerURL: srv.URL(), URL: cfg.ConnString(), Schema: name, Pool: p}
	}
	walkEnv, logE := schemaPool("walked"), attachLog(t, schemaPool("logged"), logOptions(t))
	mustMigrate(t, ctx, walkEnv.Pool, MigrateOptions{})
	walkStore := mustOutboxStore(t, walkEnv.Pool, OutboxStoreOptions{})
	walked, logged := &sequence{}, &sequence{}
	runDriver(t, walkStore, nil, nil, lanesTo(walked, nil, "a")...)
	runDriver(t, logE.store, logE.store, nil, lanesTo(logged, nil, "a")...)
	awaitSource(t, logE.store, outbox.SourceLogical)

	// A producer commits an entry into each outbox every 100ms.
	var committed atomic.Int64
	pctx, stopProducing := context.WithCancel(ctx)
	var producing sync.WaitGroup
	producing.Go(func() {
		for pctx.Err() == nil {
			for _, p := range []*pgxpool.Pool{walkEnv.Pool, logE.Pool} {
				_ = pgx.BeginFunc(pctx, p, func(tx pgx.Tx) error { return Enqueue(pctx, tx, outbox.NewID(), "a", []byte(`{}`)) })
			}
			committed.Add(1)
			time.Sleep(100 * time.Millisecond)
		}
	})
	defer func() { stopProducing(); producing.Wait() }()
	eventually(t, 10*time.Second, "neither outbox delivers", func() bool {
		return len(walked.snapshot()) > 3 && len(logged.snapshot()) > 3
	})

	// An unrelated transaction takes an xid and stays open for the
	// pinWindows.
	pin, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A failure while pinned must not leave the pin open: the admin pool's
	// Close would wait for its connection for ever.
	defer pin.Rollback(context.WithoutCancel(ctx))
	if _, err := pin.Exec(ctx, `CREATE TABLE unrelated (n int); INSERT INTO unrelated VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	pinnedAt := committed.Load()
	walkAtPin := len(walked.snapshot())
	logAt := len(logged.snapshot())
	for window := range pinWindows {
		time.Sleep(pinWindow)
		n := len(logged.snapshot())
		if n <= logAt {
			t.Fatalf("window %d of the pin: the log delivered nothing more (%d entries)", window+1, n)
		}
		logAt = n
	}
	// The walk has delivered at most what committed before the pin
	// (those committing just as it began may still have been below it).
	walkAtEnd := len(walked.snapshot())
	if walkAtEnd > int(pinnedAt)+1 {
		t.Fatalf("the walk delivered %d entries while pinned, %d committed before the pin", walkAtEnd, pinnedAt)
	}
	if err := pin.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the walk did not catch up once the pin ended", func() bool {
		return len(walked.snapshot()) > walkAtEnd+int(committed.Load()-pinnedAt)/2
	})
	t.Logf("during the %v pin: the walk went from %d to %d entries, the log to %d; %d committed into each in all",
		pinWindows*pinWindow, walkAtPin, walkAtEnd, logAt, committed.Load())
}
