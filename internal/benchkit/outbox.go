package benchkit

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	lockmem "github.com/baton-go/baton/locks/memory"
)

// Payload is the payload of every entry and message of every system: a
// realistic event of about 200 bytes of JSON.
var Payload = []byte(`{"resourceType": "profile", "resourceId": "0190f3c2-7a6b-7c3d-9e8f-123456789abc", "relations": [{"relation": "parent", "subjectType": "user", "subjectId": "0190f3c2-7a6b-7c3d-9e8f-cba987654321"}]}`)

// Lanes are the outbox lanes the loaded entries are spread over.
var Lanes = []string{"bench.0", "bench.1", "bench.2"}

// Outbox is baton's outbox in the run's schema, loaded for the relay cells.
type Outbox struct {
	Pool  *pgxpool.Pool
	Store *pgxstore.OutboxStore
}

// NewOutbox migrates baton's tables into pool's schema and returns the
// store over them.
func NewOutbox(ctx context.Context, pool *pgxpool.Pool) (*Outbox, error) {
	if err := pgxstore.Migrate(ctx, pool, pgxstore.MigrateOptions{}); err != nil {
		return nil, err
	}
	st, err := pgxstore.NewOutboxStore(pool, pgxstore.OutboxStoreOptions{})
	if err != nil {
		return nil, err
	}
	return &Outbox{Pool: pool, Store: st}, nil
}

// Load inserts n committed entries, spread over the xids below the
// current horizon and over Lanes, then vacuums and analyzes the table, so
// that every walk reads a settled table (hint bits set, statistics
// current). One statement per 100 000 entries: loading is not measured.
func (o *Outbox) Load(ctx context.Context, n int) error {
	var horizon uint64
	if err := o.Pool.QueryRow(ctx, "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint").Scan(&horizon); err != nil {
		return err
	}
	if horizon < 8 {
		return fmt.Errorf("benchkit: the horizon is %d; the load needs a few xids below it", horizon)
	}
	const chunk = 100_000
	for start := 0; start < n; start += chunk {
		count := min(chunk, n-start)
		_, err := o.Pool.Exec(ctx, `INSERT INTO baton_outbox (xid, id, lane, payload, created_at)
SELECT (1 + (($3::bigint + g - 1) * ($1::bigint - 1)) / $4::bigint)::text::xid8,
       gen_random_uuid(), 'bench.' || (g % 3), $2::jsonb, now() - interval '1 hour'
FROM generate_series(1, $5::bigint) AS g`, int64(horizon), Payload, int64(start), int64(n), int64(count))
		if err != nil {
			return fmt.Errorf("benchkit: load the outbox: %w", err)
		}
	}
	_, err := o.Pool.Exec(ctx, "VACUUM (ANALYZE) baton_outbox")
	return err
}

// ResetCursor removes the stored cursor, so the next walk starts over.
func (o *Outbox) ResetCursor(ctx context.Context) error {
	_, err := o.Pool.Exec(ctx, "DELETE FROM baton_outbox_state WHERE key = ANY ($1)",
		[]string{outbox.KeyLastScannedXID, outbox.KeyLastScannedID, bareCursorKey})
	return err
}

const bareCursorKey = "bench_bare_cursor"

// DriverWalk is baton's relay: the real outbox.Driver with a no-op
// processor per lane, from the start of the table until n entries were
// delivered or d passed.
func (o *Outbox) DriverWalk(batch, n int, d time.Duration) System {
	return o.ObservedDriverWalk("baton driver", nil, batch, n, d)
}

// Observed is how a system is observed: the hooks of each component, and
// the wrapper of its lock provider. The zero value observes nothing.
type Observed struct {
	Outbox  outbox.Hooks
	WorkRow workrow.Hooks
	Locks   func(lock.Provider) lock.Provider
}

// ObservedDriverWalk is DriverWalk under another name, observed by obs
// (nil: not observed).
func (o *Outbox) ObservedDriverWalk(name string, obs *Observed, batch, n int, d time.Duration) System {
	if obs == nil {
		obs = &Observed{}
	}
	return System{
		Name:    name,
		Prepare: o.ResetCursor,
		Run: func(ctx context.Context) (Sample, error) {
			mem, err := lockmem.NewProvider(lockmem.Options{})
			if err != nil {
				return Sample{}, err
			}
			var locks lock.Provider = mem
			if obs.Locks != nil {
				locks = obs.Locks(mem)
			}
			return runDriver(ctx, outbox.Config{Store: o.Store, BatchSize: batch, Locks: locks, Hooks: obs.Outbox}, NewCounter(int64(n)), d, false, nil)
		},
	}
}

// runDriver runs the real outbox.Driver configured by cfg (its Store, Log
// and BatchSize; the rest is filled in here), with a no-op processor per
// lane that counts its deliveries into c, until c reaches its target or d
// passed. steady measures from
// the first delivery (Counter.AwaitSteady) instead of from the start;
// delivered, if set, sees every run first.
func runDriver(ctx context.Context, cfg outbox.Config, c *Counter, d time.Duration, steady bool, delivered func([]outbox.Entry)) (Sample, error) {
	return runDriverThen(ctx, cfg, c, d, steady, delivered, nil)
}

// runDriverThen is runDriver calling atEnd, if set, when the measurement
// ends, before the driver stops.
func runDriverThen(ctx context.Context, cfg outbox.Config, c *Counter, d time.Duration, steady bool, delivered func([]outbox.Entry), atEnd func()) (Sample, error) {
	if cfg.Locks == nil {
		locks, err := lockmem.NewProvider(lockmem.Options{})
		if err != nil {
			return Sample{}, err
		}
		cfg.Locks = locks
	}
	for _, lane := range Lanes {
		// The outcomes are one slice of Delivered per lane, grown to the
		// longest run so far and never written after: the driver only reads
		// them, and a no-op processor costs the walk nothing per entry that
		// the bare walk does not pay.
		var out []outbox.Outcome
		cfg.Processors = append(cfg.Processors, outbox.ProcessorFunc{LaneName: lane, Func: func(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
			if delivered != nil {
				delivered(run)
			}
			if len(run) > len(out) {
				out = make([]outbox.Outcome, len(run))
				for i := range out {
					out[i] = outbox.Delivered()
				}
			}
			c.Add(int64(len(run)))
			return out[:len(run)], nil
		}})
	}
	cfg.RetentionDisabled = true
	cfg.Notify = func(context.Context, outbox.Notice) error { return nil }
	drv, err := outbox.NewDriver(cfg)
	if err != nil {
		return Sample{}, err
	}
	dctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	start := time.Now()
	go func() { defer close(stopped); drv.Run(dctx) }()
	var s Sample
	if steady {
		s, err = c.AwaitSteady(ctx, start, d)
	} else {
		s, err = c.Await(ctx, start, d)
	}
	if atEnd != nil {
		atEnd()
	}
	cancel()
	<-stopped
	return s, err
}

// BareWalk is the physical limit of a relay on this table: the driver's
// own keyset read (OutboxStore.Scan) and one upsert of the cursor per
// batch, nothing else, until n entries or d.
func (o *Outbox) BareWalk(batch, n int, d time.Duration) System {
	const upsert = `INSERT INTO baton_outbox_state (key, value) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET value = excluded.value`
	return System{
		Name:    "bare keyset walk",
		Prepare: o.ResetCursor,
		Run: func(ctx context.Context) (Sample, error) {
			start := time.Now()
			var cur outbox.Cursor
			var walked int64
			for walked < int64(n) && time.Since(start) < d {
				es, err := o.Store.Scan(ctx, cur, batch)
				if err != nil {
					return Sample{}, err
				}
				if len(es) == 0 {
					break
				}
				cur = es[len(es)-1].Cursor()
				xid, id := outbox.CursorState(cur)
				if _, err := o.Pool.Exec(ctx, upsert, bareCursorKey, xid+"/"+id); err != nil {
					return Sample{}, err
				}
				walked += int64(len(es))
			}
			return Sample{Ops: walked, Elapsed: time.Since(start)}, nil
		},
	}
}

// Producers is the enqueue side: business rows and a plain table of the
// outbox's shape beside baton's outbox, in the run's schema.
type Producers struct {
	Pool *pgxpool.Pool
}

// NewProducers creates the business table (bench_profiles), the plain
// table (bench_plain: the outbox's columns, without its xid and walk
// index) and the plain table with them (bench_plain_walk: the outbox's
// shape, without the dead-letter check). The outbox itself comes from
// NewOutbox on the same schema.
func NewProducers(ctx context.Context, pool *pgxpool.Pool) (*Producers, error) {
	_, err := pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS bench_profiles (id uuid PRIMARY KEY, name text NOT NULL, updated_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS bench_plain (id uuid PRIMARY KEY, lane text NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS bench_plain_walk (xid xid8 NOT NULL DEFAULT pg_current_xact_id(), id uuid PRIMARY KEY, lane text NOT NULL, payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS bench_plain_walk_walk ON bench_plain_walk (xid, id)`)
	if err != nil {
		return nil, err
	}
	return &Producers{Pool: pool}, nil
}

// Empty returns a Prepare that empties every table an enqueue cell writes
// (the business rows, both plain tables, the outbox and its cursor) and
// the named others, so that every system's run starts from the same empty
// tables. Without it the outbox, which most systems of the cell write and
// the relay group loads, would be many times larger than the plain
// tables, and an insert into a large primary key of random UUIDs costs
// more than one into a small one: the ratio would measure table sizes.
func (p *Producers) Empty(others ...string) func(ctx context.Context) error {
	tables := append([]string{"bench_profiles", "bench_plain", "bench_plain_walk", "baton_outbox", "baton_outbox_state"}, others...)
	for i, t := range tables {
		tables[i] = pgx.Identifier{t}.Sanitize()
	}
	truncate := "TRUNCATE " + strings.Join(tables, ", ")
	return func(ctx context.Context) error {
		_, err := p.Pool.Exec(ctx, truncate)
		return err
	}
}

// Tx is one producer transaction: BEGIN, the business row, then write
// (the outbox entry or its stand-in) in the same transaction, COMMIT.
func (p *Producers) Tx(ctx context.Context, write func(ctx context.Context, tx pgx.Tx) error) error {
	tx, err := p.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `INSERT INTO bench_profiles (id, name) VALUES ($1, $2)`, [16]byte(outbox.NewID()), "profile name"); err != nil {
		return err
	}
	if err := write(ctx, tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Enqueue is baton's producer: the business row and pgxstore.Enqueue in
// one transaction, from producers goroutines for d.
func (p *Producers) Enqueue(producers int, d time.Duration) System {
	return System{Name: "baton Enqueue", Run: func(ctx context.Context) (Sample, error) {
		return Loop(ctx, producers, d, func(ctx context.Context) error {
			return p.Tx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				return pgxstore.Enqueue(ctx, tx, outbox.NewID(), Lanes[0], Payload)
			})
		})
	}}
}

// PlainInsert is the same transaction with a plain INSERT of the same
// values instead of the enqueue.
func (p *Producers) PlainInsert(producers int, d time.Duration) System {
	return System{Name: "plain INSERT", Run: func(ctx context.Context) (Sample, error) {
		return Loop(ctx, producers, d, func(ctx context.Context) error {
			return p.Tx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO bench_plain (id, lane, payload) VALUES ($1, $2, $3)`,
					[16]byte(outbox.NewID()), Lanes[0], Payload)
				return err
			})
		})
	}}
}

// PlainWithWalkIndex is the same transaction inserting into a table of the
// outbox's very shape, its xid column and (xid, id) index included, with a
// plain INSERT: what is left between it and Enqueue is the dead-letter
// check; between it and PlainInsert, the xid and the second index.
func (p *Producers) PlainWithWalkIndex(producers int, d time.Duration) System {
	return System{Name: "plain INSERT, outbox's indexes", Run: func(ctx context.Context) (Sample, error) {
		return Loop(ctx, producers, d, func(ctx context.Context) error {
			return p.Tx(ctx, func(ctx context.Context, tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO bench_plain_walk (id, lane, payload) VALUES ($1, $2, $3)`,
					[16]byte(outbox.NewID()), Lanes[0], Payload)
				return err
			})
		})
	}}
}
