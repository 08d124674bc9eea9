package redis

import (
	"testing"
	"time"
)

func TestRestartWait_CountsTheUptimeAsUpToOneSecondShorter(t *testing.T) {
	// Redis's uptime_in_seconds is the difference of two whole-second
	// readings: 1 can mean 10ms. A wait that took it as a full second
	// granted the lock a second early, while a holder from before the
	// restart could still trust its own.
	for _, tc := range []struct {
		uptime int64
		want   time.Duration
	}{
		{0, 2 * time.Second},
		{1, 2 * time.Second},
		{2, time.Second},
		{3, 0},
		{10, -7 * time.Second},
	} {
		if got := restartWait(2*time.Second, tc.uptime); got != tc.want {
			t.Errorf("restartWait(2s, uptime %d) = %v, want %v", tc.uptime, got, tc.want)
		}
	}
}
