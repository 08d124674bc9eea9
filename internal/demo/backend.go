package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/internal/cli"
	lockmem "github.com/baton-go/baton/locks/memory"
	"github.com/baton-go/baton/locks/pglock"
	lockredis "github.com/baton-go/baton/locks/redis"
)

// demoBackend is where the demo's instances keep their state: the memory
// stores, or a PostgreSQL schema (with advisory or Redis locks). With a
// Coordination, the backend keeps the outbox, the projections and the
// profiles only; its instances' Leases and Locks are left nil.
type demoBackend interface {
	// Describe says what the instances run on, for the header.
	Describe() string
	// Check reaches the servers the backend needs, before the demo prints
	// its header or creates anything, so a wrong address is one clear
	// error and nothing to clean up.
	Check(ctx context.Context) error
	// Setup prepares the shared state (a schema, a Redis prefix).
	Setup(ctx context.Context) error
	// Instance returns one instance's view: its own connections, like a
	// separate process would have.
	Instance(ctx context.Context, name string) (*instanceDeps, error)
	// Outbox is an outbox store for the demo itself: progress and the
	// final verification.
	Outbox() outbox.Store
	// KillStory says what a kill does to the instance's locks (with a
	// Coordination: to the rest, or "" when there is nothing to say).
	KillStory() string
	// LockFailover is how long a crashed leader's lock can keep the
	// others out, and why, for the failover bound.
	LockFailover() (time.Duration, string)
	// LeaderLockName is the outbox driver's lock. PostgreSQL advisory
	// locks are database-wide, not per schema, so a demo on a shared
	// database uses a name of its own rather than the default one that a
	// real deployment in the same database may hold.
	LeaderLockName() string
	// Teardown removes what Setup made (unless asked to keep it).
	Teardown(ctx context.Context) error
}

// instanceDeps is what one instance of the service runs on.
type instanceDeps struct {
	Leases     lease.Store
	Outbox     outbox.Store
	Projection projection.Store
	Locks      lock.Provider
	// Begin starts a business transaction: a profile change plus its
	// outbox entries, committed or rolled back together.
	Begin func(ctx context.Context) (profileTx, error)
	// LockLapse is how long a lock the instance held stays held after it
	// crashed, where the provider cannot show that by itself (memory locks
	// live in this process, so a crash cannot make them lapse).
	LockLapse time.Duration
	// Crash ends the instance's sessions the way a killed process would:
	// nothing is released, the servers find out by themselves.
	Crash func(ctx context.Context) error
	// Close releases the instance's connections after it stopped.
	Close func()
}

// profileTx is one business transaction of the demo service.
type profileTx interface {
	// Create inserts a profile row; Update locks an existing one, then
	// changes its label. Either is the transaction's first write, so the
	// row lock decides the order of two changes to one profile before
	// either takes its xid.
	Create(ctx context.Context, id, label string) error
	Update(ctx context.Context, id, label string) error
	// Enqueue writes an outbox entry in the transaction.
	Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error
	// XID is the transaction's xid (after its first enqueue).
	XID(ctx context.Context) (uint64, error)
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

var errNoProfile = errors.New("no such profile")

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ---- memory ----

// memoryBackend is the embedded default: memory stores and memory locks
// shared by the instances, as one database and one lock server would be.
type memoryBackend struct {
	t           Timings
	coordinated bool // the leases and locks live elsewhere
	leases      *memory.LeaseStore
	outbox      *memory.OutboxStore
	proj        *memory.ProjectionStore
	locks       *lockmem.Provider
	profiles    *memProfiles
}

func newMemoryBackend(t Timings, coordinated bool) *memoryBackend {
	return &memoryBackend{t: t, coordinated: coordinated}
}

func (b *memoryBackend) Describe() string {
	if b.coordinated {
		return "memory stores (backends/memory) for the outbox, the projections and the profiles"
	}
	return "memory stores (backends/memory), memory locks (locks/memory); no server needed"
}

func (b *memoryBackend) KillStory() string {
	if b.coordinated {
		return ""
	}
	return "its lock lapses after its TTL, as a crashed holder's would (memory locks live in this process, so the demo lets it lapse)"
}

func (b *memoryBackend) Check(context.Context) error { return nil }

func (b *memoryBackend) Setup(context.Context) error {
	locks, err := lockmem.NewProvider(lockmem.Options{
		TTL: b.t.LockTTL, SafetyMargin: b.t.LockSafetyMargin, Backoff: b.t.LockBackoff,
	})
	if err != nil {
		return err
	}
	b.locks = locks
	if b.leases, err = memory.NewLeaseStore(memory.LeaseStoreOptions{}); err != nil {
		return err
	}
	if b.outbox, err = memory.NewOutboxStore(memory.OutboxStoreOptions{}); err != nil {
		return err
	}
	if b.proj, err = memory.NewProjectionStore(memory.ProjectionStoreOptions{}); err != nil {
		return err
	}
	b.profiles = &memProfiles{rows: map[string]*memRow{}}
	return nil
}

func (b *memoryBackend) Instance(context.Context, string) (*instanceDeps, error) {
	deps := &instanceDeps{
		Outbox:     b.outbox,
		Projection: b.proj,
		Begin: func(ctx context.Context) (profileTx, error) {
			otx, err := b.outbox.Begin(ctx)
			if err != nil {
				return nil, err
			}
			return &memTx{p: b.profiles, otx: otx}, nil
		},
		Crash: func(context.Context) error { return nil },
		Close: func() {},
	}
	if !b.coordinated {
		deps.Leases, deps.Locks, deps.LockLapse = b.leases, b.locks, b.t.LockTTL
	}
	return deps, nil
}

func (b *memoryBackend) Outbox() outbox.Store { return b.outbox }

func (b *memoryBackend) LockFailover() (time.Duration, string) {
	return b.t.LockTTL, "memory lock TTL " + b.t.LockTTL.String()
}

func (b *memoryBackend) LeaderLockName() string { return outbox.DefaultLeaderLockName }

func (b *memoryBackend) Teardown(context.Context) error { return nil }

// memProfiles is the demo service's profile table, in memory: a row lock
// per profile, held from the transaction's first write to its end.
type memProfiles struct {
	mu   sync.Mutex
	rows map[string]*memRow
}

type memRow struct {
	lock   chan struct{} // a one-slot semaphore: the row lock
	label  string
	exists bool // committed
}

// lockRow takes the row lock, waiting for the transaction holding it.
func (r *memRow) lockRow(ctx context.Context) error {
	select {
	case r.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *memRow) unlock() { <-r.lock }

// memTx is a business transaction on the memory backend: the profile row
// lock, the staged label, and the outbox transaction.
type memTx struct {
	p      *memProfiles
	otx    *memory.OutboxTx
	row    *memRow
	id     string
	label  string
	create bool
	done   bool
}

func (tx *memTx) Create(ctx context.Context, id, label string) error {
	row := &memRow{lock: make(chan struct{}, 1)}
	row.lock <- struct{}{}
	tx.p.mu.Lock()
	if _, ok := tx.p.rows[id]; ok {
		tx.p.mu.Unlock()
		return fmt.Errorf("profile %q exists", id)
	}
	tx.p.rows[id] = row
	tx.p.mu.Unlock()
	tx.row, tx.id, tx.label, tx.create = row, id, label, true
	return nil
}

func (tx *memTx) Update(ctx context.Context, id, label string) error {
	tx.p.mu.Lock()
	row, ok := tx.p.rows[id]
	tx.p.mu.Unlock()
	if !ok {
		return errNoProfile
	}
	if err := row.lockRow(ctx); err != nil {
		return err
	}
	if !row.exists { // its creating transaction rolled back meanwhile
		row.unlock()
		return errNoProfile
	}
	tx.row, tx.id, tx.label = row, id, label
	return nil
}

func (tx *memTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	return tx.otx.Enqueue(ctx, id, lane, payload)
}

func (tx *memTx) XID(context.Context) (uint64, error) { return tx.otx.XID(), nil }

func (tx *memTx) Commit(ctx context.Context) error {
	if tx.done {
		return errors.New("transaction already ended")
	}
	tx.done = true
	if err := tx.otx.Commit(ctx); err != nil {
		tx.undo()
		return err
	}
	if tx.row != nil {
		tx.row.label, tx.row.exists = tx.label, true
		tx.row.unlock()
	}
	return nil
}

func (tx *memTx) Rollback(ctx context.Context) error {
	if tx.done {
		return nil
	}
	tx.done = true
	err := tx.otx.Rollback(ctx)
	tx.undo()
	return err
}

// undo forgets the staged change and releases the row lock.
func (tx *memTx) undo() {
	if tx.row == nil {
		return
	}
	if tx.create {
		tx.p.mu.Lock()
		delete(tx.p.rows, tx.id)
		tx.p.mu.Unlock()
	}
	tx.row.unlock()
}

// ---- PostgreSQL ----

// postgresBackend runs the demo in a schema of its own on a real server,
// with PostgreSQL advisory locks or, given an address, Redis locks.
type postgresBackend struct {
	t           Timings
	url         string
	redisAddr   string
	keep        bool
	coordinated bool // the leases and locks live elsewhere

	tag     string // random: names the schema, the application names, the Redis prefix
	schema  string
	admin   *pgxpool.Pool
	store   *pgxstore.OutboxStore
	created bool
}

func newPostgresBackend(t Timings, url, redisAddr string, keep, coordinated bool) *postgresBackend {
	tag := randomHex(4)
	return &postgresBackend{t: t, url: url, redisAddr: redisAddr, keep: keep, coordinated: coordinated, tag: tag, schema: "baton_demo_" + tag}
}

func (b *postgresBackend) Describe() string {
	if b.coordinated {
		return fmt.Sprintf("PostgreSQL stores (backends/pgxstore) in schema %s for the outbox, the projections and the profiles", b.schema)
	}
	locks := "PostgreSQL advisory locks (locks/pglock)"
	if b.redisAddr != "" {
		locks = "Redis locks at " + b.redisAddr + " (locks/redis)"
	}
	return fmt.Sprintf("PostgreSQL stores (backends/pgxstore) in schema %s, %s", b.schema, locks)
}

func (b *postgresBackend) KillStory() string {
	if b.coordinated {
		return "its database sessions are terminated"
	}
	if b.redisAddr != "" {
		return "its database sessions are terminated and its Redis client closed: its lock key expires after the TTL"
	}
	return "its database sessions are terminated, which frees its advisory lock at once, as a crash would"
}

func (b *postgresBackend) profilesTable() string {
	return pgx.Identifier{b.schema, "demo_profiles"}.Sanitize()
}

func (b *postgresBackend) redisPrefix() string { return "baton-demo-" + b.tag + ":" }

// silenceRedis turns off go-redis's own logger, process-wide: it would
// print its dial errors beside the demo's one clear error.
var silenceRedis sync.Once

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func (b *postgresBackend) Check(ctx context.Context) error {
	pool, err := cli.OpenPool(ctx, b.url, "--postgres")
	if err != nil {
		return err
	}
	if b.redisAddr != "" {
		silenceRedis.Do(func() { goredis.SetLogger(quietRedis{}) })
		// One dial, no retries: a wrong address says so once.
		c := goredis.NewClient(&goredis.Options{Addr: b.redisAddr, MaxRetries: -1, DialTimeout: cli.ConnectTimeout})
		pctx, cancel := context.WithTimeout(ctx, cli.ConnectTimeout)
		err := c.Ping(pctx).Err()
		cancel()
		_ = c.Close()
		if err != nil {
			pool.Close()
			return fmt.Errorf("--redis %s: cannot reach Redis: %w", b.redisAddr, err)
		}
	}
	b.admin = pool
	return nil
}

func (b *postgresBackend) Setup(ctx context.Context) error {
	pool := b.admin
	if err := pgxstore.Migrate(ctx, pool, pgxstore.MigrateOptions{Schema: b.schema}); err != nil {
		return err
	}
	b.created = true
	if _, err := pool.Exec(ctx, `CREATE TABLE `+b.profilesTable()+` (
		id      text PRIMARY KEY,
		label   text NOT NULL,
		version integer NOT NULL DEFAULT 1
	)`); err != nil {
		return fmt.Errorf("create the demo's profiles table: %w", err)
	}
	store, err := pgxstore.NewOutboxStore(pool, pgxstore.OutboxStoreOptions{Schema: b.schema})
	b.store = store
	return err
}

// appName is an instance's application_name, which finds its sessions.
func (b *postgresBackend) appName(name string) string { return "baton-demo-" + b.tag + "-" + name }

func (b *postgresBackend) Instance(ctx context.Context, name string) (*instanceDeps, error) {
	cfg, err := cli.ParseConnString(b.url, "--postgres")
	if err != nil {
		return nil, err
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = b.schema
	cfg.ConnConfig.RuntimeParams["application_name"] = b.appName(name)
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, cli.Redact(err, b.url, cfg.ConnConfig.Password)
	}
	deps := &instanceDeps{
		Begin: func(ctx context.Context) (profileTx, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, err
			}
			return &pgTx{b: b, tx: tx}, nil
		},
	}
	fail := func(err error) (*instanceDeps, error) {
		pool.Close()
		return nil, err
	}
	outboxStore, err := pgxstore.NewOutboxStore(pool, pgxstore.OutboxStoreOptions{Schema: b.schema})
	if err != nil {
		return fail(err)
	}
	deps.Outbox = outboxStore
	if deps.Projection, err = pgxstore.NewProjectionStore(pool, pgxstore.ProjectionStoreOptions{Schema: b.schema}); err != nil {
		return fail(err)
	}
	var client *goredis.Client
	switch {
	case b.coordinated:
	case b.redisAddr != "":
		client = goredis.NewClient(&goredis.Options{Addr: b.redisAddr})
		if deps.Locks, err = lockredis.NewProvider(client, lockredis.Options{
			Prefix: b.redisPrefix(), TTL: b.t.LockTTL, SafetyMargin: b.t.LockSafetyMargin, Backoff: b.t.LockBackoff,
		}); err != nil {
			_ = client.Close()
			return fail(err)
		}
	default:
		if deps.Locks, err = pglock.NewProvider(pool, pglock.Options{
			Schema: b.schema, PingInterval: b.t.PingInterval, Backoff: b.t.LockBackoff,
		}); err != nil {
			return fail(err)
		}
	}
	if !b.coordinated {
		if deps.Leases, err = pgxstore.NewLeaseStore(pool, pgxstore.LeaseStoreOptions{Schema: b.schema, Channel: b.schema}); err != nil {
			return fail(err)
		}
	}
	var closeClient sync.Once
	deps.Crash = func(ctx context.Context) error {
		// A killed process's connections die with it: the server ends
		// its sessions (and their advisory locks), Redis keys lapse.
		if client != nil {
			closeClient.Do(func() { _ = client.Close() })
		}
		_, err := b.admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", b.appName(name))
		return err
	}
	deps.Close = func() {
		if client != nil {
			closeClient.Do(func() { _ = client.Close() })
		}
		pool.Close()
	}
	return deps, nil
}

func (b *postgresBackend) Outbox() outbox.Store { return b.store }

func (b *postgresBackend) LockFailover() (time.Duration, string) {
	if b.redisAddr != "" {
		return b.t.LockTTL + b.t.LockBackoff.Max, "Redis lock TTL " + b.t.LockTTL.String() + " + retry " + b.t.LockBackoff.Max.String()
	}
	return b.t.PingInterval + b.t.LockBackoff.Max, "advisory lock freed with the session; ping " + b.t.PingInterval.String() +
		" + retry " + b.t.LockBackoff.Max.String()
}

func (b *postgresBackend) LeaderLockName() string { return "baton-demo-" + b.tag + "-outbox" }

func (b *postgresBackend) Teardown(ctx context.Context) error {
	if b.admin == nil {
		return nil
	}
	defer b.admin.Close()
	if b.keep || !b.created {
		return nil
	}
	var errs []error
	if _, err := b.admin.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{b.schema}.Sanitize()+" CASCADE"); err != nil {
		errs = append(errs, fmt.Errorf("drop schema %s: %w", b.schema, err))
	}
	if b.redisAddr != "" {
		c := goredis.NewClient(&goredis.Options{Addr: b.redisAddr})
		iter := c.Scan(ctx, 0, b.redisPrefix()+"*", 100).Iterator()
		for iter.Next(ctx) {
			_ = c.Del(ctx, iter.Val()).Err()
		}
		if err := iter.Err(); err != nil {
			errs = append(errs, fmt.Errorf("delete the demo's Redis keys: %w", err))
		}
		_ = c.Close()
	}
	return errors.Join(errs...)
}

// pgTx is a business transaction on PostgreSQL.
type pgTx struct {
	b  *postgresBackend
	tx pgx.Tx
}

func (t *pgTx) Create(ctx context.Context, id, label string) error {
	_, err := t.tx.Exec(ctx, "INSERT INTO "+t.b.profilesTable()+" (id, label) VALUES ($1, $2)", id, label)
	return err
}

func (t *pgTx) Update(ctx context.Context, id, label string) error {
	// Lock the row first: FOR UPDATE takes no xid, so a second change of
	// the profile takes its xid only after the first one ended.
	var one int
	err := t.tx.QueryRow(ctx, "SELECT 1 FROM "+t.b.profilesTable()+" WHERE id = $1 FOR UPDATE", id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return errNoProfile
	}
	if err != nil {
		return err
	}
	_, err = t.tx.Exec(ctx, "UPDATE "+t.b.profilesTable()+" SET label = $2, version = version + 1 WHERE id = $1", id, label)
	return err
}

func (t *pgTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	return pgxstore.Enqueue(ctx, t.tx, id, lane, payload) // search_path names the demo's schema
}

func (t *pgTx) XID(ctx context.Context) (uint64, error) {
	var s string
	if err := t.tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text").Scan(&s); err != nil {
		return 0, err
	}
	return strconv.ParseUint(s, 10, 64)
}

func (t *pgTx) Commit(ctx context.Context) error { return t.tx.Commit(ctx) }

func (t *pgTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
