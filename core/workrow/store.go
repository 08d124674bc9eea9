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
// check and the write.
//
// The rules a store keeps are numbered W1 to W15 on the methods below and
// here; conformance.RunWorkRows checks each one with a subtest of its own
// (docs/adapters.md lists which). Besides the methods' own:
//
//   - W11 worker: Claim, FinalizeMany and RenewMany carry Worker: several
//     workers over stores sharing the table handle every row exactly once
//     (a row whose first attempt fails, exactly twice), count every
//     attempt, and leave every row unlocked.
//   - W12 concurrent handlers: the same holds for workers running many
//     handlers each (Config.Concurrency), which keep several claims in
//     hand at once and finalize each claim's rows in the order their
//     handlers finished: FinalizeMany pairs every Final with its own row
//     whatever order the finals come in.
//   - W13 bad input: a spec failing ClaimSpec.Validate, and a finalize,
//     renew or release request failing CheckFinalize, CheckRenew or
//     CheckRelease, is an error wrapping ErrInvalidSpec and writes
//     nothing.
//   - W14 context: every method called with an ended context fails with an
//     error that wraps ctx.Err(), and changes no row.
//   - W15 schema: a store over a table that does not exist, or has the
//     wrong shape, fails every call with the adapter's schema-mismatch
//     error.
type Store[K comparable, R any] interface {
	// Claim stamps up to spec.BatchSize rows that satisfy spec.Eligible and
	// whose lock is free with spec.LockID and lock expiry spec.LeaseUntil,
	// applies spec.OnClaim to them in the same step, and returns exactly
	// the rows it stamped. Candidates are found holding no lock beyond
	// this step; the stamping step restates the whole predicate and the
	// lock check, so a row another claimer took (or that stopped being
	// eligible) meanwhile is skipped, never taken twice.
	//
	//   - W1 claim: it takes only eligible rows with a free lock, at most
	//     BatchSize, in spec.Order then id order, stamps exactly those, and
	//     returns them in that order as they are afterwards.
	//   - W2 one claim per row: of concurrent claims, on any stores over
	//     the same table, no two get the same row within one lease period,
	//     and each row carries the lock of the claim that returned it.
	//   - W3 expiry: a lock is free when its expiry is NULL or not after
	//     spec.Now, judged by spec.Now and never by the store's own clock:
	//     a row is claimable again exactly at its lease end, with nobody
	//     having released it.
	//   - W4 attempts: OnClaim's sets are applied in the claiming step, so
	//     a row claimed by workers that all die counts every attempt, and
	//     stops being eligible when the predicate says so.
	//   - W6 claim index: a row its finalize completes leaves the live
	//     filter (and the partial claim index over it) and is never claimed
	//     again; failed and released rows stay in it.
	Claim(ctx context.Context, spec ClaimSpec) ([]Claimed[K, R], error)

	// FinalizeMany ends attempts of rows claimed under lock, in one step:
	// for each Final whose row still carries lock, it applies Set, clears
	// the lock id and sets the lock expiry to VisibleAfter (NULL when
	// zero). owned[i] reports whether finals[i] was applied.
	//
	//   - W5 retry later: a failed row finalized with VisibleAfter is
	//     unlocked but not claimable before then, and the rows after it
	//     are claimed meanwhile; at VisibleAfter it comes back with its
	//     columns as the finalize left them.
	//   - W7 stale lock: once a row's lease ran out and another claim took
	//     it, finalize, renew and release by the old lock report false and
	//     leave the row exactly as it is; the new owner's succeed.
	//   - W8 per row: each row gets its own Final's sets, and a row that
	//     another claim holds is reported false and left as it is, while
	//     the caller's other rows are finalized.
	FinalizeMany(ctx context.Context, lock LockID, finals []Final[K]) (owned []bool, err error)

	// RenewMany sets the lock expiry of the rows still carrying lock to
	// until. owned[i] reports whether ids[i] was renewed.
	//
	//   - W9 renew: only rows carrying lock are renewed, and are not
	//     claimable before their new lease end; another lock renews
	//     nothing.
	RenewMany(ctx context.Context, lock LockID, until time.Time, ids []K) (owned []bool, err error)

	// ReleaseMany hands rows back without bookkeeping: for the rows still
	// carrying lock, it clears the lock id and the lock expiry. owned[i]
	// reports whether ids[i] was released.
	//
	//   - W10 release: a released row is claimable at once, and keeps the
	//     columns its claim set.
	ReleaseMany(ctx context.Context, lock LockID, ids []K) (owned []bool, err error)
}

// ClaimsFinalizer is what a Store implements, besides Store, when it can
// end the attempts of several claims in one step. A Worker whose claims
// finish close together then finalizes them in one call (one statement and
// one commit for SQL stores) instead of one call per claim; with a Store
// that lacks it, each claim is finalized on its own.
type ClaimsFinalizer[K comparable] interface {
	// FinalizeClaims is FinalizeMany for each claim in claims, in one
	// atomic step: owned[c][i] reports whether claims[c].Finals[i] was
	// applied. On an error nothing is applied.
	//
	//   - W21 several claims: each Final is guarded by its own claim's
	//     lock, exactly as FinalizeMany(ctx, c.Lock, c.Finals) would be: a
	//     row that carries another claim's lock (another one of the same
	//     call included) is reported false and left as it is, and every
	//     row gets its own Final's sets. A request failing CheckClaims is
	//     an error wrapping ErrInvalidSpec and writes nothing.
	FinalizeClaims(ctx context.Context, claims []ClaimFinals[K]) (owned [][]bool, err error)
}

// ClaimFinals is one claim's part of a FinalizeClaims call: the lock id its
// claim stamped and the Finals of its rows.
type ClaimFinals[K comparable] struct {
	Lock   LockID
	Finals []Final[K]
}
