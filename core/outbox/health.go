package outbox

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// health is what a leader knows about the failing streak and the notices
// it sent. The stored state stamps are a copy of it, written by each
// settlement; the leader keeps it in memory too, because the moments it
// matters most (the database unreachable, settlements failing) are the
// moments nothing can be stored. It is read from the stored stamps once per
// leadership term and merged with what the term saw before it could read.
type health struct {
	failed    int       // passes in the current failing streak
	since     time.Time // when the streak began; zero while not failing
	lastError string    // as stored: the reason, after the lane and entry it concerns
	reason    string    // as the notice carries it
	at        Entry     // the entry the walk stopped at, if any

	stuckNotice  time.Time
	deadLetterAt time.Time
	deadNotice   time.Time
}

// storedHealth reads the stamps of a stored state.
func storedHealth(st map[string]string) health {
	var h health
	h.failed, _ = strconv.Atoi(st[KeyFailedAttempts])
	h.since, _ = parseStamp(st[KeyFirstStuckAt])
	if !h.since.IsZero() {
		h.lastError = st[KeyLastError]
		h.reason = h.lastError
	}
	h.stuckNotice, _ = parseStamp(st[KeyLastStuckNotificationAt])
	h.deadLetterAt, _ = parseStamp(st[KeyLastDeadLetterAt])
	h.deadNotice, _ = parseStamp(st[KeyLastDeadLetterNotificationAt])
	return h
}

// merge folds the stored health into what this term recorded before it
// could read it: the streak started at the earlier of the two, and a
// notice counts from the later one.
func (h *health) merge(stored health) {
	if !stored.since.IsZero() {
		if h.since.IsZero() || stored.since.Before(h.since) {
			h.since = stored.since
		}
		h.failed += stored.failed
		if h.lastError == "" {
			h.lastError, h.reason, h.at = stored.lastError, stored.reason, stored.at
		}
	}
	h.stuckNotice = later(h.stuckNotice, stored.stuckNotice)
	h.deadLetterAt = later(h.deadLetterAt, stored.deadLetterAt)
	h.deadNotice = later(h.deadNotice, stored.deadNotice)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// fail records a failed pass: one that stopped at a retry, or could not
// scan, read the state or settle. After progress a new streak begins. The
// reason, a processor's or an error's, is made storable here, once.
func (h *health) fail(now time.Time, at Entry, reason string, progressed bool) {
	if h.since.IsZero() || progressed {
		h.since, h.failed = now, 0
	}
	h.failed++
	h.at, h.reason = at, StorableReason(reason)
	h.lastError = h.reason
	if at.Lane != "" {
		h.lastError = StorableReason(fmt.Sprintf("lane %s, entry %s: %s", at.Lane, at.ID, h.reason))
	}
}

// ok records a pass that delivered everything it found, or found nothing.
func (h *health) ok() {
	h.failed, h.since, h.lastError, h.reason, h.at = 0, time.Time{}, "", "", Entry{}
}

// stamps are the state keys that store h, with last_scan_at at now.
func (h health) stamps(now time.Time) map[string]*string {
	m := map[string]*string{KeyLastScanAt: stamp(now)}
	if h.since.IsZero() {
		m[KeyFirstStuckAt], m[KeyFailedAttempts] = nil, nil
	} else {
		m[KeyFirstStuckAt] = stamp(h.since)
		m[KeyFailedAttempts] = ptr(strconv.Itoa(h.failed))
		m[KeyLastError] = ptr(h.lastError)
		// Its time, so a last_error left from an old streak is not read
		// as news once passes succeed again.
		m[KeyLastErrorAt] = stamp(now)
	}
	for k, t := range map[string]time.Time{
		KeyLastStuckNotificationAt:      h.stuckNotice,
		KeyLastDeadLetterAt:             h.deadLetterAt,
		KeyLastDeadLetterNotificationAt: h.deadNotice,
	} {
		if !t.IsZero() {
			m[k] = stamp(t)
		}
	}
	return m
}

// notifyStuck raises the stuck notice when the streak has lasted
// StuckAfter (or at once, when waiting cannot help), at most once per
// StuckNoticeEvery, and records that it did.
func (d *Driver) notifyStuck(ctx context.Context, h *health, now time.Time, atOnce bool) {
	cfg := &d.cfg
	if h.since.IsZero() || (!atOnce && now.Sub(h.since) < cfg.StuckAfter) {
		return
	}
	if !h.stuckNotice.IsZero() && now.Sub(h.stuckNotice) < cfg.StuckNoticeEvery {
		return
	}
	n := Notice{Kind: NoticeStuck, Lane: h.at.Lane, EntryID: h.at.ID, Since: h.since, LastError: h.reason, At: now}
	d.stuck(ctx, n)
	if err := cfg.Notify(ctx, n); err != nil {
		cfg.Logger.Warn("outbox: the stuck notice could not be sent", "err", err)
		return
	}
	h.stuckNotice = now
}

// notifyDeadLetters records parked entries and raises the (throttled)
// dead-letter notice.
func (d *Driver) notifyDeadLetters(ctx context.Context, h *health, now time.Time, parked []Parked) {
	cfg := &d.cfg
	h.deadLetterAt = now
	if !h.deadNotice.IsZero() && now.Sub(h.deadNotice) < cfg.DeadLetterNoticeEvery {
		return
	}
	first := parked[0]
	n := Notice{Kind: NoticeDeadLetter, Lane: first.Entry.Lane, EntryID: first.Entry.ID, LastError: first.Reason, Parked: len(parked), At: now}
	if err := cfg.Notify(ctx, n); err != nil {
		cfg.Logger.Warn("outbox: the dead-letter notice could not be sent", "err", err)
		return
	}
	h.deadNotice = now
}

// scanStampEvery bounds how often a walk whose health does not change
// rewrites last_scan_at: a busy walk settles hundreds of passes a second,
// and the stamp tells an operator that the walk runs, not when each pass
// did.
const scanStampEvery = time.Second

// changedStamps is what a settlement writes of next's stamps: the keys
// whose value differs from the stored one (as this term last loaded or
// settled it), and last_scan_at when any of those changes or
// scanStampEvery has passed since this term last wrote it.
func (w *walker) changedStamps(next health, now time.Time) map[string]*string {
	all := next.stamps(now)
	if w.stored == nil {
		return all
	}
	out := make(map[string]*string, len(all))
	for k, v := range all {
		if k == KeyLastScanAt {
			continue
		}
		old, had := w.stored[k]
		if (v == nil && !had) || (v != nil && had && old == *v) {
			continue
		}
		out[k] = v
	}
	if len(out) > 0 || now.Sub(w.scanStampAt) >= scanStampEvery {
		out[KeyLastScanAt] = all[KeyLastScanAt]
	}
	return out
}

// stamped records state, settled at now, as stored.
func (w *walker) stamped(state map[string]*string, now time.Time) {
	if w.stored == nil {
		w.stored = map[string]string{}
	}
	for k, v := range state {
		if v == nil {
			delete(w.stored, k)
		} else {
			w.stored[k] = *v
		}
	}
	if _, ok := state[KeyLastScanAt]; ok {
		w.scanStampAt = now
	}
}
