package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Lease is one role as seen by this instance. Its methods are safe for
// concurrent use; IsHeld and the snapshots never do I/O.
type Lease struct {
	m    *Manager
	role string

	// term is the term this instance last held, nil when none. Its token
	// and trust end are one value, swapped whole, so a reader never pairs
	// one term's token with another term's validity.
	term   atomic.Pointer[term]
	holder atomic.Pointer[holderSnapshot]

	mu       sync.Mutex // orders apply and Close
	closed   bool
	claimTok uint64 // the term to renew at the next heartbeat; 0 for none
	// unsure is set when the last heartbeat that carried this role failed:
	// the store may have acted on it, so claimTok may be out of date.
	unsure bool
	// reported is whether the hooks were last told this instance holds
	// the role; only the holder of the manager's beat touches it.
	reported bool
}

// term is one held term as this instance trusts it.
type term struct {
	token uint64
	// validUntil is, in nanoseconds since m.base on the monotonic clock,
	// the end of this instance's trust in the term.
	validUntil int64
}

// trusted reports whether t is a term still within its trust window.
func (l *Lease) trusted(t *term) bool {
	return t != nil && int64(time.Since(l.m.base)) < t.validUntil
}

type holderSnapshot struct {
	id, address string
}

var noHolder = &holderSnapshot{}

func newLease(m *Manager, role string) *Lease {
	l := &Lease{m: m, role: role}
	l.holder.Store(noHolder)
	return l
}

// Role is the lease's role name.
func (l *Lease) Role() string { return l.role }

// IsHeld reports whether this instance holds the role right now. It is an
// atomic read compared with the monotonic clock: it turns false on its own
// when heartbeats stop succeeding, with no goroutine involved. Gate every
// unit of leader-only work on it.
func (l *Lease) IsHeld() bool { return l.trusted(l.term.Load()) }

// Token is the fencing token of the term this instance holds, or 0 when it
// holds none. Every takeover increments it. The token and the validity
// check come from one snapshot of the term.
func (l *Lease) Token() uint64 {
	if t := l.term.Load(); l.trusted(t) {
		return t.token
	}
	return 0
}

// CurrentHolder is the instance ID of the role's holder as of the last
// heartbeat ("" when unknown or free). It may lag a failover by one renew
// interval; use IsHeld, not this, to decide whether to act.
func (l *Lease) CurrentHolder() string { return l.holder.Load().id }

// CurrentHolderAddress is the holder's advertised address as of the last
// heartbeat, for routing. Same lag as CurrentHolder.
func (l *Lease) CurrentHolderAddress() string { return l.holder.Load().address }

// Close stops claiming the role: IsHeld is false from the moment Close is
// called, then the row is released so another instance can take over at
// once. The role is removed from the manager's registry. A heartbeat in
// flight is waited for (at most RenewInterval, or until ctx ends), so a
// term it won is released too; when its answer never came, Close reads the
// role's row and releases the term it finds held by this instance.
func (l *Lease) Close(ctx context.Context) error {
	return l.m.closeLease(ctx, l)
}

// apply takes the outcome of a heartbeat that started at start.
func (l *Lease) apply(rec Record, found bool, start time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unsure = false
	if l.closed {
		// Not trusted any more, but remember a term the store just gave
		// us so that the release frees it.
		if found && rec.Held {
			l.claimTok = rec.Token
		}
		return
	}
	if found && rec.Held {
		l.claimTok = rec.Token
		l.term.Store(&term{token: rec.Token, validUntil: int64(start + l.m.cfg.LeaseDuration - l.m.cfg.HeldSafetyMargin)})
	} else {
		l.claimTok = 0
		l.term.Store(nil)
	}
	if found {
		l.holder.Store(&holderSnapshot{id: rec.Holder, address: rec.HolderAddress})
	} else {
		l.holder.Store(noHolder)
	}
}

// claim is what the next heartbeat asks for this role.
func (l *Lease) claim() (Claim, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Claim{Role: l.role, Token: l.claimTok}, !l.closed
}

// stop marks the lease closed: IsHeld is false from here on.
func (l *Lease) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.term.Store(nil)
}

// failed records that a heartbeat carrying this role got no answer.
func (l *Lease) failed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unsure = true
}

// takeClaim returns the term to release (0 for none), and whether the last
// heartbeat's outcome is unknown, and forgets both.
func (l *Lease) takeClaim() (token uint64, unsure bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	token, unsure = l.claimTok, l.unsure
	l.claimTok, l.unsure = 0, false
	return token, unsure
}
