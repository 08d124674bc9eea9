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
// concurrent use, also from several processes when the store is shared.
//
// The rules a store keeps are numbered L1 to L23 on the methods below and
// on the optional ReleaseWatcher and Lister; conformance.RunLeaseStore
// checks each one with a subtest of its own (docs/adapters.md lists
// which). Besides the methods' own:
//
//   - L21 context: every method called with an ended context fails with an
//     error that wraps ctx.Err(), however the adapter wraps its errors, and
//     writes nothing.
//   - L22 schema: a store over a database without its table fails every
//     call with the adapter's schema-mismatch error, never with a bare
//     driver error.
type Store interface {
	// Heartbeat handles all of an instance's claims in one round trip and
	// returns one Record per claim (any order), with Held set for the
	// claims it renewed or took.
	//
	//   - L1 take: a claim on a role with no row makes the requester the
	//     holder of a new term: a token above 0, acquired and renewed now,
	//     expiring at now + LeaseDuration, at req.Address; a second store
	//     over the same data reads the same row.
	//   - L2 takeover: a claim on a role whose lease has expired makes the
	//     requester the holder of a new term, with a larger token.
	//   - L3 refuse: while another holder's term is live, any claim on the
	//     role, with any token, is refused; the record shows the current
	//     holder and token, and the row does not change.
	//   - L4 one winner: of concurrent claims on a free role, from any
	//     stores over the same data, exactly one is granted: the check and
	//     the write are one atomic step.
	//   - L5 store clock: expiry is judged by the store's own clock, and
	//     the records show its arithmetic (ExpiresAt = RenewedAt +
	//     LeaseDuration); a take never happens before the previous term's
	//     ExpiresAt.
	//   - L6 renew: a claim with holder = req.Holder, the term's token and
	//     a live lease extends the same term: same token and AcquiredAt,
	//     RenewedAt now, ExpiresAt now + LeaseDuration, the new address.
	//   - L7 token: a renewal needs the current token; a wrong token, token
	//     0, or the right token from another holder renews nothing and
	//     changes nothing.
	//   - L8 lapsed: a term whose lease ran out is never renewed, even by
	//     its holder with its token: that claim takes a new term with a
	//     larger token.
	//   - L9 deposed: once a successor holds the role, the deposed holder
	//     can neither renew (any token) nor release, and the successor's
	//     row does not change.
	//   - L10 batch: each claim of one heartbeat is decided on its own
	//     (renewed, taken or refused), whatever the others' outcomes.
	//   - L19 role limit: roles of up to MaxRoleLength bytes (not
	//     characters) are kept exactly; a longer one is an error wrapping
	//     ErrInvalidRole, here and in Release and Read.
	//   - L20 bad input: a request failing HeartbeatRequest.Validate is an
	//     error (wrapping ErrInvalidRole for a role's fault) and writes
	//     nothing, not even its valid claims.
	Heartbeat(ctx context.Context, req HeartbeatRequest) ([]Record, error)

	// Release ends holder's term on role if that term (token) is still
	// current, and reports whether it was.
	//
	//   - L11 free at once: a released role can be taken by anyone at once,
	//     although its lease had time left; the released term can be
	//     neither released nor renewed again.
	//   - L12 token kept: the row stays, with the released term's token, so
	//     every later term gets a larger one.
	//   - L13 lapsed: releasing a term whose lease ran out returns false,
	//     changes nothing and is not announced, even if nobody took the
	//     role since.
	//
	// A release with a token that is not current, or by another holder
	// (L9), returns false and changes nothing.
	Release(ctx context.Context, role, holder string, token uint64) (bool, error)

	// Read returns the records of the given roles.
	//
	//   - L18 read: only the roles that have a row are returned, each once,
	//     as the last write left it, with Held false; nil or no known role
	//     is an empty answer, not an error.
	Read(ctx context.Context, roles []string) ([]Record, error)
}

// Listed is one role's lease as Lister lists it: its record, and whether
// its term is live, judged by the store as it judges expiry.
type Listed struct {
	Record
	// Live is whether the term has not ended, by the store's clock. A
	// released or expired lease keeps its holder and token, and is not
	// live.
	Live bool
	// Remaining is how long the term has left, by the store's clock, at
	// the moment of reading: positive while it is live, zero or negative
	// (how long ago it ended) once it is not.
	Remaining time.Duration
}

// Lister is an optional Store capability: listing every role, for the
// operator's views (baton leases, the console), which know no role names.
// ListLeases calls it and sorts its answer.
type Lister interface {
	// List returns every role that has a row, in any order.
	//
	//   - L23 list: every role with a row, and only those, is listed once,
	//     whichever store over the same data wrote it, with the record Read
	//     returns for it (Held false); a current term is Live with a
	//     Remaining of what is left of it (above 0, at most its
	//     LeaseDuration, and no less than LeaseDuration minus the time
	//     since it was taken or renewed, less the store's grain), a
	//     released one is not Live and has a Remaining of at most 0.
	List(ctx context.Context) ([]Listed, error)
}

// ReleaseWatcher is an optional Store capability: announcing releases so
// that waiting managers take a freed role at once instead of at their next
// heartbeat. A Manager whose store implements it runs WatchReleases for its
// whole life.
type ReleaseWatcher interface {
	// WatchReleases calls released(role) for each release, by any
	// instance, until ctx ends, in the order the releases happened. It
	// returns ctx's error then, or another error if watching failed; the
	// manager restarts it after a pause.
	//
	//   - L14 announce: every release that ends a term, made through any
	//     store over the same data, is announced within a second.
	//   - L15 nothing else: a release that released nothing is not
	//     announced.
	//   - L16 after: the announcement goes out only once the release has
	//     taken effect, so a successor that takes the role the moment it
	//     hears of it, from inside released, gets it.
	//   - L17 end: when ctx ends, before or during the call, WatchReleases
	//     returns an error wrapping ctx.Err().
	WatchReleases(ctx context.Context, released func(role string)) error
}
