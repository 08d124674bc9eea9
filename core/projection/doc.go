// Package projection keeps a local, generation-swapped copy of a
// permission engine's answers, so that permission questions are answered
// from the service's own store instead of over the network.
//
// A projection holds, for one subject (a user, a service account), every
// resource the engine lets it touch and a 64-bit Mask of the permission
// bits it holds there. Bits maps the engine's permission names to bits.
//
// The pieces:
//
//   - Store, the adapter side: generations of grant sets, one active per
//     subject (backends/memory, backends/pgxstore).
//   - Source, the engine side: fetches a subject's grants.
//   - LocalReader answers from the Store only; Reader also refreshes an
//     absent projection through the Source, one refresh per subject at a
//     time however many callers ask.
//   - Refresher keeps projections fresh, on a schedule and on signals.
//   - Sweeper deletes superseded generations, on every node, without a
//     lock.
//
// # State model
//
// Per subject, as the Store holds it:
//
//	absent ──Replace──▶ active G1
//	active G1 ──Replace with G2 > G1──▶ active G2; G1 superseded
//	active G2 ──Replace with G1 < G2──▶ active G2 (ErrStale; nothing written)
//	superseded ──Sweep──▶ deleted
//	any ──the store loses its contents (PostgreSQL crash restart)──▶ absent
//
// A refresh reserves its generation number from the store (Reserve) before
// it fetches the grants, so the numbers order the fetches by the store's
// sequence, never by a node's clock. Replace writes a whole generation and
// makes it active in one atomic step, so a reader sees the old generation
// or the new one, never part of one, and never none once there was one. A
// generation being written is not visible to anything, readers and sweeps
// included; when Replace fails, the previous generation stays active.
// Exactly one generation per subject is active at any time, the largest:
// Replace refuses a generation reserved before the active one with
// ErrStale, so an answer fetched earlier never replaces one fetched later
// and a revoked grant cannot come back through a slow refresh. Reader and
// Refresher take ErrStale as "someone fresher won".
//
// # Absent is not "no access"
//
// A subject the engine grants nothing has an active, empty generation: its
// reads find nothing (no access), without an error. A subject with no
// active generation is unknown, and reads return ErrNoProjection: refresh
// it. The distinction matters on PostgreSQL, whose projection tables are
// UNLOGGED: after a crash restart they are empty, and every subject is
// unknown until refreshed. Reader refreshes such subjects through; with
// LocalReader, the caller decides (typically: ask the engine, or refresh).
//
// # Sweeping
//
// Superseded generations are dead weight; Sweep deletes them. It is
// idempotent and convergent: running it on every node, in parallel, equals
// running it once. So it takes no lock, unlike the outbox's retention,
// which deletes a bounded batch per pass and needs a lock to keep the bound.
package projection
