package lock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lock"
)

// The margin may reach up to, not including, two thirds of TTL: one
// refresh interval (TTL/3) must fit inside the trust window.
func TestCheckSafetyMargin_BelowTwoThirdsOfTTL(t *testing.T) {
	const ttl = 3 * time.Second
	for margin, ok := range map[time.Duration]bool{
		0: true, time.Second: true, 2*time.Second - time.Nanosecond: true,
		2 * time.Second: false, -time.Nanosecond: false,
	} {
		err := lock.CheckSafetyMargin("X.SafetyMargin", ttl, margin)
		if ok != (err == nil) || (err != nil && !errors.Is(err, lock.ErrInvalidOptions)) {
			t.Errorf("margin %v of TTL %v: %v", margin, ttl, err)
		}
	}
}
