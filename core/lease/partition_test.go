package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"

	"github.com/baton-go/baton/core/lease"
)

func newPartition(t testing.TB, count int) (*lease.Manager, *lease.Partition) {
	t.Helper()
	m, err := lease.NewManager(lease.Config{Store: newFakeStore(), InstanceID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.RegisterPartition("devices", count)
	if err != nil {
		t.Fatal(err)
	}
	return m, p
}

// The vectors published in docs/partitions.md; other languages must match.
func TestPartition_HashMatchesThePublishedVectors(t *testing.T) {
	_, p16 := newPartition(t, 16)
	_, p7 := newPartition(t, 7)
	for _, v := range []struct {
		key       string
		at16, at7 int
	}{
		{"", 5, 2},
		{"device-42", 8, 6},
		{"user:1001", 6, 3},
		{"ñandú", 11, 2},
		{"order/ABC-123", 1, 3},
	} {
		if got := p16.Index(v.key); got != v.at16 {
			t.Errorf("Index(%q) over 16 = %d, want %d", v.key, got, v.at16)
		}
		if got := p7.Index(v.key); got != v.at7 {
			t.Errorf("Index(%q) over 7 = %d, want %d", v.key, got, v.at7)
		}
	}
	for _, v := range []struct {
		scope, key string
		at16       int
	}{
		{"Order", "42", 2},
		{"Order", "", 8},
		{"", "42", 4},
	} {
		if got := p16.IndexScoped(v.scope, v.key); got != v.at16 {
			t.Errorf("IndexScoped(%q, %q) over 16 = %d, want %d", v.scope, v.key, got, v.at16)
		}
	}
}

func TestPartition_SpreadsKeysEvenly(t *testing.T) {
	_, p := newPartition(t, 16)
	const keys = 100_000
	counts := make([]int, 16)
	r := rand.New(rand.NewPCG(1, 2))
	for range keys {
		counts[p.Index(fmt.Sprintf("key-%d", r.Uint64()))]++
	}
	mean := keys / 16
	for i, c := range counts {
		if c < mean*95/100 || c > mean*105/100 {
			t.Errorf("partition %d got %d keys, outside ±5%% of the mean %d", i, c, mean)
		}
	}
}

func TestPartition_ResolveNamesTheRoleAndAllocatesNothing(t *testing.T) {
	_, p := newPartition(t, 16)
	tg := p.Resolve("device-42")
	if tg.Role != "devices:partition-8" || tg.Index != 8 || tg.IsHeld {
		t.Fatalf("Resolve = %+v", tg)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = p.Resolve("device-42") }); n != 0 {
		t.Fatalf("Resolve allocates %v times per call", n)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = p.ResolveScoped("Order", "42") }); n != 0 {
		t.Fatalf("ResolveScoped allocates %v times per call", n)
	}
}

func TestPartition_ResolveReportsHeldPartitionsAndHolderAddresses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newFakeStore()
		a := newManager(t, store, "a")
		pa, err := a.RegisterPartition("devices", 4)
		if err != nil {
			t.Fatal(err)
		}
		start(t, a)
		synctest.Wait()
		b := newManager(t, store, "b")
		pb, err := b.RegisterPartition("devices", 4)
		if err != nil {
			t.Fatal(err)
		}
		start(t, b)
		synctest.Wait()
		ta, tb := pa.Resolve("device-42"), pb.Resolve("device-42")
		if !ta.IsHeld || tb.IsHeld {
			t.Fatalf("a holds %v, b holds %v; want only a", ta.IsHeld, tb.IsHeld)
		}
		if tb.HolderAddress != "http://a" || tb.Role != ta.Role {
			t.Fatalf("b resolves to %+v", tb)
		}
		if err := pa.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if pa.Resolve("device-42").IsHeld {
			t.Fatal("held after the partition was closed")
		}
	})
}
