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

// A plan never gives one port twice, though each port is free when chosen.
func TestPlan_PortsDiffer(t *testing.T) {
	for range 20 {
		specs, _, err := Plan(3, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, s := range specs {
			for _, p := range []int{s.ClientPort, s.PeerPort} {
				if seen[p] {
					t.Fatalf("port %d given twice in %+v", p, specs)
				}
				seen[p] = true
			}
		}
	}
}
