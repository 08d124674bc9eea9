package demo

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
)

// errInstanceDown is what a killed instance's calls to its stores and
// locks get: its process is gone, nothing it would send arrives.
var errInstanceDown = errors.New("instance is down")

// lockBoard records who holds which lock, as the lock server would show
// it, for the progress line and to measure the failover.
type lockBoard struct {
	mu     sync.Mutex
	holder map[string]string
	events []lockEvent
}

type lockEvent struct {
	At       time.Time
	Name     string
	Instance string
	Token    uint64
}

func newLockBoard() *lockBoard { return &lockBoard{holder: map[string]string{}} }

func (b *lockBoard) acquired(name, instance string, token uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.holder[name] = instance
	b.events = append(b.events, lockEvent{At: time.Now(), Name: name, Instance: instance, Token: token})
}

func (b *lockBoard) released(name, instance string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.holder[name] == instance {
		delete(b.holder, name)
	}
}

// holderOf is the instance holding name, or "".
func (b *lockBoard) holderOf(name string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.holder[name]
}

// firstAfter is the first acquisition of name after t by another instance
// than except.
func (b *lockBoard) firstAfter(name string, t time.Time, except string) (lockEvent, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.events {
		if e.Name == name && e.Instance != except && e.At.After(t) {
			return e, true
		}
	}
	return lockEvent{}, false
}

// instanceLocks is one instance's lock.Provider: the backend's, plus what
// a crash does to it. A killed instance never releases; its holds end the
// way the server ends them (a closed session, a lapsed TTL).
type instanceLocks struct {
	inner lock.Provider
	in    *instance
	board *lockBoard
	// lapse is how long a crashed holder's lock stays held before it is
	// released on the crashed process's behalf (memory locks: the TTL).
	lapse  time.Duration
	reaper *reaper
}

func (p *instanceLocks) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	if p.in.dead.Load() {
		return nil, errInstanceDown
	}
	l, err := p.inner.Acquire(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	if p.in.dead.Load() { // killed while waiting: the hold is orphaned
		p.abandon(l)
		return nil, errInstanceDown
	}
	p.board.acquired(name, p.in.name, l.Token())
	return &boardLock{Lock: l, p: p}, nil
}

// abandon leaves l to lapse on the server's terms.
func (p *instanceLocks) abandon(l lock.Lock) {
	p.reaper.after(p.lapse, func() {
		p.board.released(l.Name(), p.in.name)
		_ = l.Release(context.Background())
	})
}

// boardLock is a held lock that keeps the board current.
type boardLock struct {
	lock.Lock
	p    *instanceLocks
	once sync.Once
}

func (l *boardLock) Release(ctx context.Context) error {
	var err error = errInstanceDown
	l.once.Do(func() {
		if l.p.in.dead.Load() {
			l.p.abandon(l.Lock)
			return
		}
		l.p.board.released(l.Name(), l.p.in.name)
		err = l.Lock.Release(ctx)
	})
	return err
}

// reaper runs the delayed releases of crashed instances' locks, and owns
// their goroutines.
type reaper struct {
	ctx    context.Context // ends: release at once (the demo is stopping)
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newReaper() *reaper {
	ctx, cancel := context.WithCancel(context.Background())
	return &reaper{ctx: ctx, cancel: cancel}
}

func (r *reaper) after(d time.Duration, f func()) {
	r.wg.Go(func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.ctx.Done():
		}
		f()
	})
}

// stop releases what is still pending and waits.
func (r *reaper) stop() {
	r.cancel()
	r.wg.Wait()
}

// instanceLeases is one instance's lease.Store: the backend's, plus two
// things of the demo's:
//
//   - a killed instance's heartbeats and releases never arrive, so its
//     rows expire by the store's clock;
//   - until placement is done, an instance claims only its own share of the
//     partitions (partition i goes to instance i mod n). Nothing in baton
//     balances partitions; without this the first instance to start would
//     take all sixteen. Once placed, every instance claims everything, and
//     the store's rules decide: a live holder keeps its partitions, an
//     expired one loses them to whichever instance heartbeats first.
type instanceLeases struct {
	inner     lease.Store
	in        *instance
	placed    *atomic.Bool
	partition string
	instances int
}

func (s *instanceLeases) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if s.in.dead.Load() {
		return nil, errInstanceDown
	}
	if !s.placed.Load() {
		claims := req.Claims[:0:0]
		for _, c := range req.Claims {
			if i, ok := s.partitionIndex(c.Role); ok && c.Token == 0 && i%s.instances != s.in.idx {
				continue
			}
			claims = append(claims, c)
		}
		if len(claims) == 0 {
			return nil, nil
		}
		req.Claims = claims
	}
	return s.inner.Heartbeat(ctx, req)
}

// partitionIndex reads the partition number from a partition role name.
func (s *instanceLeases) partitionIndex(role string) (int, bool) {
	rest, ok := strings.CutPrefix(role, s.partition+":partition-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	return i, err == nil
}

func (s *instanceLeases) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if s.in.dead.Load() {
		return false, errInstanceDown
	}
	return s.inner.Release(ctx, role, holder, token)
}

func (s *instanceLeases) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	return s.inner.Read(ctx, roles)
}

// WatchReleases passes the store's release announcements through, so that
// a graceful Close hands a role over at once.
func (s *instanceLeases) WatchReleases(ctx context.Context, released func(role string)) error {
	if w, ok := s.inner.(lease.ReleaseWatcher); ok {
		return w.WatchReleases(ctx, released)
	}
	<-ctx.Done()
	return ctx.Err()
}
