package lease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lease"
)

func TestCompareRoles_NumbersByValue(t *testing.T) {
	got := []string{"partition-10", "coordinator", "partition-2", "partition-1", "partition-02", "partition-", "p9x", "p10x", "reports"}
	slices.SortFunc(got, lease.CompareRoles)
	want := []string{"coordinator", "p9x", "p10x", "partition-", "partition-1", "partition-02", "partition-2", "partition-10", "reports"}
	if !slices.Equal(got, want) {
		t.Fatalf("sorted %q, want %q", got, want)
	}
	for _, p := range [][2]string{{"a2", "a10"}, {"a", "a1"}, {"a01", "a1"}, {"x-9-2", "x-9-10"}} {
		if lease.CompareRoles(p[0], p[1]) >= 0 || lease.CompareRoles(p[1], p[0]) <= 0 {
			t.Errorf("%q and %q are not ordered both ways", p[0], p[1])
		}
	}
	if lease.CompareRoles("same-1", "same-1") != 0 {
		t.Error("equal strings do not compare equal")
	}
}

func TestSplitPartitionRole_InvertsPartitionRole(t *testing.T) {
	for _, tc := range []struct {
		name string
		i    int
	}{{"devices", 0}, {"devices", 4095}, {"a:partition-1", 7}, {"x", 10}} {
		name, i, ok := lease.SplitPartitionRole(lease.PartitionRole(tc.name, tc.i))
		if !ok || name != tc.name || i != tc.i {
			t.Errorf("SplitPartitionRole(PartitionRole(%q, %d)) = %q, %d, %v", tc.name, tc.i, name, i, ok)
		}
	}
	for _, role := range []string{"coordinator", ":partition-1", "devices:partition-", "devices:partition-01",
		"devices:partition--1", "devices:partition-+1", "devices:partition-1x", "devices-partition-1"} {
		if name, i, ok := lease.SplitPartitionRole(role); ok {
			t.Errorf("SplitPartitionRole(%q) = %q, %d, true; PartitionRole never writes it", role, name, i)
		}
	}
}

// unlisted is a store without Lister.
type unlisted struct{ lease.Store }

func TestListLeases_SortsTheListingAndNeedsALister(t *testing.T) {
	ctx := context.Background()
	st, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claims []lease.Claim
	for _, role := range []string{"devices:partition-10", "devices:partition-2", "coordinator", "devices:partition-1"} {
		claims = append(claims, lease.Claim{Role: role})
	}
	if _, err := st.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: claims}); err != nil {
		t.Fatal(err)
	}
	list, err := lease.ListLeases(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, l := range list {
		roles = append(roles, l.Role)
	}
	if want := []string{"coordinator", "devices:partition-1", "devices:partition-2", "devices:partition-10"}; !slices.Equal(roles, want) {
		t.Errorf("ListLeases listed %q, want %q", roles, want)
	}
	if _, err := lease.ListLeases(ctx, unlisted{st}); !errors.Is(err, lease.ErrNotListable) {
		t.Errorf("ListLeases of a store without List: err = %v, want ErrNotListable", err)
	}
}
