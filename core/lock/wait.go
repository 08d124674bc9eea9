package lock

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/baton-go/baton/core/config"
)

// Default backoff between acquisition attempts while waiting. The floor keeps
// a released lock promptly taken by a waiter; the cap bounds how stale a
// waiter's view can get without hammering the server.
const (
	DefaultRetryMin = 2 * time.Millisecond
	DefaultRetryMax = 25 * time.Millisecond
)

// Backoff is the pause between acquisition attempts while waiting: it starts
// at Min, doubles up to Max, and each pause is jittered down by up to a half
// so that waiters do not retry in lockstep.
type Backoff struct {
	Min time.Duration // 0 means DefaultRetryMin
	Max time.Duration // 0 means DefaultRetryMax
}

// Validate reports a backoff whose bounds are inverted or negative.
func (b Backoff) Validate() error {
	switch {
	case b.Min < 0 || b.Max < 0:
		return config.Invalid(ErrInvalidOptions, "Backoff", "Min (%v) and Max (%v) must not be negative", b.Min, b.Max)
	case b.Max != 0 && b.Min > b.Max:
		return config.Invalid(ErrInvalidOptions, "Backoff", "Min (%v) is above Max (%v)", b.Min, b.Max)
	}
	return nil
}

// withDefaults returns a copy of b with its zero bounds set to the
// defaults.
func (b Backoff) withDefaults() Backoff {
	if b.Min == 0 {
		b.Min = DefaultRetryMin
	}
	if b.Max == 0 {
		b.Max = DefaultRetryMax
	}
	if b.Min > b.Max {
		b.Max = b.Min
	}
	return b
}

// Attempt is one try at taking a lock. It returns acquired=true when the lock
// is now held. When the lock is held by someone else it returns false and,
// optionally, a channel that is closed when the lock may have become free, so
// the wait can end before the next backoff step. Any error ends the wait.
type Attempt func(ctx context.Context) (acquired bool, freed <-chan struct{}, err error)

// WaitFor runs attempt until it acquires, until wait elapses (ErrNotAcquired)
// or until ctx ends (ctx.Err()). It always makes at least one attempt, and
// one more at the end of the wait. Providers share it so every one of them
// waits the same way.
func WaitFor(ctx context.Context, wait time.Duration, backoff Backoff, attempt Attempt) error {
	backoff = backoff.withDefaults()
	start := time.Now()
	pause := backoff.Min
	for {
		acquired, freed, err := attempt(ctx)
		if err != nil {
			return err
		}
		if acquired {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		left := wait - time.Since(start)
		if left <= 0 {
			return ErrNotAcquired
		}
		sleep := pause/2 + rand.N(pause/2+1)
		sleep = min(sleep, left)
		pause = min(pause*2, backoff.Max)

		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-freed: // a nil channel never fires
			t.Stop()
		case <-t.C:
		}
	}
}
