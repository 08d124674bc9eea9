package workrow

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Defaults of Exponential.
const (
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = time.Hour
	// DefaultJitter shortens each delay by up to a fifth, at random, so
	// rows that failed together do not come back together.
	DefaultJitter = 0.2
)

// NoJitter, as Exponential.Jitter, makes every delay exact.
const NoJitter = -1.0

// Backoff says how long a row stays invisible after a failed attempt.
type Backoff interface {
	// Delay is the wait after the attempt-th attempt failed (attempts count
	// from 1, including the one that just failed). retryAfter is what the
	// remote side asked for (a Retry-After header), 0 when it asked for
	// nothing; a longer retryAfter wins.
	Delay(attempt int, retryAfter time.Duration) time.Duration
}

// BackoffFunc adapts a function to Backoff.
type BackoffFunc func(attempt int, retryAfter time.Duration) time.Duration

// Delay calls f.
func (f BackoffFunc) Delay(attempt int, retryAfter time.Duration) time.Duration {
	return f(attempt, retryAfter)
}

// Exponential doubles the delay with every attempt, from Initial up to Max,
// and shortens each delay by a random fraction of up to Jitter. The zero
// value uses the defaults.
type Exponential struct {
	// Initial is the delay after the first failed attempt (default
	// DefaultBackoffInitial).
	Initial time.Duration
	// Max caps the delay (default DefaultBackoffMax). A longer remote
	// Retry-After still wins.
	Max time.Duration
	// Jitter is the largest fraction, up to 1, by which a delay is
	// shortened at random. 0 means DefaultJitter; NoJitter (any negative
	// value) means none.
	Jitter float64
}

// Validate reports bounds that cannot be honoured, naming the field.
func (e Exponential) Validate() error {
	switch {
	case e.Initial < 0:
		return fmt.Errorf("Exponential.Initial is %v; it must not be negative", e.Initial)
	case e.Max < 0:
		return fmt.Errorf("Exponential.Max is %v; it must not be negative", e.Max)
	case e.Jitter > 1:
		return fmt.Errorf("Exponential.Jitter is %v; it is a fraction of the delay, at most 1", e.Jitter)
	}
	e = e.withDefaults()
	if e.Initial > e.Max {
		return fmt.Errorf("Exponential.Initial (%v) is above Max (%v)", e.Initial, e.Max)
	}
	return nil
}

func (e Exponential) withDefaults() Exponential {
	if e.Initial == 0 {
		e.Initial = DefaultBackoffInitial
	}
	if e.Max == 0 {
		e.Max = DefaultBackoffMax
	}
	switch {
	case e.Jitter == 0:
		e.Jitter = DefaultJitter
	case e.Jitter < 0:
		e.Jitter = 0
	}
	return e
}

// Delay is Initial·2^(attempt−1), capped at Max, shortened by the jitter,
// or retryAfter when that is longer.
func (e Exponential) Delay(attempt int, retryAfter time.Duration) time.Duration {
	e = e.withDefaults()
	d := e.Initial
	for i := 1; i < attempt && d < e.Max; i++ {
		d *= 2
	}
	d = min(d, e.Max)
	if e.Jitter > 0 && d > 0 {
		d -= time.Duration(rand.Float64() * e.Jitter * float64(d))
	}
	return max(d, retryAfter)
}

// Steps is a retry ladder as a Backoff: see Ladder.
type Steps []time.Duration

// Delay is Ladder(attempt, s, retryAfter).
func (s Steps) Delay(attempt int, retryAfter time.Duration) time.Duration {
	return Ladder(attempt, s, retryAfter)
}

// Validate reports an empty ladder or a negative step.
func (s Steps) Validate() error {
	if len(s) == 0 {
		return fmt.Errorf("Steps is empty; give at least one delay")
	}
	for i, d := range s {
		if d < 0 {
			return fmt.Errorf("Steps[%d] is %v; it must not be negative", i, d)
		}
	}
	return nil
}

// Ladder is the delay after the attempt-th failed attempt on a fixed
// ladder: steps[attempt−1], the last step for every attempt beyond the
// ladder, the first for attempt ≤ 1. A longer remote retryAfter wins, so a
// server asking for an hour gets an hour even on the first rung. With no
// steps it is retryAfter.
func Ladder(attempt int, steps []time.Duration, retryAfter time.Duration) time.Duration {
	if len(steps) == 0 {
		return max(retryAfter, 0)
	}
	i := min(max(attempt, 1), len(steps)) - 1
	return max(steps[i], retryAfter)
}
