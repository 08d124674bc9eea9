package lease_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// fakeStore is a minimal lease table for the manager's timing tests, with
// switches to make a given holder's calls fail or hang. The adapters' own
// semantics are proven by conformance.RunLeaseStore; this only has to be
// faithful enough for the manager's rules.
type fakeStore struct {
	mu      sync.Mutex
	rows    map[string]*lease.Record
	calls   map[string]int // heartbeats per holder
	failing map[string]bool
	hanging map[string]chan struct{}
	subs    []chan string
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		rows:    map[string]*lease.Record{},
		calls:   map[string]int{},
		failing: map[string]bool{},
		hanging: map[string]chan struct{}{},
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
	s.mu.Unlock()
	if err := s.gate(ctx, req.Holder); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	out := make([]lease.Record, 0, len(req.Claims))
	for _, c := range req.Claims {
		r, ok := s.rows[c.Role]
		switch {
		case ok && c.Token != 0 && r.Holder == req.Holder && r.Token == c.Token && now.Before(r.ExpiresAt):
			r.RenewedAt, r.ExpiresAt, r.HolderAddress = now, now.Add(req.LeaseDuration), req.Address
			rec := *r
			rec.Held = true
			out = append(out, rec)
		case !ok || !now.Before(r.ExpiresAt):
			var tok uint64 = 1
			if ok {
				tok = r.Token + 1
			}
			r = &lease.Record{Role: c.Role, Holder: req.Holder, HolderAddress: req.Address, Token: tok,
				AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(req.LeaseDuration)}
			s.rows[c.Role] = r
			rec := *r
			rec.Held = true
			out = append(out, rec)
		default:
			out = append(out, *r)
		}
	}
	return out, nil
}

func (s *fakeStore) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if err := s.gate(ctx, holder); err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.rows[role]
	now := time.Now()
	if !ok || r.Holder != holder || r.Token != token || !now.Before(r.ExpiresAt) {
		return false, nil
	}
	r.ExpiresAt = now
	for _, ch := range s.subs {
		select {
		case ch <- role:
		default:
		}
	}
	return true, nil
}

func (s *fakeStore) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []lease.Record
	for _, role := range roles {
		if r, ok := s.rows[role]; ok {
			out = append(out, *r)
		}
	}
	return out, nil
}

// watchingStore adds release announcements to fakeStore.
type watchingStore struct{ *fakeStore }

func (s watchingStore) WatchReleases(ctx context.Context, released func(role string)) error {
	ch := make(chan string, 16)
	s.mu.Lock()
	s.subs = append(s.subs, ch)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, c := range s.subs {
			if c == ch {
				s.subs = append(s.subs[:i], s.subs[i+1:]...)
				break
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case role := <-ch:
			released(role)
		}
	}
}
