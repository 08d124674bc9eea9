package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/holder"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/locks/pglock"
)

// maintenanceRole is the role lease whose holder runs the maintenance loop
// and serves /maintenance.
const maintenanceRole = "profiles-maintenance"

// shutdownTimeout bounds the graceful part of a shutdown: releasing the
// role and draining requests in flight.
const shutdownTimeout = 10 * time.Second

// Config is everything Run needs. Zero durations take baton's defaults.
type Config struct {
	Listen      string
	DatabaseURL string
	EngineURL   string // "" starts an in-process fake engine
	EngineToken string
	// AdminToken authenticates the operator routes (/status, /maintenance,
	// /admin/outbox/, /engine/deliveries); "" turns them off.
	AdminToken string
	// Users maps each user's name to the bearer token they authenticate
	// with: the profile API's stand-in for a real identity provider.
	Users            map[string]string
	Advertise        string
	Peers            []string // where the holder proxy may forward
	InstanceID       string
	MaintenanceEvery time.Duration

	// Lease and outbox timing; the tests shorten them.
	LeaseDuration    time.Duration
	RenewInterval    time.Duration
	HeldSafetyMargin time.Duration
	OutboxIdleDelay  time.Duration

	// Logger receives the service's and baton's records; nil discards them.
	Logger *slog.Logger
	// Ready, if set, is called once the instance serves requests.
	Ready func(InstanceInfo)
	// Traces, if set, receives the spans of baton's outbox passes and
	// deliveries, as JSON; nil records none.
	Traces io.Writer

	// Leases is the store of the role lease and the partitions; nil is the
	// PostgreSQL lease table in the service's database. Any lease.Store
	// does: the wiring is all that changes.
	Leases lease.Store
	// Locks is the outbox's lock provider (its leader lock); nil is
	// PostgreSQL advisory locks on a small pool of their own.
	Locks lock.Provider
	// Partitions, above 0, registers a partition set of that many roles
	// (PartitionSet:partition-N) on the same manager; /status lists those
	// this instance holds.
	Partitions int
}

// PartitionSet names the partition set that Config.Partitions registers.
const PartitionSet = "profiles"

// InstanceInfo describes a running instance.
type InstanceInfo struct {
	// URL is where the instance serves, from this machine.
	URL string
	// Address is what it advertises to the other instances.
	Address    string
	InstanceID string
	// EngineURL is the graph engine it delivers to.
	EngineURL string
}

// Validate reports the first setting Run cannot work with.
func (c Config) Validate() error {
	switch {
	case c.Listen == "":
		return errors.New("the listen address is empty")
	case c.DatabaseURL == "":
		return errors.New("the database URL is empty")
	case c.MaintenanceEvery <= 0:
		return fmt.Errorf("the maintenance interval is %v; it must be positive", c.MaintenanceEvery)
	case c.Partitions < 0 || c.Partitions > lease.MaxPartitions:
		return fmt.Errorf("the partition count is %d; it must be between 0 and %d", c.Partitions, lease.MaxPartitions)
	case c.EngineToken != "" && c.EngineURL == "":
		return errors.New("an engine token was given without an engine URL; the in-process fake engine takes none")
	case c.AdminToken != "" && len(c.AdminToken) < minTokenLength:
		return fmt.Errorf("the admin token is %d characters; use at least %d random ones", len(c.AdminToken), minTokenLength)
	}
	seen := map[string]string{}
	for name, token := range c.Users {
		switch {
		case !validUserName(name):
			return fmt.Errorf("user name %q: use 1 to 64 letters, digits, '-' or '_'", name)
		case len(token) < minTokenLength:
			return fmt.Errorf("the token of user %q is %d characters; use at least %d random ones", name, len(token), minTokenLength)
		case token == c.AdminToken:
			return fmt.Errorf("user %q has the admin token; every user needs a token of their own", name)
		case seen[token] != "":
			return fmt.Errorf("users %q and %q have the same token", seen[token], name)
		}
		seen[token] = name
	}
	return nil
}

// minTokenLength is the shortest token accepted: a guessable token is no
// authentication.
const minTokenLength = 16

func validUserName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Run serves one instance until ctx ends, then shuts it down in the order
// that lets the other instances take over at once: the role first, then the
// HTTP server, then the outbox driver and the maintenance loop.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	instanceID := cfg.InstanceID
	if instanceID == "" {
		instanceID = lease.DefaultInstanceID()
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("instance", instanceID)
	tel, err := newTelemetry(instanceID, cfg.Traces)
	if err != nil {
		return err
	}
	defer tel.shutdown(context.WithoutCancel(ctx))

	// The application's pool: profiles, the outbox, the lease table.
	poolCfg, err := parseDatabaseURL(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("database pool: %w", err)
	}
	defer pool.Close()
	if err := pgxstore.Migrate(ctx, pool, pgxstore.MigrateOptions{Logger: log}); err != nil {
		return fmt.Errorf("baton schema: %w", err)
	}
	if err := createTables(ctx, pool); err != nil {
		return err
	}

	locks := cfg.Locks
	if locks == nil {
		// The lock provider pins a connection per held lock (the outbox
		// leader lock and its retention lock): it gets a small pool of its
		// own.
		lockPool, err := newLockPool(ctx, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		defer lockPool.Close()
		if locks, err = pglock.NewProvider(lockPool, pglock.Options{Logger: log}); err != nil {
			return err
		}
	}

	locks = tel.obs.Locks(locks) // measured, and reported in baton.role.held

	// The graph engine, and the client that carries our credentials to it.
	engineURL := cfg.EngineURL
	var fake *graphtest.Engine
	if engineURL == "" {
		var err error
		if fake, err = graphtest.NewEngine(); err != nil {
			return err
		}
		defer fake.Close()
		engineURL = fake.URL()
		log.Info("no engine URL given: delivering to a fake graph engine inside this process; GET /engine/deliveries lists what it received",
			"engine", engineURL)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	defer transport.CloseIdleConnections()
	var engineTransport http.RoundTripper = transport
	if cfg.EngineToken != "" {
		engineTransport = &bearerToken{token: cfg.EngineToken, next: transport}
	}
	procs, err := graph.StandardProcessors(graph.ProcessorOptions{
		DeliveryURL: engineURL,
		Client:      &http.Client{Transport: engineTransport},
		Logger:      log,
	})
	if err != nil {
		return err
	}

	// The outbox: every instance runs a driver; the leader lock picks one.
	outboxStore, err := pgxstore.NewOutboxStore(pool, pgxstore.OutboxStoreOptions{Logger: log})
	if err != nil {
		return err
	}
	driver, err := outbox.NewDriver(outbox.Config{
		Store:      outboxStore,
		Locks:      locks,
		Processors: procs,
		Notify:     logNotices(log),
		IdleDelay:  cfg.OutboxIdleDelay,
		Logger:     log,
		Hooks:      tel.obs.Outbox(),
	})
	if err != nil {
		return err
	}

	// The listener first: the advertised address needs its real port.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	served := false
	defer func() {
		if !served {
			ln.Close()
		}
	}()
	self, err := holder.InstanceAddress(ln.Addr().String(), cfg.Advertise)
	if err != nil {
		return fmt.Errorf("instance address (set -advertise): %w", err)
	}

	// The role lease and the proxy that routes /maintenance to its holder.
	leaseStore := cfg.Leases
	if leaseStore == nil {
		if leaseStore, err = pgxstore.NewLeaseStore(pool, pgxstore.LeaseStoreOptions{Logger: log}); err != nil {
			return err
		}
	}
	mgr, err := lease.NewManager(lease.Config{
		Store:            leaseStore,
		InstanceID:       instanceID,
		Address:          self,
		LeaseDuration:    cfg.LeaseDuration,
		RenewInterval:    cfg.RenewInterval,
		HeldSafetyMargin: cfg.HeldSafetyMargin,
		Logger:           log,
		Hooks:            tel.obs.Leases(),
	})
	if err != nil {
		return err
	}
	role, err := mgr.Register(maintenanceRole)
	if err != nil {
		return err
	}
	var partitions *lease.Partition
	if cfg.Partitions > 0 {
		if partitions, err = mgr.RegisterPartition(PartitionSet, cfg.Partitions); err != nil {
			return err
		}
	}
	proxy, err := holder.RoleProxy(mgr.Registry(), maintenanceRole, holder.Config{Self: self, Peers: cfg.Peers, Logger: log}, "/maintenance")
	if err != nil {
		return err
	}

	health, err := probes(driver, mgr)
	if err != nil {
		return err
	}
	svc := &service{
		probes:     health,
		metrics:    tel.metrics,
		tracer:     tel.tracer.Tracer("github.com/baton-go/baton/examples/profiles"),
		pool:       pool,
		outbox:     outboxStore,
		role:       role,
		partitions: partitions,
		instanceID: instanceID,
		address:    self,
		adminToken: cfg.AdminToken,
		users:      newUserTokens(cfg.Users),
		fake:       fake,
		log:        log,
	}
	srv := newHTTPServer(proxy(svc.routes()), log) // the proxy outermost: a non-holder starts no local work

	// Every goroutine is owned here and waited for before Run returns.
	var wg sync.WaitGroup
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoops()
	served = true
	serveErr := make(chan error, 1)
	wg.Go(func() { serveErr <- srv.Serve(ln) })
	wg.Go(func() {
		// Run returns when the shutdown below closes the manager.
		if err := mgr.Run(loops); err != nil {
			log.Warn("lease manager stopped", "err", err)
		}
	})
	wg.Go(func() {
		if err := driver.Run(loops); err != nil && loops.Err() == nil {
			log.Error("outbox driver stopped", "err", err)
		}
	})
	wg.Go(func() { svc.maintain(loops, cfg.MaintenanceEvery) })

	if len(cfg.Users) == 0 {
		log.Warn("no users configured (" + envUsers + "): every request to the profile API is answered 401")
	}
	if cfg.AdminToken == "" {
		log.Warn("no admin token configured (" + envAdminToken + "): the operator routes are off")
	}
	log.Info("serving", "listen", ln.Addr().String(), "advertised", self)
	if cfg.Ready != nil {
		cfg.Ready(InstanceInfo{URL: "http://" + ln.Addr().String(), Address: self, InstanceID: instanceID, EngineURL: engineURL})
	}

	var failed error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		failed = fmt.Errorf("http server: %w", err)
	}

	// Graceful shutdown. Releasing the role first lets another instance
	// take it at once; from then on this one answers /maintenance with
	// 503, never locally, while the server drains what is in flight.
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := mgr.Close(shutdownCtx); err != nil {
		log.Warn("releasing the role failed; another instance takes it when the lease expires", "err", err)
	}
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("http server did not drain in time", "err", err)
		srv.Close()
	}
	stopLoops() // the driver releases its leader lock as it returns
	wg.Wait()
	log.Info("stopped")
	return failed
}

// errBadDatabaseURL says the URL is wrong without quoting it, or the
// driver's message about it: either may hold the password.
var errBadDatabaseURL = errors.New("the database URL is not a valid PostgreSQL connection string (not shown: it may hold a password)")

func parseDatabaseURL(url string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, errBadDatabaseURL
	}
	return pc, nil
}

// newLockPool is a small pool for the lock provider.
func newLockPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pc, err := parseDatabaseURL(url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 3 // two locks held at once, plus one acquiring
	return pgxpool.NewWithConfig(ctx, pc)
}

// logNotices is the outbox's Notify: it logs the notice. In production,
// send it where someone is paged (graph.WebhookNotifier posts it as JSON).
func logNotices(log *slog.Logger) outbox.Notify {
	return func(ctx context.Context, n outbox.Notice) error {
		log.WarnContext(ctx, "outbox notice", "kind", n.Kind, "lane", n.Lane, "entry", n.EntryID,
			"since", n.Since, "last_error", n.LastError, "parked", n.Parked)
		return nil
	}
}

// bearerToken sets the engine token on every request to the engine.
type bearerToken struct {
	token string
	next  http.RoundTripper
}

func (b *bearerToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not change the caller's request
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// newHTTPServer is the service's HTTP server.
func newHTTPServer(h http.Handler, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Every phase of a connection is bounded, so that slow or idle clients
	// cannot hold connections (and the goroutines serving them) for ever.
	// The write bound covers a forwarded request's whole answer: keep it
	// above the holder proxy's ResponseHeaderTimeout (10 s).
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
