package outboxtest

import (
	"testing"

	"github.com/baton-go/baton/core/outbox"
)

func TestCheckOrder_CountsEveryWayTheDeliveriesCanDiffer(t *testing.T) {
	a, b, c, x := outbox.ID{1}, outbox.ID{2}, outbox.ID{3}, outbox.ID{9}
	// Committed out of order on purpose: b's transaction took the lower xid.
	committed := []Committed{{XID: 7, ID: a}, {XID: 5, ID: b}, {XID: 7, ID: c}}
	for name, tc := range map[string]struct {
		delivered []outbox.ID
		want      Order
	}{
		"exact":        {[]outbox.ID{b, a, c}, Order{Exact: true, FirstDifference: -1}},
		"swapped":      {[]outbox.ID{a, b, c}, Order{OutOfOrder: 1, FirstDifference: 0}},
		"missing last": {[]outbox.ID{b, a}, Order{Missing: 1, FirstDifference: 2}},
		"missing one":  {[]outbox.ID{b, c}, Order{Missing: 1, FirstDifference: 1}},
		"a stranger":   {[]outbox.ID{b, a, x, c}, Order{Unexpected: 1, FirstDifference: 2}},
		"one too many": {[]outbox.ID{b, a, c, x}, Order{Unexpected: 1, FirstDifference: 3}},
		"nothing":      {nil, Order{Missing: 3, FirstDifference: 0}},
	} {
		if got := CheckOrder(committed, tc.delivered); got != tc.want {
			t.Errorf("%s: CheckOrder = %+v, want %+v", name, got, tc.want)
		}
	}
	if got := CheckOrder(nil, nil); !got.Exact {
		t.Errorf("nothing committed, nothing delivered: %+v, want exact", got)
	}
}
