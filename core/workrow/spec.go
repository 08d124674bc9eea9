package workrow

import (
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton/core/internal/uuid"
)

// MaxBatchSize is the most rows one claim may take.
const MaxBatchSize = 1000

var (
	// ErrInvalidSpec is returned (wrapped, naming the field and the reason)
	// for a claim spec, a finalize, a renew or a release that a store must
	// not act on. A store returns it before writing anything.
	ErrInvalidSpec = errors.New("baton/workrow: invalid spec")

	// ErrInvalidConfig is returned (wrapped, naming the field) by NewWorker
	// for a Config it cannot run with.
	ErrInvalidConfig = errors.New("baton/workrow: invalid config")

	// ErrNotOwned is the cause given to a handler's context when a renewal
	// found that another worker has taken the row.
	ErrNotOwned = errors.New("baton/workrow: the row is no longer owned by this worker")

	// ErrLeaseExpired is the cause given to a handler's context when the
	// batch's lease ran out without a successful renewal: another worker
	// may take the row from now on.
	ErrLeaseExpired = errors.New("baton/workrow: the lease ran out before it could be renewed")

	// ErrAttemptsExhausted is the error a row is parked with when it is
	// claimed with more attempts than Config.MaxAttempts: its earlier
	// attempts died with their workers.
	ErrAttemptsExhausted = errors.New("baton/workrow: attempts exhausted")
)

// LockID identifies one claim: every row a claim stamps carries it until it
// is finalized, released or reclaimed. The zero LockID is "no lock".
type LockID [16]byte

// NewLockID returns a fresh lock id, laid out as a version 7 UUID: 48 bits
// of Unix milliseconds, then random bits. It panics only if the system's
// random source fails.
func NewLockID() LockID { return LockID(uuid.NewV7()) }

// IsZero reports whether id is the zero LockID.
func (id LockID) IsZero() bool { return id == LockID{} }

// String formats id as a UUID: xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func (id LockID) String() string { return uuid.Format(id) }

// ParseLockID parses the form String writes.
func ParseLockID(s string) (LockID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return LockID{}, fmt.Errorf("baton/workrow: lock id %q is not a UUID", s)
	}
	return LockID(id), nil
}

// ClaimSpec is one claim: which rows, how many, in which order, and for how
// long. Stores call Validate before anything else.
type ClaimSpec struct {
	// LockID is stamped on every claimed row (NewLockID). Required.
	LockID LockID
	// Now is the claimer's current time. A row is free when its lock expiry
	// is NULL or not after Now. Required.
	Now time.Time
	// LeaseUntil is stamped as the claimed rows' lock expiry. It must be
	// after Now, and well after it: above one batch's worth of work, or the
	// worker must renew.
	LeaseUntil time.Time
	// BatchSize is the most rows to claim, 1 to MaxBatchSize.
	BatchSize int
	// Eligible selects the rows that are due, for example
	// And(IsNull("completed_at"), Lt("attempts", 8)). Required: a claim
	// with no predicate would take finished rows again. The store adds
	// "lock free or expired" itself.
	Eligible Cond
	// Order is the queue order; the store appends the id. Empty means the
	// store's default order (the PostgreSQL adapter's Order option, else
	// the id alone).
	Order []Order
	// OnClaim are sets applied in the claiming update, for example
	// Add("attempts", 1), so that a worker dying mid-call still counts its
	// attempt. The rows returned show their effect.
	OnClaim []Set
}

// Validate reports, wrapping ErrInvalidSpec and naming the field, a spec a
// store must not act on.
func (s ClaimSpec) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
	}
	switch {
	case s.LockID.IsZero():
		return bad("ClaimSpec.LockID is zero; take a fresh one from NewLockID for every claim")
	case s.Now.IsZero():
		return bad("ClaimSpec.Now is zero; it must be the claimer's current time")
	case !s.LeaseUntil.After(s.Now):
		return bad("ClaimSpec.LeaseUntil (%v) is not after Now (%v); the lease must end in the future",
			s.LeaseUntil, s.Now)
	case s.BatchSize < 1 || s.BatchSize > MaxBatchSize:
		return bad("ClaimSpec.BatchSize is %d; it must be between 1 and %d", s.BatchSize, MaxBatchSize)
	case s.Eligible.IsZero():
		return bad("ClaimSpec.Eligible is empty; a claim must say which rows are due, or it would take finished rows again")
	}
	if err := s.Eligible.validate("ClaimSpec.Eligible", true); err != nil {
		return bad("%v", err)
	}
	seen := make(map[string]bool, len(s.Order))
	for i, o := range s.Order {
		p := fmt.Sprintf("ClaimSpec.Order[%d]", i)
		if err := checkColumn(p, o.Column); err != nil {
			return bad("%v", err)
		}
		if seen[o.Column] {
			return bad("%s: column %q is ordered by twice", p, o.Column)
		}
		seen[o.Column] = true
	}
	if err := validateSets("ClaimSpec.OnClaim", s.OnClaim, true); err != nil {
		return bad("%v", err)
	}
	return nil
}

// Claimed is one row a claim stamped: its id and the row as it is after the
// claim (OnClaim sets applied).
type Claimed[K comparable, R any] struct {
	ID  K
	Row R
}

// Final ends one claimed row's attempt.
type Final[K comparable] struct {
	// ID is the row.
	ID K
	// Set changes the row's own columns: the completion marker, the error,
	// a parked marker. Now is not allowed here; pass a time.
	Set []Set
	// VisibleAfter delays the row: it cannot be claimed again before then
	// (the store keeps it in the lock expiry column). Zero makes it
	// claimable at once, if the sets leave it eligible.
	VisibleAfter time.Time
}

// CheckFinalize validates a finalize request: a non-zero lock, valid sets
// and no row twice. Stores call it before writing anything.
func CheckFinalize[K comparable](lock LockID, finals []Final[K]) error {
	if lock.IsZero() {
		return fmt.Errorf("%w: finalize: the lock id is zero; it must be the claim's", ErrInvalidSpec)
	}
	seen := make(map[K]bool, len(finals))
	for i, f := range finals {
		if seen[f.ID] {
			return fmt.Errorf("%w: finalize: Final[%d]: row %v appears twice", ErrInvalidSpec, i, f.ID)
		}
		seen[f.ID] = true
		if err := validateSets(fmt.Sprintf("finalize: Final[%d].Set", i), f.Set, false); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
		}
	}
	return nil
}

// CheckClaims validates a FinalizeClaims request: each claim passes
// CheckFinalize, and no lock id appears twice (a claim's rows travel
// together). A row may appear in two claims: at most one of them holds it.
func CheckClaims[K comparable](claims []ClaimFinals[K]) error {
	seen := make(map[LockID]bool, len(claims))
	for c, cl := range claims {
		if seen[cl.Lock] {
			return fmt.Errorf("%w: finalize claims: claims[%d]: lock %v appears twice", ErrInvalidSpec, c, cl.Lock)
		}
		seen[cl.Lock] = true
		if err := CheckFinalize(cl.Lock, cl.Finals); err != nil {
			return fmt.Errorf("claims[%d]: %w", c, err)
		}
	}
	return nil
}

// CheckRenew validates a renew request: a non-zero lock, a lease end and no
// row twice.
func CheckRenew[K comparable](lock LockID, until time.Time, ids []K) error {
	if lock.IsZero() {
		return fmt.Errorf("%w: renew: the lock id is zero; it must be the claim's", ErrInvalidSpec)
	}
	if until.IsZero() {
		return fmt.Errorf("%w: renew: the new lease end is zero", ErrInvalidSpec)
	}
	return checkIDs("renew", ids)
}

// CheckRelease validates a release request: a non-zero lock and no row
// twice.
func CheckRelease[K comparable](lock LockID, ids []K) error {
	if lock.IsZero() {
		return fmt.Errorf("%w: release: the lock id is zero; it must be the claim's", ErrInvalidSpec)
	}
	return checkIDs("release", ids)
}

func checkIDs[K comparable](op string, ids []K) error {
	seen := make(map[K]bool, len(ids))
	for i, id := range ids {
		if seen[id] {
			return fmt.Errorf("%w: %s: ids[%d]: row %v appears twice", ErrInvalidSpec, op, i, id)
		}
		seen[id] = true
	}
	return nil
}
