// Package workrow holds leased work rows: safe claim and finalize for an
// application's own queue-shaped tables (outbound e-mail, webhook
// dispatches, a durable retry table), and a Worker loop over them.
//
// A work table has three columns of baton's, an id, a lock id and a
// lock expiry (lock_id and locked_until by default); everything else, the
// completion marker, the attempt counter, the last error, stays the
// application's own. The Store interface is the adapter side; the
// PostgreSQL adapters live in backends/pgxstore and backends/bunstore, and
// the in-memory reference, memory.WorkRowStore, in backends/memory.
//
// # Claim, work, finalize
//
// A claim reads candidate rows, holding no lock beyond the claim itself,
// then stamps the ones still eligible in one conditional update that
// restates the whole eligibility predicate plus "lock free or expired", and
// hands back only the rows carrying the claim's lock id. Concurrent
// claimers never block one another for longer than that one step and never
// receive the same row for the same lease period.
//
// The work itself runs with no transaction and no row lock held. Afterwards
// every change to the row, finalize, renew and release, matches the id and
// the lock id, and reports whether the row was still owned: a worker that
// stalled past its lease learns that it lost the row instead of overwriting
// the new owner's work.
//
// # State model
//
// Each row moves through these states, as the store sees it:
//
//	ready ──claim (eligible, lock free or expired; lock id L, until T, OnClaim sets)──▶ claimed(L, T)
//	claimed(L, T) ──renew by L──▶ claimed(L, T')
//	claimed(L, T) ──release by L──▶ ready
//	claimed(L, T) ──finalize by L, no visibility──▶ ready or finished (the caller's sets decide)
//	claimed(L, T) ──finalize by L, visible after V──▶ delayed(V) ──V passes──▶ ready
//	claimed(L, T) ──T passes, nobody acted──▶ claimable again: the next claim takes it as claimed(L2, T2)
//	claimed(L2, T2) ──finalize, renew or release by L──▶ unchanged; the call reports false
//
// "Finished" is whatever the caller's finalize sets make of the row: a
// completion marker that takes it out of the eligibility predicate (and out
// of the claim index), or a parked marker after too many attempts.
//
// # Failure semantics
//
//   - Recovery is by expiry: a crashed worker releases nothing, its lease
//     lapses and the row becomes claimable again. There is no reaper and no
//     lock to leak.
//   - Delivery is at least once: a worker that dies after the remote side
//     accepted the work but before its finalize leaves the row to be done
//     again. Give the remote side the row id as an idempotency key.
//   - Count attempts at claim (OnClaim): a worker that dies mid-call still
//     uses one up, so a row that crashes its workers cannot loop forever.
//   - Leases are judged by the claimers' clocks: ClaimSpec.Now and
//     LeaseUntil come from the application. Keep the clock skew between
//     nodes small against the lease; a skewed clock can only make a row
//     claimable early, which the lock id guard turns into a lost finalize,
//     never into an overwrite.
//
// # Worker
//
// Worker is the loop most callers want: claim a batch, run the handler for
// each row with no transaction or lock held, renew the batch's lease while
// the work runs, then finalize: success completes the row; failure records
// the error and delays the row by the Backoff (Exponential or a Ladder of
// Steps, either honouring a longer remote Retry-After); a panic is a
// failure; a row lost to another worker is logged, never overwritten.
// Config.Concurrency runs that many handlers at once from one claim loop;
// rows then start in queue order but may finish out of order.
package workrow
