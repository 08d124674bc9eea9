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
		memProjections, err := memory.NewProjectionStore(memory.ProjectionStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return conformance.ProjectionHarness{Store: memProjections}
	}, conformance.ProjectionFeatures{})
}

// refresh reserves a generation and replaces subject's projection with it.
func refresh(t *testing.T, st *memory.ProjectionStore, subject projection.Subject, grants []projection.Grant) projection.Generation {
	t.Helper()
	gen, err := st.Reserve(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Replace(t.Context(), subject, gen, grants); err != nil {
		t.Fatal(err)
	}
	return gen
}

func TestProjectionStore_ForgetLeavesEverySubjectWithoutAProjection(t *testing.T) {
	ctx := t.Context()
	st, err := memory.NewProjectionStore(memory.ProjectionStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alice := projection.Subject{Type: "user", ID: "alice"}
	for range 2 {
		refresh(t, st, alice, []projection.Grant{{ResourceType: "doc", ResourceID: "d", Mask: 1}})
	}
	st.Forget()
	if _, _, err := st.Mask(ctx, alice, "doc", "d"); !errors.Is(err, projection.ErrNoProjection) {
		t.Fatalf("Mask after Forget = %v, want ErrNoProjection", err)
	}
	if n, err := st.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("Sweep after Forget = %d, %v; want nothing to sweep", n, err)
	}
	if gen := refresh(t, st, alice, nil); gen != 3 {
		t.Fatalf("the generation reserved after Forget is %d; want 3 (numbers are not reused)", gen)
	}
}

func TestProjectionStore_CreatedAtComesFromTheStoreClock(t *testing.T) {
	clock := &fakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	st, err := memory.NewProjectionStore(memory.ProjectionStoreOptions{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	bob := projection.Subject{Type: "user", ID: "bob"}
	refresh(t, st, bob, nil)
	clock.Advance(time.Hour)
	refresh(t, st, bob, nil)
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
	st, err := memory.NewProjectionStore(memory.ProjectionStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	carol := projection.Subject{Type: "user", ID: "carol"}
	grants := []projection.Grant{{ResourceType: "doc", ResourceID: "d", Mask: 1}}
	refresh(t, st, carol, grants)
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
