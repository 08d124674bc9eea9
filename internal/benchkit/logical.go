package benchkit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/outbox"
)

// Logical is baton's outbox read from the log beside one walked, on a
// server with wal_level = logical, each in a schema of its own (Env), so
// that the two never share a cursor.
type Logical struct {
	walkPool, logPool *pgxpool.Pool
	walk              *pgxstore.OutboxStore
	log               *pgxstore.OutboxLogStore
	// cpu reads the server's processes during the relay and producer
	// runs; nil when they are not on this machine, cpuErr says why.
	cpu    *ServerCPU
	cpuErr error
}

// LogicalSlot names the bench's slot and publication.
const LogicalSlot = "baton_bench_outbox"

// NewLogical migrates both schemas and switches the log's outbox to the
// log once, so that every measured run reads the log (not the walk that
// precedes the switch).
func NewLogical(ctx context.Context, walkPool, logPool *pgxpool.Pool) (*Logical, error) {
	for _, p := range []*pgxpool.Pool{walkPool, logPool} {
		if err := pgxstore.Migrate(ctx, p, pgxstore.MigrateOptions{}); err != nil {
			return nil, err
		}
	}
	walk, err := pgxstore.NewOutboxStore(walkPool, pgxstore.OutboxStoreOptions{})
	if err != nil {
		return nil, err
	}
	log, err := pgxstore.NewOutboxLogStore(logPool, pgxstore.OutboxLogOptions{Slot: LogicalSlot, Publication: LogicalSlot})
	if err != nil {
		return nil, err
	}
	l := &Logical{walkPool: walkPool, logPool: logPool, walk: walk, log: log}
	l.cpu, l.cpuErr = NewServerCPU(ctx, logPool, LogicalSlot)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stop := l.background(sctx, true, 10*time.Millisecond)
	defer stop()
	for {
		st, err := log.State(sctx)
		if err != nil {
			return nil, err
		}
		if st[outbox.KeySource] == outbox.SourceLogical {
			return l, nil
		}
		select {
		case <-sctx.Done():
			return nil, fmt.Errorf("benchkit: the log did not take over from the walk: %w", sctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// CPUSetting is one line for the report: how the relay and producer runs'
// CPU is measured, or why it is not.
func (l *Logical) CPUSetting() string {
	if l.cpu == nil {
		return "CPU per process: not measured: " + strings.TrimPrefix(l.cpuErr.Error(), "benchkit: ")
	}
	return fmt.Sprintf("CPU per process, logical relay and enqueue: utime+stime of /proc/<pid>/stat (%.0f ticks/s), read at each relay run's first delivery "+
		"or as the producers start, and at the run's end while its driver still runs, per second of that time: the WAL sender serving slot %s (its active_pid at the end), "+
		"the rest of the server (the postmaster and its other children, those that exited during the run included) and the bench process", l.cpu.Tick(), LogicalSlot)
}

// Close drops the slot and the publication (the schemas go with their Env).
func (l *Logical) Close(ctx context.Context) error {
	err := l.log.DropSlot(ctx, true)
	_, perr := l.logPool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+LogicalSlot)
	return errors.Join(err, perr)
}

// source is one side's pool and driver config.
func (l *Logical) source(logical bool) (*pgxpool.Pool, outbox.Config) {
	if logical {
		return l.logPool, outbox.Config{Store: l.log, Log: l.log}
	}
	return l.walkPool, outbox.Config{Store: l.walk}
}

func sideName(logical bool) string {
	if logical {
		return "log"
	}
	return "walk"
}

// insert commits n entries, 100 per transaction, over Lanes.
func insert(ctx context.Context, pool *pgxpool.Pool, n int) error {
	for done := 0; done < n; done += 100 {
		if _, err := pool.Exec(ctx, `INSERT INTO baton_outbox (id, lane, payload)
SELECT gen_random_uuid(), 'bench.' || (g % 3), $1::jsonb FROM generate_series(1, $2::int) AS g`, Payload, min(100, n-done)); err != nil {
			return fmt.Errorf("benchkit: insert entries: %w", err)
		}
	}
	return nil
}

// Relay is the driver delivering n fresh entries (committed 100 per
// transaction before the run, not measured) from the log or by the walk,
// with a no-op processor per lane, measured from its first delivery.
func (l *Logical) Relay(logical bool, batch, n int, d time.Duration) System {
	pool, cfg := l.source(logical)
	cfg.BatchSize = batch
	return System{
		Name: "baton driver, " + sideName(logical),
		Prepare: func(ctx context.Context) error {
			if err := l.drain(ctx, logical); err != nil {
				return err
			}
			if _, err := pool.Exec(ctx, "TRUNCATE baton_outbox"); err != nil {
				return err
			}
			if !logical {
				if _, err := pool.Exec(ctx, "DELETE FROM baton_outbox_state WHERE key = ANY ($1)",
					[]string{outbox.KeyLastScannedXID, outbox.KeyLastScannedID}); err != nil {
					return err
				}
			}
			return insert(ctx, pool, n)
		},
		Run: func(ctx context.Context) (Sample, error) {
			// The CPU from the first delivery, as the rate: the driver's
			// start and the WAL sender's are left out of both.
			var (
				once sync.Once
				end  func(context.Context) *CPUUse
				use  *CPUUse
			)
			first := func([]outbox.Entry) { once.Do(func() { end = l.cpu.Start() }) }
			s, err := runDriverThen(ctx, cfg, NewCounter(int64(n)), d, true, first, func() {
				once.Do(func() {}) // nothing delivered: nothing to measure
				if end != nil {
					use = end(ctx)
				}
			})
			s.CPU = use
			return s, err
		},
	}
}

// background runs a driver on one side until the returned stop;
// delivered, if set, sees every run.
func (l *Logical) background(ctx context.Context, logical bool, idle time.Duration, delivered ...func([]outbox.Entry)) (stop func()) {
	_, cfg := l.source(logical)
	cfg.IdleDelay = idle
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var see func([]outbox.Entry)
	if len(delivered) > 0 {
		see = delivered[0]
	}
	go func() {
		defer close(done)
		_, _ = runDriver(ctx, cfg, NewCounter(1<<62), 1<<62, false, see)
	}()
	return func() { cancel(); <-done }
}

// drain delivers what an earlier run left behind (a run ends at its time
// bound): it commits a marker entry and runs a driver until the marker is
// delivered, which both sources do after everything committed before it.
// The next run starts on an empty outbox.
func (l *Logical) drain(ctx context.Context, logical bool) error {
	pool, _ := l.source(logical)
	marker := outbox.NewID()
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pgxstore.Enqueue(ctx, tx, marker, Lanes[0], Payload) }); err != nil {
		return err
	}
	seen := make(chan struct{})
	var once sync.Once
	stop := l.background(ctx, logical, 10*time.Millisecond, func(run []outbox.Entry) {
		for _, e := range run {
			if e.ID == marker {
				once.Do(func() { close(seen) })
			}
		}
	})
	defer stop()
	select {
	case <-seen:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("benchkit: the %s side did not drain within 5 minutes", sideName(logical))
	}
}

// Enqueue is baton's producer (the business row and pgxstore.Enqueue in
// one transaction) from producers goroutines for d, while a driver
// delivers the side's outbox: the log's with its slot read, or the walk's.
func (l *Logical) Enqueue(logical bool, producers int, d time.Duration) System {
	pool, _ := l.source(logical)
	return System{Name: "baton Enqueue, " + sideName(logical), Run: func(ctx context.Context) (Sample, error) {
		p, err := NewProducers(ctx, pool)
		if err != nil {
			return Sample{}, err
		}
		stop := l.background(ctx, logical, 10*time.Millisecond)
		defer stop()
		end := l.cpu.Start()
		s, err := p.Enqueue(producers, d).Run(ctx)
		s.CPU = end(ctx)
		return s, err
	}}
}

// Latency commits one entry every interval for d, and records each one's
// commit-to-delivery time: from just before its COMMIT to its processor
// call. The walk polls every 10ms (IdleDelay); the log's reader returns as
// soon as an entry comes.
func (l *Logical) Latency(logical bool, every, d time.Duration) System {
	pool, cfg := l.source(logical)
	cfg.IdleDelay = 10 * time.Millisecond
	return System{Name: "commit to delivery, " + sideName(logical), Prepare: func(ctx context.Context) error {
		return l.drain(ctx, logical)
	}, Run: func(ctx context.Context) (Sample, error) {
		var (
			mu     sync.Mutex
			watch  = NewStopwatch[outbox.ID]()
			warm   = outbox.NewID()
			warmed bool
		)
		dctx, cancel := context.WithCancel(ctx)
		defer cancel()
		total := int(d/every) + 1 // and the warm-up entry
		driven := make(chan error, 1)
		go func() {
			_, err := runDriver(dctx, cfg, NewCounter(int64(total)), d+time.Minute, false, func(run []outbox.Entry) {
				for _, e := range run {
					if e.ID == warm {
						mu.Lock()
						warmed = true
						mu.Unlock()
					}
					watch.Stop(e.ID)
				}
			})
			driven <- err
		}()
		// A first entry, not timed, until it is delivered: the driver has
		// started and its reader streams.
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pgxstore.Enqueue(ctx, tx, warm, Lanes[0], Payload) }); err != nil {
			return Sample{}, err
		}
		for deadline := time.Now().Add(time.Minute); ; {
			mu.Lock()
			started := warmed
			mu.Unlock()
			if started {
				break
			}
			if time.Now().After(deadline) {
				return Sample{}, fmt.Errorf("benchkit: the %s side did not deliver its first entry within a minute", sideName(logical))
			}
			select {
			case <-ctx.Done():
				return Sample{}, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		start := time.Now()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 1; i < total; i++ {
			<-tick.C
			id := outbox.NewID()
			tx, err := pool.Begin(ctx)
			if err != nil {
				return Sample{}, err
			}
			if err := pgxstore.Enqueue(ctx, tx, id, Lanes[0], Payload); err != nil {
				_ = tx.Rollback(ctx)
				return Sample{}, err
			}
			watch.Start(id)
			if err := tx.Commit(ctx); err != nil {
				return Sample{}, err
			}
		}
		if err := <-driven; err != nil {
			return Sample{}, err
		}
		lats := watch.Latencies()
		return Sample{Ops: int64(len(lats)), Elapsed: time.Since(start), Latencies: lats}, nil
	}}
}
