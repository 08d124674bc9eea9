// Package outbox is baton's transactional outbox: rows a producer writes
// inside its own transaction, delivered by one leader, in one global order.
//
// # The order
//
// Every entry carries the id of the transaction that wrote it (xid, a
// 64-bit xid8 in PostgreSQL) and an id of its own. The walk reads entries in
// (xid, id) order. That is the order in which transactions took their xid,
// which PostgreSQL assigns at a transaction's first write: it is NOT commit
// order. Two transactions that change the same entity stay in order when
// each locks the entity row (SELECT … FOR UPDATE, which takes no xid)
// before its first write, and enqueues after changing it: the second then
// takes its xid only after the first committed. Starting with the UPDATE
// itself is almost as good, but an UPDATE holds its xid while it waits for
// the row lock, so two racing updates can get xids in the opposite order
// of their changes. docs/outbox.md has the details.
//
// The walk only reads below the horizon: xids older than the oldest
// transaction still in progress. Entries of a transaction that might still
// commit under an older xid are never skipped; they hold the walk back
// until that transaction ends. A long-running transaction anywhere in the
// database therefore pins the outbox.
//
// # Two sources
//
// The walk above is the default. Config.Log reads the same table from the
// database's log instead (LogStore: PostgreSQL logical decoding), in
// commit order and without horizon pinning; the passes below are the same
// for both, through an internal feed that knows the positions. A
// deployment switches either way on a live outbox (see logFeed and
// fromLog, and docs/outbox.md, "Choosing a source").
//
// # The walk, one pass
//
//	scan     one bounded statement: (xid, id) > cursor, below the horizon,
//	         ORDER BY xid, id LIMIT BatchSize; no transaction held after it
//	cut      the batch into contiguous runs of one lane
//	deliver  each run to its lane's Processor, in order; a lane with no
//	         processor parks its entries at once
//	decide   Delivered and Park advance the cursor; the first Retry stops
//	         the pass (everything after it is "not attempted"); an error, a
//	         panic or a wrong count of outcomes retries the whole run
//	settle   one transaction: cursor compare-and-set from the pass's start,
//	         parked entries copied to the dead letters, state stamps upserted
//
// A busy walk reads ahead from a store that can scan while it settles
// (ConcurrentScanner): once a scan returns a full batch, and the pass
// before settled all of its own, the scan of the next batch, from that
// batch's end, runs while the batch is delivered and settled. The batch
// read ahead is delivered only once the pass before it has settled all of
// its batch; if that pass settled less, or its settlement failed, or the
// term ended, the batch is dropped (a scan writes nothing) and the next
// pass scans from the stored cursor. A read ahead that fails, or panics,
// is the scan's answer. At most two batches are in hand, so up to twice
// MaxScanBytes.
//
// Before every run and every settlement the leader asks its lock
// Trusted(), synchronously on the monotonic clock (Lost is closed by a
// timer, which a goroutine resumed after a pause can outrun); a pass whose
// lock is lost or no longer trusted stops at once and settles nothing. A
// settlement that finds the cursor moved (another leader settled) is
// discarded and this leader steps down: the cursor never goes backwards.
// Processors get the leader's fencing token on the context (FencingToken)
// to send to the destination, which can refuse a deposed leader; a
// processor reports that as ErrFenced, and the leader steps down without
// settling. Delivery is at least once, and destinations must be
// idempotent; the entry id is the idempotency key.
//
// Reasons and errors are made storable (StorableReason) before any store
// sees them, so nothing a processor returns can make a settlement fail.
// Parking copies an entry to the dead letters and leaves it below the
// cursor until retention, so its id is never free between the two.
//
// # The producer's trace context
//
// A producer may put its request's W3C trace context on Enqueue's context
// (WithTraceContext; otelbaton.Inject does it from a span). Every adapter's
// Enqueue validates it and stores it with the entry; Scan and the log
// return it in Entry.TraceContext, a dead letter keeps it and a requeue
// passes it on, so whatever observes the delivery (a Hooks implementation,
// a processor) can relate it to the request. Core only carries the text.
//
// # States of a driver
//
//	standby ──acquires LeaderLockName──▶ leader ──Lost / deposed / ctx end──▶ standby (or stopped)
//	leader: pass ─▶ settle ─▶ pause ─▶ pass …
//	  pause = 0 after a full batch, IdleDelay after an empty or partial one,
//	          ErrorDelay (or the retry's RetryAfter) after a retry or a failure
//
// No processors registered: no scan at all, and a warning every pass.
//
// # Wake-ups
//
// Over a Store that is also a Waker, and without PollOnly, the pause after
// an empty or partial pass ends at the first signal: the leader listens
// (one session, while it leads), producers signal the commits of their
// entries while it waits, and it walks at once. A signalled entry the walk
// cannot read yet, because the horizon has not passed it, is scanned for
// again within milliseconds, more slowly the longer the horizon stays
// pinned. A failed session falls back to polling every IdleDelay and is
// opened again with a backoff. See Waker for the rules.
//
// # Notices and health
//
// State is a set of keys (last_scanned_xid, last_scan_at, first_stuck_at,
// …); an absent key reads as its default. A settlement writes the stamps
// that changed since the term last read or wrote them, and last_scan_at
// with them or once a second. first_stuck_at is set when a pass
// ends in a retry or fails and cleared by a settled one that delivered or
// found nothing; when the streak has lasted StuckAfter a stuck notice goes
// to Notify, at most once per StuckNoticeEvery. The leader keeps the streak
// and the throttles in memory too, so the notice comes while nothing can be
// stored (the database unreachable, settlements failing). Every store call
// runs under StoreTimeout, so one that hangs (a network dropping packets)
// fails its pass and counts in the streak too. A stored cursor
// ahead of the database's transaction counter (Store.NextXID), which a
// logical restore into another cluster leaves, makes the driver refuse to
// walk (ErrCursorAhead) and notify at once; `baton outbox rebase` repairs
// it. Parked entries raise a throttled dead-letter
// notice. An idle outbox never raises stuck. There is no lag metric: a
// cursor-based lag is wrong in both directions (it climbs on an idle
// outbox while unrelated transactions advance, and reads zero when a long
// transaction pins the horizon). Alert on the stuck notice.
//
// # Retention
//
// Its own loop and lock (RetentionLockName): every RetentionInterval a
// sweep deletes delivered (and parked) entries at or below the cursor and
// older than RetentionWindow, and requeued dead letters past it, in
// statements of at most RetentionBatchSize rows, RetentionBatchPause
// apart, until it is caught up or RetentionSweepBudget is spent. The walk reads only above the cursor, so the driver and
// retention never touch the same rows, and different instances may lead
// each. Dead letters never requeued are kept until an operator acts
// (AdminHandler: list, show, requeue).
package outbox
