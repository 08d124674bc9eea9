package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/lock"
)

// Defaults for LockProviderOptions.
const (
	DefaultLockTTL      = 10 * time.Second
	DefaultSafetyMargin = time.Second
	// Waiters are woken by a watch on the lock's key; the backoff only
	// paces the attempts a missed or late event would leave waiting.
	DefaultLockRetryMin = 5 * time.Millisecond
	DefaultLockRetryMax = 250 * time.Millisecond
)

// LockProviderOptions configure a LockProvider. The zero value uses the
// defaults.
type LockProviderOptions struct {
	// Prefix starts every key of the provider (default DefaultPrefix): locks
	// live under Prefix+"lock/".
	Prefix string
	// TTL is the provider's session lease, renewed every TTL/3 while a lock
	// is held (default DefaultLockTTL). It bounds how long a crashed
	// holder blocks its locks. etcd leases are whole seconds, so it must be
	// one; the cluster may grant more (its minimum TTL), never less.
	TTL time.Duration
	// SafetyMargin shortens the holder's trust window below TTL (default
	// DefaultSafetyMargin). It must be below two thirds of TTL.
	SafetyMargin time.Duration
	// Backoff paces attempts while waiting for a held lock (default
	// DefaultLockRetryMin to DefaultLockRetryMax).
	Backoff lock.Backoff
	// Logger receives refresh failures and losses. nil discards.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o LockProviderOptions) withDefaults() LockProviderOptions {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.TTL == 0 {
		o.TTL = DefaultLockTTL
	}
	if o.SafetyMargin == 0 {
		o.SafetyMargin = DefaultSafetyMargin
	}
	if o.Backoff == (lock.Backoff{}) {
		o.Backoff = lock.Backoff{Min: DefaultLockRetryMin, Max: DefaultLockRetryMax}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validate checks options that have their defaults.
func (o LockProviderOptions) validate() error {
	bad := func(field, format string, args ...any) error {
		return config.Invalid(lock.ErrInvalidOptions, "etcd.LockProviderOptions."+field, format, args...)
	}
	if err := checkPrefix(lock.ErrInvalidOptions, "etcd.LockProviderOptions.Prefix", o.Prefix); err != nil {
		return err
	}
	switch {
	case o.TTL < time.Second || o.TTL%time.Second != 0:
		return bad("TTL", "is %v; it must be a whole number of seconds, at least 1s (etcd leases are)", o.TTL)
	}
	if err := lock.CheckSafetyMargin("etcd.LockProviderOptions.SafetyMargin", o.TTL, o.SafetyMargin); err != nil {
		return err
	}
	if err := o.Backoff.Validate(); err != nil {
		return config.Wrap(lock.ErrInvalidOptions, "etcd.LockProviderOptions", err)
	}
	return nil
}

// LockProvider is a lock.Provider on etcd. Create it with
// NewLockProvider.
//
// A held lock is the key Prefix+"lock/"+name, attached to the provider's
// session: one etcd lease shared by all of its locks, like the session of
// etcd's own concurrency package. Acquiring is one transaction (put the key
// if absent, else read it), releasing another (delete it if it is still
// this acquisition's). The fencing token is the key's create revision:
// cluster-wide, it only grows.
//
// Each held lock runs the shared keepalive of core/lock, which renews the
// session and checks that the key is still there, and fails closed: the
// holder trusts the lock until the start of its last successful renewal
// plus TTL minus SafetyMargin. A revoked or expired session, or a deleted
// key, closes Lost at the next renewal.
type LockProvider struct {
	client *clientv3.Client
	opts   LockProviderOptions
	prefix string
	ttl    int64 // seconds

	renewMu sync.Mutex // one session renewal or grant at a time; never held by a lock's refresh

	mu      sync.Mutex
	closed  bool
	sess    clientv3.LeaseID // 0 before the first lock, or after it was lost
	renewed time.Time        // start of the session's last successful grant or renewal
}

var _ lock.Provider = (*LockProvider)(nil)

// NewLockProvider returns a LockProvider over client, or an error naming
// the first invalid option. It sends nothing to etcd.
func NewLockProvider(client *clientv3.Client, opts LockProviderOptions) (*LockProvider, error) {
	if client == nil {
		return nil, config.Invalid(lock.ErrInvalidOptions, "etcd.NewLockProvider: client", "is nil")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &LockProvider{
		client: client,
		opts:   opts,
		prefix: opts.Prefix + "lock/",
		ttl:    int64(opts.TTL / time.Second),
	}, nil
}

// LockKey is the key of the named lock, for operators and tests.
func (p *LockProvider) LockKey(name string) string { return p.prefix + name }

// Session is the ID of the provider's current session lease (0 when it has
// none), for operators and tests: revoking it takes every lock of the
// provider away.
func (p *LockProvider) Session() clientv3.LeaseID {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sess
}

// session returns a lease to attach a new lock to and the start of its
// last successful renewal. A session renewed longer ago than a refresh
// interval is renewed first, so that a new lock starts with a full trust
// window rather than with whatever an idle session has left.
func (p *LockProvider) session(ctx context.Context) (clientv3.LeaseID, time.Time, error) {
	p.renewMu.Lock()
	defer p.renewMu.Unlock()
	p.mu.Lock()
	sess, renewed, closed := p.sess, p.renewed, p.closed
	p.mu.Unlock()
	switch {
	case closed:
		return 0, time.Time{}, ErrClosed
	case sess != 0 && time.Since(renewed) < p.opts.TTL/3:
		return sess, renewed, nil
	}
	if sess != 0 {
		start := time.Now()
		_, err := p.client.KeepAliveOnce(ctx, sess)
		if err == nil {
			p.noteRenewed(sess, start)
			return sess, start, nil
		}
		if err = mapErr("renew the lock session", err); !errors.Is(err, errLeaseGone) {
			return 0, time.Time{}, err
		}
		p.sessionGone(sess)
	}
	start := time.Now()
	resp, err := p.client.Grant(ctx, p.ttl)
	if err != nil {
		return 0, time.Time{}, mapErr("grant the lock session", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		// Closed while granting: nobody would revoke this lease.
		_, _ = p.client.Revoke(context.WithoutCancel(ctx), resp.ID)
		return 0, time.Time{}, ErrClosed
	}
	p.sess, p.renewed = resp.ID, start
	return p.sess, p.renewed, nil
}

// renewed records a successful renewal of id that started at start.
func (p *LockProvider) noteRenewed(id clientv3.LeaseID, start time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sess == id && start.After(p.renewed) {
		p.renewed = start
	}
}

// sessionGone forgets a session etcd no longer has.
func (p *LockProvider) sessionGone(id clientv3.LeaseID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sess == id {
		p.sess = 0
	}
}

// Acquire implements lock.Provider.
func (p *LockProvider) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	if err := lock.CheckAcquire(name, opts); err != nil {
		return nil, err
	}
	key := p.prefix + name
	w := &freedWatch{client: p.client, key: key}
	defer w.stop()
	l := &Lock{p: p, name: name, key: key}
	var renewed time.Time
	err := lock.WaitFor(ctx, opts.Wait, p.opts.Backoff, func(ctx context.Context) (bool, <-chan struct{}, error) {
		for range 2 { // a second time only when the session was gone
			sess, at, err := p.session(ctx)
			if err != nil {
				return false, nil, err
			}
			resp, err := p.client.Txn(ctx).
				If(clientv3.Compare(clientv3.Version(key), "=", 0)).
				Then(clientv3.OpPut(key, "", clientv3.WithLease(sess))).
				Else(clientv3.OpGet(key)).
				Commit()
			if err != nil {
				if err = mapErr("acquire "+name, err); errors.Is(err, errLeaseGone) {
					p.sessionGone(sess)
					continue
				}
				return false, nil, err
			}
			if resp.Succeeded {
				l.token, l.lease, renewed = uint64(resp.Header.Revision), sess, at
				return true, nil, nil
			}
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 {
				return false, nil, nil // released in between: try again at once
			}
			return false, w.after(ctx, kvs[0].ModRevision, resp.Header.Revision+1), nil
		}
		return false, nil, nil
	})
	if err != nil {
		return nil, err
	}
	l.ka, err = lock.NewKeepalive(lock.KeepaliveConfig{
		TTL:          p.opts.TTL,
		SafetyMargin: p.opts.SafetyMargin,
		Refresh:      l.refresh,
		Logger:       p.opts.Logger,
		Name:         name,
	}, renewed)
	if err != nil {
		_, _ = l.delete(context.WithoutCancel(ctx))
		return nil, err
	}
	return l, nil
}

// freedWatch wakes a waiter when the key it saw held is deleted: one etcd
// watch at a time, from the revision after the attempt that saw it.
type freedWatch struct {
	client *clientv3.Client
	key    string

	holder int64 // mod revision of the hold being watched
	freed  chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// after returns a channel closed once the hold seen at mod revision holder
// may have ended; from is the revision to watch from. While the same hold
// is seen, the same watch serves, unless it already fired (an error, not a
// deletion: a deletion ends the hold).
func (w *freedWatch) after(ctx context.Context, holder, from int64) <-chan struct{} {
	if w.freed != nil && w.holder == holder && !isClosed(w.freed) {
		return w.freed
	}
	w.stop()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	freed, done := make(chan struct{}), make(chan struct{})
	events := w.client.Watch(wctx, w.key, clientv3.WithRev(from), clientv3.WithFilterPut())
	go func() {
		defer close(done)
		woke := false
		for range events {
			// Any answer is worth another attempt: a deletion, or an error
			// (compaction, no leader) after which the watch is no use.
			if !woke {
				close(freed)
				woke = true
				cancel()
			}
		}
		if !woke {
			close(freed)
		}
	}()
	w.holder, w.freed, w.cancel, w.done = holder, freed, cancel, done
	return freed
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// stop ends the current watch and waits for its goroutine.
func (w *freedWatch) stop() {
	if w.cancel != nil {
		w.cancel()
		<-w.done
		w.cancel, w.freed = nil, nil
	}
}

// Lock is a held etcd lock.
type Lock struct {
	p     *LockProvider
	name  string
	key   string
	token uint64
	lease clientv3.LeaseID
	ka    *lock.Keepalive
}

var _ lock.Lock = (*Lock)(nil)

// Name implements lock.Lock.
func (l *Lock) Name() string { return l.name }

// Token implements lock.Lock: the revision that created the lock's key.
func (l *Lock) Token() uint64 { return l.token }

// Lost implements lock.Lock.
func (l *Lock) Lost() <-chan struct{} { return l.ka.Lost() }

// Trusted reports, without I/O, whether the lock is within its trust
// window and not lost.
func (l *Lock) Trusted() bool { return l.ka.Trusted() }

// refresh renews the session and checks that the key is still this
// acquisition's; a session or key that is gone is ErrNotHeld.
func (l *Lock) refresh(ctx context.Context) error {
	start := time.Now()
	if _, err := l.p.client.KeepAliveOnce(ctx, l.lease); err != nil {
		err = mapErr("renew the lock session", err)
		if errors.Is(err, errLeaseGone) {
			l.p.sessionGone(l.lease)
		}
		return err
	}
	l.p.noteRenewed(l.lease, start)
	resp, err := l.p.client.Get(ctx, l.key)
	if err != nil {
		return mapErr("check lock "+l.name, err)
	}
	if len(resp.Kvs) == 0 || uint64(resp.Kvs[0].CreateRevision) != l.token || clientv3.LeaseID(resp.Kvs[0].Lease) != l.lease {
		return fmt.Errorf("baton/etcd: lock %q: %w: its key was deleted or replaced", l.name, lock.ErrNotHeld)
	}
	return nil
}

// delete removes the key if it is still this acquisition's.
func (l *Lock) delete(ctx context.Context) (bool, error) {
	resp, err := l.p.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(l.key), "=", int64(l.token))).
		Then(clientv3.OpDelete(l.key)).
		Commit()
	if err != nil {
		return false, mapErr("release "+l.name, err)
	}
	return resp.Succeeded, nil
}

// Release implements lock.Lock. It stops trusting the lock first, then
// deletes the key only if it is still this acquisition's.
func (l *Lock) Release(ctx context.Context) error {
	trusted := l.ka.Stop()
	deleted, err := l.delete(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("release %q: %w", l.name, err)
	case !deleted:
		return fmt.Errorf("release %q: %w", l.name, lock.ErrNotHeld)
	case !trusted:
		return fmt.Errorf("release %q: %w (its trust had run out before the release)", l.name, lock.ErrNotHeld)
	}
	return nil
}

// Close revokes the provider's session, which takes every lock it holds
// away at once (their Lost closes at the next renewal), and refuses
// further acquisitions.
func (p *LockProvider) Close(ctx context.Context) error {
	p.mu.Lock()
	sess := p.sess
	p.closed, p.sess = true, 0
	p.mu.Unlock()
	if sess == 0 {
		return nil
	}
	if _, err := p.client.Revoke(ctx, sess); err != nil {
		if err = mapErr("revoke the lock session", err); !errors.Is(err, errLeaseGone) {
			return err
		}
	}
	return nil
}
