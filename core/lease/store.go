package lease

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// MaxRoleLength is the longest role name, in bytes; the lease table's role
// column holds at most this many.
const MaxRoleLength = 128

// ErrInvalidRole is returned (wrapped, with the reason) for a role name that
// is empty, too long, not UTF-8 or contains a NUL byte.
var ErrInvalidRole = errors.New("baton/lease: invalid role name")

// Claim is one role in a heartbeat request.
type Claim struct {
	Role string
	// Token is the term this instance believes it holds, 0 when it holds
	// none. A renewal matches role, holder and token, so it can only extend
	// the instance's own current term.
	Token uint64
}

// HeartbeatRequest is one instance's heartbeat for all of its roles.
type HeartbeatRequest struct {
	// Holder is the instance ID.
	Holder string
	// Address is where the instance serves requests for the roles it holds.
	Address string
	// LeaseDuration is how long, by the store's clock, a renewed or taken
	// lease lasts.
	LeaseDuration time.Duration
	// Claims lists each role once.
	Claims []Claim
}

// Validate rejects a request a store must not act on at all: no holder, a
// non-positive duration, an invalid role, or a role claimed twice. Stores
// call it before touching anything.
func (r HeartbeatRequest) Validate() error {
	if r.Holder == "" {
		return errors.New("baton/lease: HeartbeatRequest.Holder is empty; it must name the instance")
	}
	if r.LeaseDuration <= 0 {
		return fmt.Errorf("baton/lease: HeartbeatRequest.LeaseDuration is %v; it must be positive", r.LeaseDuration)
	}
	seen := make(map[string]bool, len(r.Claims))
	for i, c := range r.Claims {
		if err := ValidateRole(c.Role); err != nil {
			return fmt.Errorf("baton/lease: HeartbeatRequest.Claims[%d]: %w", i, err)
		}
		if seen[c.Role] {
			return fmt.Errorf("baton/lease: HeartbeatRequest.Claims[%d]: role %q is claimed twice; list each role once", i, c.Role)
		}
		seen[c.Role] = true
	}
	return nil
}

// Record is the state of one role after a heartbeat, or as read.
type Record struct {
	Role          string
	Holder        string // "" when the role was never held
	HolderAddress string
	Token         uint64
	AcquiredAt    time.Time // store's clock
	RenewedAt     time.Time // store's clock
	ExpiresAt     time.Time // store's clock; for display only, never compared with a local clock
	// Held is set in heartbeat answers: this heartbeat renewed the
	// requester's term or took the role for the requester. It is the only
	// thing a manager trusts; Holder may show the requester on a stale read.
	Held bool
}

// Store is the adapter side of role leases: the lease table and its rules,
// judged by the store's own clock. Implementations must be safe for
// concurrent use; conformance.RunLeaseStore is the executable contract.
type Store interface {
	// Heartbeat handles all of an instance's claims in one round trip. For
	// each claim, in this order of preference:
	//   - renew: when the role's row has holder = req.Holder, token =
	//     claim.Token (non-zero) and has not expired, extend it to
	//     now + LeaseDuration and update the address;
	//   - take: when the role has no row, or its lease has expired, make the
	//     requester the holder with token = previous token + 1 (1 for a new
	//     row), acquired now, expiring at now + LeaseDuration;
	//   - otherwise leave it alone.
	// It returns one Record per claim (any order), with Held set for the
	// renewed and taken ones.
	Heartbeat(ctx context.Context, req HeartbeatRequest) ([]Record, error)

	// Release ends holder's term on role if that term (token) is still
	// current, making the role free at once while keeping its token (so the
	// next term gets a larger one). It reports whether the term was current.
	Release(ctx context.Context, role, holder string, token uint64) (bool, error)

	// Read returns the records of the given roles that have a row; roles
	// never held are absent. Held is false in its answers.
	Read(ctx context.Context, roles []string) ([]Record, error)
}

// ReleaseWatcher is an optional Store capability: announcing releases so
// that waiting managers take a freed role at once instead of at their next
// heartbeat. A Manager whose store implements it runs WatchReleases for its
// whole life.
type ReleaseWatcher interface {
	// WatchReleases calls released(role) for each release, by any
	// instance, until ctx ends. It returns ctx's error then, or another error
	// if watching failed; the manager restarts it after a pause.
	WatchReleases(ctx context.Context, released func(role string)) error
}
