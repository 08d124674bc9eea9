// Package pglock is a lock.Provider on PostgreSQL session advisory locks, using
// pgx v5.
//
// Each held lock pins one connection from the pool it was given: the
// advisory lock belongs to that server session and lives exactly as long as
// the session holds it. A watcher reads the idle connection and pings it
// every PingInterval. A session the server ends (pg_terminate_backend, a
// shutdown) sends a FATAL error as it goes, and Lost closes on it at once,
// before the server has freed the lock; a failed or slow ping (server
// frozen, network cut) closes Lost within about two intervals. The server
// releases the lock when it notices the session is gone.
//
// # Keys
//
// A name maps to the advisory lock key with Key: the 64-bit FNV-1a hash of
// the name's UTF-8 bytes, read as a two's-complement bigint. Advisory locks
// are database-wide, so deployments sharing a database in different schemas
// set Options.Namespace (KeyIn) to keep their locks apart. Two names that
// collide exclude each other (safe, merely slower); their fencing tokens stay
// separate because the counter row is keyed by name.
//
// # Fencing
//
// Tokens come from the baton_lock_fences table (created by
// pgxstore.Migrate): the statement that takes the advisory lock increments
// the name's counter in the same statement, and only when the lock was
// granted.
//
// # Connection poolers
//
// Session advisory locks need a session: connect directly or through a
// session-mode pooler. PgBouncer in transaction mode hands the server
// session to other clients between statements, so the lock would be held by
// (and released with) someone else's session; do not use it with this
// provider.
package pglock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/lock"
)

// Defaults for Options.
const (
	DefaultPingInterval = time.Second
)

// FencesTable is the table holding the per-name fencing counters.
const FencesTable = "baton_lock_fences"

// Options configure a Provider. The zero value uses the defaults.
type Options struct {
	// Schema holds baton_lock_fences. "" uses the connection's search_path.
	Schema string
	// Namespace separates this deployment's locks from others' in the same
	// database. Advisory locks are database-wide, not per schema: two
	// deployments in different schemas of one database that use the same
	// lock name (say, the outbox's default) would exclude each other. With
	// a namespace the key is KeyIn(Namespace, name) instead of Key(name).
	// Every node of one deployment must use the same namespace.
	Namespace string
	// PingInterval is how often a held lock's connection is pinged, and
	// how long a ping may take before the lock counts as lost (default
	// DefaultPingInterval). A session the server ends is noticed at once,
	// without waiting for a ping.
	PingInterval time.Duration
	// Backoff paces attempts while waiting for a held lock.
	Backoff lock.Backoff
	// Logger receives losses. nil discards.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o Options) withDefaults() Options {
	if o.PingInterval == 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validate checks options that have their defaults.
func (o Options) validate() error {
	switch {
	case o.PingInterval < 0:
		return config.Invalid(lock.ErrInvalidOptions, "pglock.Options.PingInterval", "is %v; it must be positive", o.PingInterval)
	case len(o.Namespace) > lock.MaxNameLength:
		return config.Invalid(lock.ErrInvalidOptions, "pglock.Options.Namespace", "is %d bytes; the limit is %d", len(o.Namespace), lock.MaxNameLength)
	case len(o.Schema) > 63:
		return config.Invalid(lock.ErrInvalidOptions, "pglock.Options.Schema", "is %d bytes; PostgreSQL names are at most 63", len(o.Schema))
	}
	return o.Backoff.Validate()
}

// Provider hands out advisory locks. Create it with NewProvider.
type Provider struct {
	pool *pgxpool.Pool
	opts Options

	acquireSQL string
}

var _ lock.Provider = (*Provider)(nil)

// NewProvider returns a Provider over pool, or an error naming the first invalid
// option. Every held lock keeps one of the pool's connections; size the pool
// (or give the provider a small pool of its own) accordingly.
func NewProvider(pool *pgxpool.Pool, opts Options) (*Provider, error) {
	if pool == nil {
		return nil, config.Invalid(lock.ErrInvalidOptions, "pglock.NewProvider: pool", "is nil")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	table := pgx.Identifier{FencesTable}
	if opts.Schema != "" {
		table = pgx.Identifier{opts.Schema, FencesTable}
	}
	t := table.Sanitize()
	// The CTE calls a volatile function, so PostgreSQL evaluates it exactly
	// once and never folds it away; the counter moves only when the lock was
	// granted, in the same statement.
	acquireSQL := `WITH got AS (SELECT pg_try_advisory_lock($1) AS ok)
INSERT INTO ` + t + ` AS f (name, token) SELECT $2, 1 FROM got WHERE got.ok
ON CONFLICT (name) DO UPDATE SET token = f.token + 1, updated_at = now()
RETURNING token`
	return &Provider{pool: pool, opts: opts, acquireSQL: acquireSQL}, nil
}

// Key is the advisory lock key of a name: FNV-1a 64 of its UTF-8 bytes, as
// a signed bigint. It is fixed; test vectors are in docs/locks.md.
func Key(name string) int64 {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= prime64
	}
	return int64(h)
}

// KeyIn is the advisory lock key of a name within a namespace: FNV-1a 64
// of the namespace's bytes, one 0x1F byte, then the name's bytes.
func KeyIn(namespace, name string) int64 {
	return Key(namespace + "\x1f" + name)
}

// Acquire implements lock.Provider.
func (p *Provider) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	if err := lock.CheckAcquire(name, opts); err != nil {
		return nil, err
	}
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire %q: get a connection: %w", name, err)
	}
	key := Key(name)
	if p.opts.Namespace != "" {
		key = KeyIn(p.opts.Namespace, name)
	}
	var (
		token   int64
		started time.Time
	)
	err = lock.WaitFor(ctx, opts.Wait, p.opts.Backoff, func(ctx context.Context) (bool, <-chan struct{}, error) {
		started = time.Now()
		err := conn.QueryRow(ctx, p.acquireSQL, key, name).Scan(&token)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil, nil
		}
		return err == nil, nil, err
	})
	if err != nil {
		if !errors.Is(err, lock.ErrNotAcquired) {
			// The statement may have taken the session lock before failing
			// (or before ctx ended); only closing the session surely drops it.
			destroy(conn)
			return nil, fmt.Errorf("acquire %q: %w", name, err)
		}
		conn.Release()
		return nil, err
	}
	l := &Lock{
		p:      p,
		name:   name,
		key:    key,
		token:  uint64(token),
		base:   started,
		conn:   conn,
		socket: conn.Conn().PgConn().Conn(),
		lost:   make(chan struct{}),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go l.watch()
	return l, nil
}

// destroy closes the connection's session instead of returning it to the
// pool, which releases every advisory lock it held.
func destroy(conn *pgxpool.Conn) {
	c := conn.Hijack()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = c.Close(ctx)
}

// Lock is a held advisory lock.
type Lock struct {
	p     *Provider
	name  string
	key   int64
	token uint64

	// base is when the acquiring statement started (monotonic); checked
	// is when the last successful connection check started, as an offset
	// from base. Trusted reads them without a lock.
	base    time.Time
	checked atomic.Int64

	mu     sync.Mutex // serialises use of conn
	conn   *pgxpool.Conn
	socket net.Conn // conn's socket, kept for Release to interrupt the watcher
	// waitMu guards waiting, set while the watcher reads the idle socket:
	// only then may Release move the socket's deadline to now.
	waitMu  sync.Mutex
	waiting bool
	lostMu  sync.Mutex
	lost    chan struct{}
	lostErr error

	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

var _ lock.Lock = (*Lock)(nil)

// Name implements lock.Lock.
func (l *Lock) Name() string { return l.name }

// Token implements lock.Lock.
func (l *Lock) Token() uint64 { return l.token }

// Lost implements lock.Lock.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// trustedChecks is how many PingIntervals may pass since the start of the
// last successful connection check before Trusted says no. A check starts
// every interval and may take one; the third absorbs timer and scheduling
// delays, so a healthy lock is never reported untrusted. A process that
// was paused longer cannot know whether the server still has its session,
// and Trusted is false until the next check succeeds.
const trustedChecks = 3

// Trusted implements lock.Lock: Lost is open and a connection check
// succeeded recently (trustedChecks). Unlike a TTL lock, an advisory lock
// lives as long as its session, so a check that succeeds after a pause
// makes it trusted again: the session held the lock throughout.
func (l *Lock) Trusted() bool {
	select {
	case <-l.lost:
		return false
	default:
	}
	return time.Since(l.base)-time.Duration(l.checked.Load()) < trustedChecks*l.p.opts.PingInterval
}

// markLost closes Lost once, remembering why. It reports whether this call
// closed it.
func (l *Lock) markLost(reason error) bool {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	if l.lostErr != nil {
		return false
	}
	l.lostErr = reason
	close(l.lost)
	return true
}

// errStopping ends the watch of a lock being released.
var errStopping = errors.New("released")

// watch checks the session until the lock is released or a check fails.
func (l *Lock) watch() {
	defer close(l.done)
	for {
		l.mu.Lock()
		err := l.check()
		if err != nil && err != errStopping {
			// The session is gone or unresponsive: the server will (or did)
			// drop the lock, so stop trusting it now and close our side.
			destroy(l.conn)
			l.conn = nil
		}
		l.mu.Unlock()
		switch {
		case err == errStopping:
			return
		case err != nil:
			if l.markLost(fmt.Errorf("%w: connection check failed: %w", lock.ErrNotHeld, err)) {
				l.p.opts.Logger.Warn("lock lost", "lock", l.name, "err", err)
			}
			return
		}
	}
}

// check listens to the idle session for one PingInterval, then pings it.
//
// An idle session hears nothing from the server until the session ends:
// pg_terminate_backend and a server shutdown send a FATAL error, then close
// the socket. Reading while waiting turns that into a loss at once, before
// the exiting backend has freed the lock, instead of at the next ping. The ping
// catches what sends nothing: a cut network, a frozen server. The read is
// bounded by a deadline on the socket, not by a context, so it costs no
// cancel request whatever the pool's context handling; Release ends it by
// moving the deadline to now.
func (l *Lock) check() error {
	pc := l.conn.Conn().PgConn()
	l.waitMu.Lock()
	select {
	case <-l.stop:
		l.waitMu.Unlock()
		return errStopping
	default:
	}
	if err := l.socket.SetReadDeadline(time.Now().Add(l.p.opts.PingInterval)); err != nil {
		l.waitMu.Unlock()
		return err
	}
	l.waiting = true
	l.waitMu.Unlock()

	err := pc.WaitForNotification(context.Background())

	l.waitMu.Lock()
	l.waiting = false
	if derr := l.socket.SetReadDeadline(time.Time{}); derr != nil && err == nil {
		err = derr
	}
	l.waitMu.Unlock()
	select {
	case <-l.stop:
		return errStopping
	default:
	}
	if err != nil && !pgconn.Timeout(err) {
		return fmt.Errorf("the server ended the session: %w", err)
	}
	// A notification (nothing on this session listens) or the quiet
	// interval's end: now ask.
	start := time.Since(l.base)
	ctx, cancel := context.WithTimeout(context.Background(), l.p.opts.PingInterval)
	defer cancel()
	if err := l.conn.Ping(ctx); err != nil {
		return err
	}
	l.checked.Store(int64(start))
	return nil
}

// Release implements lock.Lock: it stops trusting the lock first, then
// unlocks and hands the connection back to the pool.
func (l *Lock) Release(ctx context.Context) error {
	wasHeld := l.markLost(fmt.Errorf("%w: released by its holder", lock.ErrNotHeld))
	l.stopOnce.Do(func() {
		close(l.stop)
		// End the watcher's wait at once; never its ping, whose reply a
		// timeout would leave unread (pgx then closes the connection).
		l.waitMu.Lock()
		if l.waiting {
			_ = l.socket.SetReadDeadline(time.Now())
		}
		l.waitMu.Unlock()
	})
	<-l.done

	l.mu.Lock()
	defer l.mu.Unlock()
	if !wasHeld || l.conn == nil {
		return fmt.Errorf("release %q: %w", l.name, lock.ErrNotHeld)
	}
	conn := l.conn
	l.conn = nil
	var unlocked bool
	if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", l.key).Scan(&unlocked); err != nil {
		if conn.Conn().IsClosed() {
			// The session died under us, and the lock with it.
			destroy(conn)
			return fmt.Errorf("release %q: %w: %w", l.name, lock.ErrNotHeld, err)
		}
		destroy(conn) // closing the session releases the lock for sure
		return fmt.Errorf("release %q: %w", l.name, err)
	}
	conn.Release()
	if !unlocked {
		return fmt.Errorf("release %q: %w (the session did not hold it)", l.name, lock.ErrNotHeld)
	}
	return nil
}
