package member

import (
	"testing"
	"time"
)

// The floor etcd puts on leases is what the tests' ShortLease relies on;
// the demo command's test checks it against a cluster's grant.
func TestTiming_MinLeaseTTL(t *testing.T) {
	for _, tc := range []struct {
		t    Timing
		want time.Duration
	}{
		{Timing{TickMs: 100, ElectionMs: 1000}, 2 * time.Second},
		{Timing{TickMs: 200, ElectionMs: 2000}, 3 * time.Second},
		{Timing{TickMs: 100, ElectionMs: 600}, time.Second},
		{Timing{TickMs: 100, ElectionMs: 700}, time.Second}, // 10 whole ticks of the 10.5
		{Timing{TickMs: 100, ElectionMs: 800}, 2 * time.Second},
	} {
		if got := tc.t.MinLeaseTTL(); got != tc.want {
			t.Errorf("%+v: MinLeaseTTL %v, want %v", tc.t, got, tc.want)
		}
	}
}
