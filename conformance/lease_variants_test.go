package conformance_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lease"
)

// The stores of leaseVariants, each the memory lease store with one rule
// broken.

// noAddress keeps no holder address.
type noAddress struct{ *memory.LeaseStore }

func stripAddresses(recs []lease.Record, err error) ([]lease.Record, error) {
	for i := range recs {
		recs[i].HolderAddress = ""
	}
	return recs, err
}

func (b noAddress) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	return stripAddresses(b.LeaseStore.Heartbeat(ctx, req))
}

func (b noAddress) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	return stripAddresses(b.LeaseStore.Read(ctx, roles))
}

// neverExpires lets a term end only by release: another holder's claim on
// a role is judged at the moment the term was last renewed, when it was
// live.
type neverExpires struct {
	*memory.LeaseStore
	clk *leaseClock

	mu       sync.Mutex
	released map[string]bool
}

func newNeverExpires(st *memory.LeaseStore, clk *leaseClock) *neverExpires {
	return &neverExpires{LeaseStore: st, clk: clk, released: map[string]bool{}}
}

func (b *neverExpires) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	return oneByOne(ctx, req, func(one lease.HeartbeatRequest, c lease.Claim) (recs []lease.Record, err error) {
		b.mu.Lock()
		released := b.released[c.Role]
		b.mu.Unlock()
		row, ok := rowOf(ctx, b.LeaseStore, c.Role)
		if !ok || released || row.Holder == req.Holder {
			recs, err = b.LeaseStore.Heartbeat(ctx, one)
		} else {
			b.clk.pinned(row.RenewedAt, func() { recs, err = b.LeaseStore.Heartbeat(ctx, one) })
		}
		if err == nil && len(recs) == 1 && recs[0].Held {
			b.mu.Lock()
			delete(b.released, c.Role)
			b.mu.Unlock()
		}
		return recs, err
	})
}

func (b *neverExpires) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	ok, err := b.LeaseStore.Release(ctx, role, holder, token)
	if ok {
		b.mu.Lock()
		b.released[role] = true
		b.mu.Unlock()
	}
	return ok, err
}

// alwaysHeld reports every claim as held, granted or not.
type alwaysHeld struct{ *memory.LeaseStore }

func (b alwaysHeld) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	recs, err := b.LeaseStore.Heartbeat(ctx, req)
	for i := range recs {
		recs[i].Held = true
	}
	return recs, err
}

// checkThenTake reads the roles, then writes: a take decided on a read
// that a concurrent take has already made stale. The rendezvous makes two
// concurrent heartbeats both read before either writes; the second then
// believes it took the role the first holds.
type checkThenTake struct {
	*memory.LeaseStore
	meet rendezvous
}

func (b *checkThenTake) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	free := map[string]lease.Record{}
	for _, c := range req.Claims {
		if row, ok := rowOf(ctx, b.LeaseStore, c.Role); !ok || !live(row) {
			free[c.Role] = row
		}
	}
	b.meet.meet(nil)
	recs, err := b.LeaseStore.Heartbeat(ctx, req)
	for i, r := range recs {
		if was, ok := free[r.Role]; ok && !r.Held {
			now := time.Now().Round(0)
			recs[i] = lease.Record{Role: r.Role, Holder: req.Holder, HolderAddress: req.Address, Token: was.Token + 1,
				AcquiredAt: now, RenewedAt: now, ExpiresAt: now.Add(req.LeaseDuration), Held: true}
		}
	}
	return recs, err
}

// earlyExpiry judges other holders' terms by a clock a second ahead.
type earlyExpiry struct {
	*memory.LeaseStore
	clk *leaseClock
}

func (b earlyExpiry) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	return oneByOne(ctx, req, func(one lease.HeartbeatRequest, c lease.Claim) (recs []lease.Record, err error) {
		if row, ok := rowOf(ctx, b.LeaseStore, c.Role); ok && row.Holder != req.Holder {
			b.clk.pinned(time.Now().Add(time.Second), func() { recs, err = b.LeaseStore.Heartbeat(ctx, one) })
			return recs, err
		}
		return b.LeaseStore.Heartbeat(ctx, one)
	})
}

// renewAsNewTerm renews by releasing the term and taking a new one.
type renewAsNewTerm struct{ *memory.LeaseStore }

func (b renewAsNewTerm) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	return oneByOne(ctx, req, func(one lease.HeartbeatRequest, c lease.Claim) ([]lease.Record, error) {
		if row, ok := rowOf(ctx, b.LeaseStore, c.Role); ok && c.Token != 0 && row.Token == c.Token && row.Holder == req.Holder && live(row) {
			if _, err := b.LeaseStore.Release(ctx, c.Role, req.Holder, c.Token); err != nil {
				return nil, err
			}
			one.Claims = []lease.Claim{{Role: c.Role}}
		}
		return b.LeaseStore.Heartbeat(ctx, one)
	})
}

// anyTokenRenews renews a live term of the requester whatever token it
// claims: it swaps in the current token before asking the real store.
type anyTokenRenews struct{ *memory.LeaseStore }

func (b anyTokenRenews) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	roles := make([]string, len(req.Claims))
	for i, c := range req.Claims {
		roles[i] = c.Role
	}
	if current, err := b.Read(ctx, roles); err == nil {
		req.Claims = slices.Clone(req.Claims)
		for i, c := range req.Claims {
			for _, r := range current {
				if r.Role == c.Role && c.Token != 0 && r.Holder == req.Holder && live(r) {
					req.Claims[i].Token = r.Token
				}
			}
		}
	}
	return b.LeaseStore.Heartbeat(ctx, req)
}

// lapsedRenews renews its holder's lapsed term, as if it had not run out.
type lapsedRenews struct {
	*memory.LeaseStore
	clk *leaseClock
}

func (b lapsedRenews) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	return oneByOne(ctx, req, func(one lease.HeartbeatRequest, c lease.Claim) (recs []lease.Record, err error) {
		if row, ok := rowOf(ctx, b.LeaseStore, c.Role); ok && c.Token != 0 && row.Token == c.Token && row.Holder == req.Holder && !live(row) {
			b.clk.pinned(row.RenewedAt, func() { recs, err = b.LeaseStore.Heartbeat(ctx, one) })
			return recs, err
		}
		return b.LeaseStore.Heartbeat(ctx, one)
	})
}

// releaseWhoever ends the current term of a role whoever asks.
type releaseWhoever struct{ *memory.LeaseStore }

func (b releaseWhoever) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	ok, err := b.LeaseStore.Release(ctx, role, holder, token)
	if err != nil || ok {
		return ok, err
	}
	if row, found := rowOf(ctx, b.LeaseStore, role); found && live(row) {
		return b.LeaseStore.Release(ctx, role, row.Holder, row.Token)
	}
	return false, nil
}

// stopAtRefusal gives up on a heartbeat's claims after its first refusal:
// the rest are reported as they stand, untouched.
type stopAtRefusal struct{ *memory.LeaseStore }

func (b stopAtRefusal) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	refused := false
	return oneByOne(ctx, req, func(one lease.HeartbeatRequest, c lease.Claim) ([]lease.Record, error) {
		if refused {
			row, ok := rowOf(ctx, b.LeaseStore, c.Role)
			if !ok {
				row = lease.Record{Role: c.Role}
			}
			return []lease.Record{row}, nil
		}
		recs, err := b.LeaseStore.Heartbeat(ctx, one)
		refused = err == nil && len(recs) == 1 && !recs[0].Held
		return recs, err
	})
}

// releaseLeavesItHeld says the term ended and leaves it to run out.
type releaseLeavesItHeld struct{ *memory.LeaseStore }

func (b releaseLeavesItHeld) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if row, ok := rowOf(ctx, b.LeaseStore, role); ok && token != 0 && row.Token == token && row.Holder == holder && live(row) {
		return true, nil
	}
	return b.LeaseStore.Release(ctx, role, holder, token)
}

// releaseForgets deletes a role's row on release, so its next term starts
// over at token 1. It keeps one memory store per role and drops the role's
// store to forget it.
type releaseForgets struct {
	mu    sync.Mutex
	roles map[string]*memory.LeaseStore
}

func newReleaseForgets() *releaseForgets {
	return &releaseForgets{roles: map[string]*memory.LeaseStore{}}
}

// scratch checks requests: a throwaway store rejects what the real one
// would, so bad input still writes nothing.
func scratch() *memory.LeaseStore {
	st, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		panic(err)
	}
	return st
}

func (b *releaseForgets) store(role string, create bool) *memory.LeaseStore {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := b.roles[role]
	if st == nil && create {
		st = scratch()
		b.roles[role] = st
	}
	return st
}

func (b *releaseForgets) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	return oneByOne(ctx, req, func(one lease.HeartbeatRequest, c lease.Claim) ([]lease.Record, error) {
		return b.store(c.Role, true).Heartbeat(ctx, one)
	})
}

func (b *releaseForgets) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	st := b.store(role, false)
	if st == nil {
		return scratch().Release(ctx, role, holder, token)
	}
	ok, err := st.Release(ctx, role, holder, token)
	if ok {
		b.mu.Lock()
		delete(b.roles, role)
		b.mu.Unlock()
	}
	return ok, err
}

func (b *releaseForgets) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	if _, err := scratch().Read(ctx, roles); err != nil {
		return nil, err
	}
	var out []lease.Record
	for _, r := range roles {
		if st := b.store(r, false); st != nil {
			recs, err := st.Read(ctx, []string{r})
			if err != nil {
				return nil, err
			}
			out = append(out, recs...)
		}
	}
	return out, nil
}

// lapsedReleases releases its holder's lapsed term, as if it were live.
type lapsedReleases struct {
	*memory.LeaseStore
	clk *leaseClock
}

func (b lapsedReleases) Release(ctx context.Context, role, holder string, token uint64) (ok bool, err error) {
	if row, found := rowOf(ctx, b.LeaseStore, role); found && row.Holder == holder && row.Token == token && !live(row) {
		b.clk.pinned(row.RenewedAt, func() { ok, err = b.LeaseStore.Release(ctx, role, holder, token) })
		return ok, err
	}
	return b.LeaseStore.Release(ctx, role, holder, token)
}

// readEveryRole answers a Read with a record for every role asked about,
// held or never held.
type readEveryRole struct{ *memory.LeaseStore }

func (b readEveryRole) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	recs, err := b.LeaseStore.Read(ctx, roles)
	if err != nil {
		return nil, err
	}
	for _, r := range roles {
		if !slices.ContainsFunc(recs, func(rec lease.Record) bool { return rec.Role == r }) {
			recs = append(recs, lease.Record{Role: r})
		}
	}
	return recs, nil
}

// shortRoles refuses a role of exactly lease.MaxRoleLength bytes too.
type shortRoles struct{ *memory.LeaseStore }

func (shortRoles) check(roles ...string) error {
	for _, r := range roles {
		if len(r) >= lease.MaxRoleLength {
			return lease.ErrInvalidRole
		}
	}
	return nil
}

func (b shortRoles) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	for _, c := range req.Claims {
		if err := b.check(c.Role); err != nil {
			return nil, err
		}
	}
	return b.LeaseStore.Heartbeat(ctx, req)
}

func (b shortRoles) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if err := b.check(role); err != nil {
		return false, err
	}
	return b.LeaseStore.Release(ctx, role, holder, token)
}

func (b shortRoles) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	if err := b.check(roles...); err != nil {
		return nil, err
	}
	return b.LeaseStore.Read(ctx, roles)
}

// claimByClaim checks and applies each claim on its own: the claims before
// a bad one are written when the request is refused.
type claimByClaim struct{ *memory.LeaseStore }

func (b claimByClaim) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	var out []lease.Record
	for _, c := range req.Claims {
		one := req
		one.Claims = []lease.Claim{c}
		recs, err := b.LeaseStore.Heartbeat(ctx, one)
		if err != nil {
			return nil, err
		}
		out = append(out, recs...)
	}
	return out, nil
}

// leaseCauseLost fails on an ended context with an error of its own.
type leaseCauseLost struct{ *memory.LeaseStore }

var errAborted = errors.New("aborted")

func (b leaseCauseLost) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if ctx.Err() != nil {
		return nil, errAborted
	}
	return b.LeaseStore.Heartbeat(ctx, req)
}

func (b leaseCauseLost) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if ctx.Err() != nil {
		return false, errAborted
	}
	return b.LeaseStore.Release(ctx, role, holder, token)
}

func (b leaseCauseLost) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	if ctx.Err() != nil {
		return nil, errAborted
	}
	return b.LeaseStore.Read(ctx, roles)
}

// listAllLive lists every role as live, the released ones included.
type listAllLive struct{ *memory.LeaseStore }

func (b listAllLive) List(ctx context.Context) ([]lease.Listed, error) {
	list, err := b.LeaseStore.List(ctx)
	for i := range list {
		if !list[i].Live {
			list[i].Live, list[i].Remaining = true, -list[i].Remaining+time.Second
		}
	}
	return list, err
}

// listWrongUnit lists a term's Remaining a thousand times too small, as a
// store that reads seconds as milliseconds would: positive, within the
// lease, and wrong.
type listWrongUnit struct{ *memory.LeaseStore }

func (b listWrongUnit) List(ctx context.Context) ([]lease.Listed, error) {
	list, err := b.LeaseStore.List(ctx)
	for i := range list {
		list[i].Remaining /= 1000
	}
	return list, err
}
