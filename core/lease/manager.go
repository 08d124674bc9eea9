package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/health"
)

// ErrClosed is returned by a Manager's methods after Close.
var ErrClosed = errors.New("baton/lease: manager closed")

// watchRetryDelay is the pause before restarting a failed release watch.
const watchRetryDelay = time.Second

// Manager runs the heartbeat of one process: a single loop that renews or
// takes every registered role in one store round trip per RenewInterval.
// Register roles with Register or RegisterPartition, then Run it; when
// Run's ctx ends, or Close is called, it releases everything.
type Manager struct {
	cfg   Config
	store Store
	base  time.Time // monotonic origin of every lease's trust end
	reg   *Registry

	// beat holds a token while a heartbeat or a release runs: one at a
	// time. A channel rather than a mutex, so that a release waiting for a
	// heartbeat is a durable block (testing/synctest can move time on).
	beat chan struct{}
	wake chan struct{}

	// closing is closed when Close begins, done when it has released
	// everything: Run waits for both.
	closing, done chan struct{}

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc // stops the loops
	// beats is the context of every heartbeat's store call. Close does not
	// cancel it while a heartbeat is in flight, so a term that heartbeat
	// wins is seen and released; only Close's own ctx ending cancels it.
	beats       context.Context
	cancelBeats context.CancelFunc
	wg          sync.WaitGroup

	status health.Tracker
}

// NewManager validates cfg and returns a Manager that has not started.
func NewManager(cfg Config) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Manager{
		cfg:     cfg,
		store:   cfg.Store,
		base:    time.Now(),
		reg:     newRegistry(),
		beat:    make(chan struct{}, 1),
		wake:    make(chan struct{}, 1),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
	}, nil
}

// InstanceID is this process's name in the lease table.
func (m *Manager) InstanceID() string { return m.cfg.InstanceID }

// Address is the address this instance advertises.
func (m *Manager) Address() string { return m.cfg.Address }

// Registry lists the manager's leases and partitions.
func (m *Manager) Registry() *Registry { return m.reg }

// Register adds a role to the heartbeat. It fails for an invalid role name
// (ErrInvalidRole) or one already registered (ErrDuplicateRole). A role
// registered while Run runs is claimed at once.
func (m *Manager) Register(role string) (*Lease, error) {
	if err := ValidateRole(role); err != nil {
		return nil, err
	}
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	l := newLease(m, role)
	if err := m.reg.add(nil, l); err != nil {
		return nil, err
	}
	m.poke()
	return l, nil
}

// PartitionRole is the role name of partition i of the named partition set.
func PartitionRole(name string, i int) string {
	return name + partitionInfix + strconv.Itoa(i)
}

// MaxPartitions bounds RegisterPartition's count.
const MaxPartitions = 4096

// RegisterPartition registers count roles named {name}:partition-0 to
// {name}:partition-{count-1}. Every generated name is validated before any
// is registered: it registers all of them or none.
func (m *Manager) RegisterPartition(name string, count int) (*Partition, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: the partition name is empty", ErrInvalidRole)
	}
	if count < 1 || count > MaxPartitions {
		return nil, config.Invalid(ErrInvalidConfig, fmt.Sprintf("partition %q: count", name), "is %d; it must be between 1 and %d", count, MaxPartitions)
	}
	if last := PartitionRole(name, count-1); len(last) > MaxRoleLength {
		return nil, fmt.Errorf("%w: partition %q: its role names run up to %q, %d bytes, over the %d-byte limit",
			ErrInvalidRole, name, last, len(last), MaxRoleLength)
	}
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	p := &Partition{name: name, leases: make([]*Lease, count)}
	for i := range count {
		role := PartitionRole(name, i)
		if err := ValidateRole(role); err != nil {
			return nil, fmt.Errorf("partition %q: %w", name, err)
		}
		p.leases[i] = newLease(m, role)
	}
	if err := m.reg.add(p, p.leases...); err != nil {
		return nil, err
	}
	m.poke()
	return p, nil
}

func (m *Manager) checkOpen() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	return nil
}

// ErrRunning is returned by Run when the manager runs, or ran, already.
var ErrRunning = errors.New("baton/lease: manager already running")

// Run runs the heartbeat, and, when the store can announce releases, the
// watch for them, until ctx ends or Close is called. Then it stops claiming,
// releases every role this instance holds (as Close does) and returns
// once that is done, with the first release error. After ctx ended, the
// releases get a context of their own, bounded by LeaseDuration: past it
// the rows have expired anyway. A manager runs once: Run returns ErrRunning
// when called again, and ErrClosed after Close.
func (m *Manager) Run(ctx context.Context) error {
	if err := m.start(ctx); err != nil {
		return err
	}
	var err error
	select {
	case <-ctx.Done():
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.LeaseDuration)
		err = m.Close(rctx)
		cancel()
	case <-m.closing:
	}
	<-m.done // a Close called by the caller has released everything
	return err
}

// start starts the goroutines, which run until Close.
func (m *Manager) start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.closed:
		return ErrClosed
	case m.started:
		return ErrRunning
	}
	m.started = true
	m.status.Started(time.Now().Add(2 * m.cfg.RenewInterval))
	base := context.WithoutCancel(ctx) // values only
	ctx, m.cancel = context.WithCancel(base)
	m.beats, m.cancelBeats = context.WithCancel(base)
	m.wg.Add(1)
	go m.heartbeatLoop(ctx)
	if w, ok := m.store.(ReleaseWatcher); ok {
		m.wg.Add(1)
		go m.watchLoop(ctx, w)
	}
	return nil
}

// Close stops the heartbeat, then releases every role this instance holds so
// others can take over at once, and makes Run return. Every lease's IsHeld is false by the time
// the first release is sent. A heartbeat in flight is not cancelled (unless
// ctx ends first): Close waits for it, at most RenewInterval, and releases
// any term it won; for a role whose last heartbeat got no answer, it reads
// the row and releases the term it finds held by this instance. It returns
// the first release error.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	cancel, cancelBeats := m.cancel, m.cancelBeats
	close(m.closing)
	m.mu.Unlock()
	defer close(m.done)

	leases := m.reg.all()
	for _, l := range leases {
		l.stop() // stop claiming first, everywhere
	}
	if cancel != nil {
		defer m.status.Stopped()
		cancel()
		stopWatching := context.AfterFunc(ctx, cancelBeats)
		m.wg.Wait()
		stopWatching()
		defer cancelBeats()
	}
	var first error
	for _, l := range leases {
		if err := m.release(ctx, l); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// closeLease stops claiming l and releases its row.
func (m *Manager) closeLease(ctx context.Context, l *Lease) error {
	l.stop()
	return m.release(ctx, l)
}

// release removes a stopped lease from the heartbeat and ends its term.
func (m *Manager) release(ctx context.Context, l *Lease) error {
	// Wait for the heartbeat in flight, if any, so none that still carries
	// this role runs, and so the term released is the latest the store gave
	// us (a heartbeat in flight at stop may have just taken the role).
	m.reg.remove(l)
	select {
	case m.beat <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("baton/lease: release %q: %w", l.role, ctx.Err())
	}
	defer func() { <-m.beat }()
	token, unsure := l.takeClaim()
	if unsure {
		// The last heartbeat that carried this role failed, and the store
		// may have acted on it anyway (a takeover committed, its answer
		// lost): the row says whether a term of ours is current.
		t, err := m.termInStore(ctx, l.role)
		if err != nil {
			return fmt.Errorf("baton/lease: release %q: the last heartbeat's outcome is unknown and reading the role failed: %w", l.role, err)
		}
		token = max(token, t)
	}
	if token == 0 {
		m.reportRelease(ctx, l, 0, false)
		return nil
	}
	released, err := m.store.Release(ctx, l.role, m.cfg.InstanceID, token)
	if err != nil {
		return fmt.Errorf("baton/lease: release %q: %w", l.role, err)
	}
	m.reportRelease(ctx, l, token, released)
	if !released {
		m.cfg.Logger.Info("role was no longer ours at release", "role", l.role, "token", token)
	}
	return nil
}

// termInStore is the token of the role's row when this instance is its
// holder, else 0. Release then ends that term only if it is still current.
func (m *Manager) termInStore(ctx context.Context, role string) (uint64, error) {
	recs, err := m.store.Read(ctx, []string{role})
	if err != nil {
		return 0, err
	}
	for _, r := range recs {
		if r.Role == role && r.Holder == m.cfg.InstanceID {
			return r.Token, nil
		}
	}
	return 0, nil
}

// poke asks for a heartbeat now, without waiting for the next tick.
func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (m *Manager) heartbeatLoop(ctx context.Context) {
	defer m.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.wake:
		}
		select { // this heartbeat answers a pending wake too
		case <-m.wake:
		default:
		}
		began := time.Now()
		m.heartbeat(ctx)
		// Due RenewInterval after this heartbeat began, not after it
		// ended: one that hangs until its timeout (RenewInterval) must not
		// push the next one back, or a single lost packet costs the term.
		t.Reset(time.Until(began.Add(m.cfg.RenewInterval)))
	}
}

// heartbeat renews or takes every registered role in one store call.
func (m *Manager) heartbeat(ctx context.Context) {
	m.beat <- struct{}{}
	defer func() { <-m.beat }()

	leases := m.reg.all()
	claims := make([]Claim, 0, len(leases))
	for i := 0; i < len(leases); {
		c, open := leases[i].claim()
		if !open {
			leases = slices.Delete(leases, i, i+1)
			continue
		}
		claims = append(claims, c)
		i++
	}
	if len(claims) == 0 {
		m.heartbeatEnded(ctx, 0, time.Now(), nil) // nothing to renew: nothing failed
		return
	}
	began := time.Now()
	start := time.Since(m.base)
	// It gives up when the next one is due, so that one starts on time.
	// Its context is not ctx: Close stops the loop but lets the heartbeat
	// in flight finish.
	hctx, cancel := context.WithTimeout(m.beats, m.cfg.RenewInterval)
	recs, err := m.store.Heartbeat(hctx, HeartbeatRequest{
		Holder:        m.cfg.InstanceID,
		Address:       m.cfg.Address,
		LeaseDuration: m.cfg.LeaseDuration,
		Claims:        claims,
	})
	cancel()
	m.heartbeatEnded(ctx, len(claims), began, err)
	if err != nil {
		for _, l := range leases {
			l.failed()
			m.reportRole(ctx, l) // a trust that ran out meanwhile
		}
		if ctx.Err() == nil {
			m.cfg.Logger.Warn("lease heartbeat failed; held roles expire locally unless a later one succeeds",
				"roles", len(claims), "err", err)
		}
		return
	}
	byRole := make(map[string]Record, len(recs))
	for _, r := range recs {
		byRole[r.Role] = r
	}
	for _, l := range leases {
		rec, found := byRole[l.role]
		was := l.term.Load() != nil
		l.apply(rec, found, start)
		m.reportRole(ctx, l)
		if now := rec.Held && found; now != was {
			m.cfg.Logger.Info("role changed", "role", l.role, "held", now, "token", rec.Token, "holder", rec.Holder)
		}
	}
}

func (m *Manager) watchLoop(ctx context.Context, w ReleaseWatcher) {
	defer m.wg.Done()
	for {
		err := w.WatchReleases(ctx, func(role string) {
			if l, ok := m.reg.Lease(role); ok && !l.IsHeld() {
				m.poke()
			}
		})
		if ctx.Err() != nil {
			return
		}
		m.cfg.Logger.Warn("watching lease releases failed; takeovers wait for the next heartbeat", "err", err)
		t := time.NewTimer(watchRetryDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
