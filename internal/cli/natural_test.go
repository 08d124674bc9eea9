package cli

import (
	"slices"
	"testing"
)

func TestNaturalCompare_NumbersByValue(t *testing.T) {
	got := []string{"partition-10", "coordinator", "partition-2", "partition-1", "partition-02", "partition-", "p9x", "p10x", "reports"}
	slices.SortFunc(got, NaturalCompare)
	want := []string{"coordinator", "p9x", "p10x", "partition-", "partition-1", "partition-02", "partition-2", "partition-10", "reports"}
	if !slices.Equal(got, want) {
		t.Fatalf("sorted %q, want %q", got, want)
	}
	for _, p := range [][2]string{{"a2", "a10"}, {"a", "a1"}, {"a01", "a1"}, {"x-9-2", "x-9-10"}} {
		if NaturalCompare(p[0], p[1]) >= 0 || NaturalCompare(p[1], p[0]) <= 0 {
			t.Errorf("%q and %q are not ordered both ways", p[0], p[1])
		}
	}
	if NaturalCompare("same-1", "same-1") != 0 {
		t.Error("equal strings do not compare equal")
	}
}
