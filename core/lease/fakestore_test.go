package lease_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lease"
)

// fakeStore is the in-memory reference store with switches to make a given
// holder's calls fail or hang, for the manager's timing tests. It also
// counts heartbeats per holder.
type fakeStore struct {
	*memory.LeaseStore
	mu      sync.Mutex
	calls   map[string]int
	failing map[string]bool
	hanging map[string]chan struct{}
	// blackholed counts, per holder, the next heartbeats that hang until
	// their context ends, as a lost packet does.
	blackholed map[string]int
	// slow, per holder, makes the next heartbeat a statement that the
	// store runs for that long and then commits, whether or not the caller
	// still waits for it (a cancelled client does not stop the server).
	slow map[string]time.Duration
	// replyLost, per holder, makes the next heartbeat commit at once and
	// its answer never arrive.
	replyLost map[string]bool
}

func newFakeStore() *fakeStore {
	memLeases, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		panic(err)
	}
	return &fakeStore{
		LeaseStore: memLeases,
		calls:      map[string]int{},
		failing:    map[string]bool{},
		hanging:    map[string]chan struct{}{},
		blackholed: map[string]int{},
		slow:       map[string]time.Duration{},
		replyLost:  map[string]bool{},
	}
}

var errUnreachable = errors.New("store unreachable")

// cut makes holder's calls fail (down=true) or work again.
func (s *fakeStore) cut(holder string, down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing[holder] = down
}

// hang makes holder's calls block until ctx ends; the returned func undoes it.
func (s *fakeStore) hang(holder string) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	s.hanging[holder] = ch
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.hanging, holder)
		close(ch)
	}
}

// blackhole makes holder's next n heartbeats hang until their context ends.
func (s *fakeStore) blackhole(holder string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blackholed[holder] = n
}

// slowStatement makes holder's next heartbeat take d at the store, and
// commit then even if its caller gave up.
func (s *fakeStore) slowStatement(holder string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slow[holder] = d
}

// loseReply makes holder's next heartbeat commit and never answer.
func (s *fakeStore) loseReply(holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replyLost[holder] = true
}

func (s *fakeStore) heartbeats(holder string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[holder]
}

func (s *fakeStore) gate(ctx context.Context, holder string) error {
	s.mu.Lock()
	failing, hang := s.failing[holder], s.hanging[holder]
	s.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if failing {
		return errUnreachable
	}
	return nil
}

func (s *fakeStore) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	s.mu.Lock()
	s.calls[req.Holder]++
	lost := s.blackholed[req.Holder] > 0
	if lost {
		s.blackholed[req.Holder]--
	}
	slow, isSlow := s.slow[req.Holder]
	delete(s.slow, req.Holder)
	replyLost := s.replyLost[req.Holder]
	delete(s.replyLost, req.Holder)
	s.mu.Unlock()
	switch {
	case lost:
		<-ctx.Done()
		return nil, ctx.Err()
	case replyLost:
		_, _ = s.LeaseStore.Heartbeat(ctx, req)
		<-ctx.Done()
		return nil, ctx.Err()
	case isSlow:
		type answer struct {
			recs []lease.Record
			err  error
		}
		done := make(chan answer, 1)
		go func() {
			time.Sleep(slow)
			recs, err := s.LeaseStore.Heartbeat(context.WithoutCancel(ctx), req)
			done <- answer{recs, err}
		}()
		select {
		case a := <-done:
			return a.recs, a.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err := s.gate(ctx, req.Holder); err != nil {
		return nil, err
	}
	return s.LeaseStore.Heartbeat(ctx, req)
}

func (s *fakeStore) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if err := s.gate(ctx, holder); err != nil {
		return false, err
	}
	return s.LeaseStore.Release(ctx, role, holder, token)
}
