package memory_test

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/projection"
)

func TestProjectionStore_Conformance(t *testing.T) {
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		return conformance.ProjectionHarness{Store: memory.NewProjectionStore(memory.ProjectionStoreOptions{})}
	}, conformance.ProjectionFeatures{})
}

func TestProjectionStore_ForgetLeavesEverySubjectWithoutAProjection(t *testing.T) {
	ctx := t.Context()
	st := memory.NewProjectionStore(memory.ProjectionStoreOptions{})
	alice := projection.Subject{Type: "user", ID: "alice"}
	for range 2 {
		if _, err := st.Replace(ctx, alice, []projection.Grant{{ResourceType: "doc", ResourceID: "d", Mask: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	st.Forget()
	if _, _, err := st.Mask(ctx, alice, "doc", "d"); !errors.Is(err, projection.ErrNoProjection) {
		t.Fatalf("Mask after Forget = %v, want ErrNoProjection", err)
	}
	if n, err := st.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep after Forget = %d, %v; want nothing to sweep", n, err)
	}
	gen, err := st.Replace(ctx, alice, nil)
	if err != nil || gen != 3 {
		t.Fatalf("Replace after Forget = %d, %v; want generation 3 (numbers are not reused)", gen, err)
	}
}

func TestProjectionStore_CreatedAtComesFromTheStoreClock(t *testing.T) {
	clock := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	st := memory.NewProjectionStore(memory.ProjectionStoreOptions{Now: clock.Now})
	bob := projection.Subject{Type: "user", ID: "bob"}
	if _, err := st.Replace(t.Context(), bob, nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	if _, err := st.Replace(t.Context(), bob, nil); err != nil {
		t.Fatal(err)
	}
	infos, err := st.Generations(t.Context(), bob)
	if err != nil || len(infos) != 2 {
		t.Fatalf("Generations = %+v, %v", infos, err)
	}
	now := clock.Now()
	if !infos[0].CreatedAt.Equal(now.Add(-time.Hour)) || !infos[1].CreatedAt.Equal(now) {
		t.Errorf("CreatedAt = %v, %v; want the store clock's readings", infos[0].CreatedAt, infos[1].CreatedAt)
	}
}

func TestProjectionStore_SnapshotIsTheCallersCopy(t *testing.T) {
	ctx := t.Context()
	st := memory.NewProjectionStore(memory.ProjectionStoreOptions{})
	carol := projection.Subject{Type: "user", ID: "carol"}
	grants := []projection.Grant{{ResourceType: "doc", ResourceID: "d", Mask: 1}}
	if _, err := st.Replace(ctx, carol, grants); err != nil {
		t.Fatal(err)
	}
	grants[0].Mask = 2 // the caller's slice is not the store's
	snap, err := st.Snapshot(ctx, carol)
	if err != nil {
		t.Fatal(err)
	}
	snap.Grants[0].Mask = 3
	if m, _, _ := st.Mask(ctx, carol, "doc", "d"); m != 1 {
		t.Errorf("Mask = %v after the caller changed its slices; want 1", m)
	}
	again, err := st.Snapshot(ctx, carol)
	if err != nil || again.Grants[0].Mask != 1 {
		t.Errorf("a second Snapshot = %+v, %v; want mask 1", again, err)
	}
}
