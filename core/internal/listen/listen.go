// Package listen holds what the outbox's leader and a work-row Run share
// when they listen for commits: the session kept open, with a backoff
// after it failed, and the growing pause of the walks or claims made while
// a signalled commit is not readable yet.
package listen

import (
	"context"
	"time"
)

// The pace. A session that failed or could not open is tried again after
// RetryFirst, doubling up to the caller's error delay. A pause grows from
// PauseFirst, doubling up to PauseCap; once it has lasted PauseShare ×
// PauseCap, it is a PauseShare-th of the time since it began, so a
// horizon pinned for an hour costs a few scans a minute, and one pinned
// for a second is seen through within PauseCap of its end.
const (
	RetryFirst = 100 * time.Millisecond
	PauseFirst = time.Millisecond
	PauseCap   = 20 * time.Millisecond
	PauseShare = 100
	// Timeout bounds opening a session and each question asked of it
	// that is not a wait: a connection that hangs (a dropped route) must
	// not stall the caller.
	Timeout = 10 * time.Second
)

// Closer is a session.
type Closer interface{ Close() error }

// Session keeps one listening session of type L, opened on demand.
type Session[L Closer] struct {
	// Open opens a session.
	Open func(ctx context.Context) (L, error)
	// Failed is told why a session failed and when it is tried again.
	Failed func(err error, retryIn time.Duration)
	// ErrorDelay bounds the pause before trying again.
	ErrorDelay time.Duration

	l        L
	open     bool
	retryAt  time.Time
	retryGap time.Duration
}

// Get returns the session, opening it when none is open and the pause
// after the last failure has passed; false when there is none.
func (s *Session[L]) Get(ctx context.Context) (L, bool) {
	if s.open || time.Now().Before(s.retryAt) {
		return s.l, s.open
	}
	if s.retryGap == 0 {
		s.retryGap = min(RetryFirst, s.ErrorDelay)
	}
	octx, cancel := context.WithTimeout(ctx, Timeout)
	l, err := s.Open(octx)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.Drop(err)
		}
		return s.l, false
	}
	s.l, s.open, s.retryGap = l, true, min(RetryFirst, s.ErrorDelay)
	return l, true
}

// Current returns the session if one is open, opening none.
func (s *Session[L]) Current() (L, bool) { return s.l, s.open }

// Drop closes a session that failed (or reports a failed open) and sets
// when to try again.
func (s *Session[L]) Drop(err error) {
	s.Failed(err, s.retryGap)
	s.Close()
	s.retryAt = time.Now().Add(s.retryGap)
	s.retryGap = min(2*s.retryGap, s.ErrorDelay)
}

// Close ends the session, if one is open.
func (s *Session[L]) Close() {
	if s.open {
		_ = s.l.Close()
		var zero L
		s.l, s.open = zero, false
	}
}

// UntilRetry is how long until Get tries to open a session again.
func (s *Session[L]) UntilRetry() time.Duration { return max(time.Until(s.retryAt), 0) }

// Pause is a growing pause, reset when the caller made progress.
type Pause struct {
	gap   time.Duration
	since time.Time
}

// Reset starts the pause over.
func (p *Pause) Reset() { p.gap = 0 }

// Next is the next pause, at most limit.
func (p *Pause) Next(limit time.Duration) time.Duration {
	now := time.Now()
	if p.gap == 0 {
		p.gap, p.since = PauseFirst, now
	} else {
		p.gap = min(2*p.gap, max(PauseCap, now.Sub(p.since)/PauseShare))
	}
	return min(p.gap, limit)
}

// Sleep waits d, or until ctx ends (false).
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
