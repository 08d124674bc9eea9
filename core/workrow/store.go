package workrow

import (
	"context"
	"time"
)

// Store is the adapter side of leased work rows: one application table,
// with an id column, a lock id column and a lock expiry column besides the
// application's own. K is the id's type, R the row's.
//
// Implementations must be safe for concurrent use, and every method must be
// a single atomic step at the store (one statement for SQL stores): the
// guards below are only worth something if nothing can slip between the
// check and the write. conformance.RunWorkRows is the executable contract.
type Store[K comparable, R any] interface {
	// Claim stamps up to spec.BatchSize rows that satisfy spec.Eligible and
	// whose lock is free (lock expiry NULL or not after spec.Now) with
	// spec.LockID and lock expiry spec.LeaseUntil, applies spec.OnClaim to
	// them in the same step, and returns exactly the rows it stamped, as
	// they are afterwards, in spec.Order then id order. Candidates are
	// found holding no lock beyond this step; the stamping step restates
	// the whole predicate and the lock check, so a row another claimer took
	// (or that stopped being eligible) meanwhile is skipped, never taken
	// twice.
	// Expiry is judged by spec.Now, never by the store's own clock.
	//
	// An invalid spec (spec.Validate) yields an error wrapping
	// ErrInvalidSpec, and nothing is written.
	Claim(ctx context.Context, spec ClaimSpec) ([]Claimed[K, R], error)

	// FinalizeMany ends attempts of rows claimed under lock, in one step:
	// for each Final whose row still carries lock, it applies Set, clears
	// the lock id and sets the lock expiry to VisibleAfter (NULL when
	// zero). owned[i] reports whether finals[i] was applied; a row that
	// another claim has taken since is left exactly as it is.
	FinalizeMany(ctx context.Context, lock LockID, finals []Final[K]) (owned []bool, err error)

	// RenewMany sets the lock expiry of the rows still carrying lock to
	// until. owned[i] reports whether ids[i] was renewed.
	RenewMany(ctx context.Context, lock LockID, until time.Time, ids []K) (owned []bool, err error)

	// ReleaseMany hands rows back without bookkeeping: for the rows still
	// carrying lock, it clears the lock id and the lock expiry, so they are
	// claimable at once. owned[i] reports whether ids[i] was released.
	ReleaseMany(ctx context.Context, lock LockID, ids []K) (owned []bool, err error)
}
