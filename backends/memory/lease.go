package memory

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/baton-go/baton/core/lease"
)

// LeaseStoreOptions configure a LeaseStore. The zero value uses the
// defaults.
type LeaseStoreOptions struct {
	// Now is the store's clock: every expiry is judged by it, and every
	// Record's times come from it. nil means time.Now. A test can pass a
	// fake clock to move leases past their expiry without waiting.
	Now func() time.Time
}

// LeaseStore is a lease.Store kept in memory, a lease.ReleaseWatcher and a
// lease.Lister.
// Create it with NewLeaseStore. It is safe for concurrent use.
type LeaseStore struct {
	now func() time.Time

	mu   sync.Mutex
	rows map[string]*leaseRow

	subsMu sync.Mutex
	subs   map[*releaseSubscriber]struct{}
}

var (
	_ lease.Store          = (*LeaseStore)(nil)
	_ lease.ReleaseWatcher = (*LeaseStore)(nil)
	_ lease.Lister         = (*LeaseStore)(nil)
)

// leaseRow is one role's row. Rows are never removed, so a role's token
// keeps growing across terms, as in the database table.
type leaseRow struct {
	holder     string
	address    string
	token      uint64
	acquiredAt time.Time
	renewedAt  time.Time
	expiresAt  time.Time
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o LeaseStoreOptions) withDefaults() LeaseStoreOptions {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// NewLeaseStore returns an empty store. Every option is valid, so the error is
// always nil; it is there so that every constructor reads the same.
func NewLeaseStore(opts LeaseStoreOptions) (*LeaseStore, error) {
	opts = opts.withDefaults()
	return &LeaseStore{
		now:  opts.Now,
		rows: make(map[string]*leaseRow),
		subs: make(map[*releaseSubscriber]struct{}),
	}, nil
}

// Heartbeat implements lease.Store. The whole request is checked before
// anything changes, so a bad request writes nothing.
func (s *LeaseStore) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	records := make([]lease.Record, 0, len(req.Claims))
	for _, c := range req.Claims {
		row := s.rows[c.Role]
		held := true
		switch {
		case row != nil && c.Token != 0 && row.token == c.Token && row.holder == req.Holder && row.expiresAt.After(now):
			// Renew: the requester's own, current term.
			row.address = req.Address
			row.renewedAt = now
			row.expiresAt = now.Add(req.LeaseDuration)
		case row == nil:
			row = &leaseRow{token: 1}
			s.rows[c.Role] = row
			take(row, req, now)
		case !row.expiresAt.After(now):
			row.token++
			take(row, req, now)
		default:
			held = false
		}
		records = append(records, row.record(c.Role, held))
	}
	return records, nil
}

// take starts a new term for the requester; the caller has set the token.
func take(row *leaseRow, req lease.HeartbeatRequest, now time.Time) {
	row.holder = req.Holder
	row.address = req.Address
	row.acquiredAt = now
	row.renewedAt = now
	row.expiresAt = now.Add(req.LeaseDuration)
}

// record copies the row out, with the clock's monotonic reading stripped:
// a Record carries the store's wall-clock times only.
func (r *leaseRow) record(role string, held bool) lease.Record {
	return lease.Record{
		Role:          role,
		Holder:        r.holder,
		HolderAddress: r.address,
		Token:         r.token,
		AcquiredAt:    r.acquiredAt.Round(0),
		RenewedAt:     r.renewedAt.Round(0),
		ExpiresAt:     r.expiresAt.Round(0),
		Held:          held,
	}
}

// Release implements lease.Store. The row stays, with its token, and
// expires now; watchers hear of the release after the store's lock is
// dropped.
func (s *LeaseStore) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if err := lease.ValidateRole(role); err != nil {
		return false, err
	}
	if holder == "" {
		return false, errors.New("baton/memory: release: the holder is empty")
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	s.mu.Lock()
	row := s.rows[role]
	now := s.now()
	released := row != nil && token != 0 && row.token == token && row.holder == holder && row.expiresAt.After(now)
	if released {
		row.expiresAt = now
	}
	s.mu.Unlock()
	if released {
		s.announce(role)
	}
	return released, nil
}

// Read implements lease.Store.
func (s *LeaseStore) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	for _, r := range roles {
		if err := lease.ValidateRole(r); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var records []lease.Record
	seen := make(map[string]bool, len(roles))
	for _, r := range roles {
		if row := s.rows[r]; row != nil && !seen[r] {
			seen[r] = true
			records = append(records, row.record(r, false))
		}
	}
	return records, nil
}

// List implements lease.Lister: every row, live or not by the store's
// clock.
func (s *LeaseStore) List(ctx context.Context) ([]lease.Listed, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make([]lease.Listed, 0, len(s.rows))
	for role, row := range s.rows {
		out = append(out, lease.Listed{Record: row.record(role, false), Live: row.expiresAt.After(now), Remaining: row.expiresAt.Sub(now)})
	}
	return out, nil
}

// releaseSubscriber is one WatchReleases call. Releases queue up without
// bound, so a slow callback never blocks Release and never misses one.
type releaseSubscriber struct {
	mu      sync.Mutex
	pending []string
	wake    chan struct{} // capacity 1: "pending may be non-empty"
}

// WatchReleases implements lease.ReleaseWatcher. It calls released on the
// calling goroutine, one role at a time, for every release after it has
// started, and returns ctx's error when ctx ends.
func (s *LeaseStore) WatchReleases(ctx context.Context, released func(role string)) error {
	sub := &releaseSubscriber{wake: make(chan struct{}, 1)}
	s.subsMu.Lock()
	s.subs[sub] = struct{}{}
	s.subsMu.Unlock()
	defer func() {
		s.subsMu.Lock()
		delete(s.subs, sub)
		s.subsMu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.wake:
		}
		sub.mu.Lock()
		roles := sub.pending
		sub.pending = nil
		sub.mu.Unlock()
		for _, r := range roles {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			released(r)
		}
	}
}

func (s *LeaseStore) announce(role string) {
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	for sub := range s.subs {
		sub.mu.Lock()
		sub.pending = append(sub.pending, role)
		sub.mu.Unlock()
		select {
		case sub.wake <- struct{}{}:
		default: // already signalled; the watcher drains everything pending
		}
	}
}
