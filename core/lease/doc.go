// Package lease holds role leases: which instance of a service is, right
// now, "the maintenance coordinator" or the owner of "devices:partition-7".
//
// A lease is a row in a store (the Store interface; PostgreSQL and memory
// adapters live in backends/...). One Manager per process runs one heartbeat
// loop that renews or takes every registered role in a single store round
// trip per RenewInterval, however many roles and partitions it has.
// Heartbeats start RenewInterval apart, counted from start to start, and
// each gives up after RenewInterval, so a heartbeat that never answers does
// not delay the next one.
//
// # State model
//
// Each Lease moves through these states, as seen by its own instance:
//
//	follower ──heartbeat takes the free or expired row──▶ holder
//	holder ──heartbeat renews its own term──▶ holder (same token)
//	holder ──no successful renewal for LeaseDuration−HeldSafetyMargin──▶ fail-closed
//	fail-closed ──a later heartbeat renews the same term, or takes a new one──▶ holder
//	fail-closed ──another instance took the role──▶ follower
//	any ──Close──▶ released (IsHeld false at once, then the row is freed)
//
// IsHeld is true only in the holder state. It is an atomic read compared
// with the monotonic clock: the holder state ends by itself at
//
//	start of the last successful renewal request + LeaseDuration − HeldSafetyMargin
//
// with no goroutine involved, so a holder whose heartbeat stalls, whose
// database is unreachable or whose process was paused stops acting on its
// own. The store judges expiry with its own clock (now() in SQL) and lets
// another instance take over only after LeaseDuration; the old holder has
// stopped believing it holds HeldSafetyMargin earlier.
//
// NewManager requires LeaseDuration − HeldSafetyMargin > 2 × RenewInterval:
// when one heartbeat fails or never answers, the next one starts
// 2 × RenewInterval after the last good one and renews the same term before
// trust ends, so one lost packet costs neither IsHeld nor the token.
//
// # Failure semantics
//
//   - Graceful Close: IsHeld turns false, then the row is released; the
//     PostgreSQL store announces the release (NOTIFY) and waiting managers
//     take the role at once.
//   - Process or node loss: the row expires after LeaseDuration; another
//     manager takes it at its next heartbeat.
//   - Store outage: no instance believes it holds after its safety window;
//     coordination fails closed.
//   - Every takeover increments the role's token (Token), a fencing token
//     for the resources the holder writes to. A renewal matches role,
//     holder and token, so a deposed holder can never extend its
//     successor's term.
//   - Clocks: local validity uses only this process's monotonic clock;
//     expiry uses only the store's clock. Wall clocks are never compared.
//
// There is deliberately no "became holder" callback: a holder can lose the
// role between any two units of work. Gate each unit with IsHeld.
//
// CurrentHolder and CurrentHolderAddress are snapshots refreshed at
// heartbeat cadence, for routing and display; they may lag a failover by
// one RenewInterval.
//
// # Partitions
//
// RegisterPartition registers N roles, {name}:partition-0 … N-1. A key
// picks one with a fixed hash (64-bit FNV-1a of its UTF-8 bytes, modulo N;
// with a scope, the hash runs over scope, a 0x1F byte, then key).
// Partition.Resolve does no I/O and allocates nothing.
package lease
