package conformance

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/baton-go/baton/core/projection"
)

// Writing a generation: Replace flips the whole new grant set active, and
// the set comes back exactly as written.

func (s *projectionSuite) writeChecks() []check {
	return area(s.setup,
		subtest[projectionBundle]{"ReplaceMakesTheNewGenerationActive", s.replaceActivates},
		subtest[projectionBundle]{"EmptyGrantSetIsAValidGeneration", s.emptyGrantSet},
		subtest[projectionBundle]{"MasksRoundTripAllSixtyFourBits", s.masksRoundTrip},
		subtest[projectionBundle]{"LargeGenerationRoundTrips", s.largeGeneration},
		subtest[projectionBundle]{"FailedReplaceKeepsThePreviousGeneration", s.failedReplace},
	)
}

func (s *projectionSuite) replaceActivates(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	alice, bob := user("alice"), user("bob")
	first := grantSet("doc", "a", 5, 1)
	g1 := mustReplace(t, ctx, h.Store, alice, first)
	checkSnapshot(t, ctx, h.Second, alice, g1, first)

	// Grants come back in CompareGrants order whatever the order written.
	reversed := slices.Clone(grantSet("folder", "f", 4, 2))
	slices.Reverse(reversed)
	second := append(reversed, grantSet("doc", "b", 3, 3)...)
	g2 := mustReplace(t, ctx, h.Second, alice, second)
	if g2 <= g1 {
		t.Errorf("a later Replace returned generation %d, not above the earlier %d", g2, g1)
	}
	checkSnapshot(t, ctx, h.Store, alice, g2, second)
	if _, found := mustMask(t, ctx, h.Store, alice, "doc", "a-00000"); found {
		t.Error("a resource granted only by the superseded generation is still found")
	}

	// Generations are unique across subjects.
	g3 := mustReplace(t, ctx, h.Store, bob, first)
	if g3 <= g2 {
		t.Errorf("Replace for another subject returned generation %d, not above %d", g3, g2)
	}
	checkSnapshot(t, ctx, h.Second, bob, g3, first)
	checkSnapshot(t, ctx, h.Second, alice, g2, second)

	infos := mustGenerations(t, ctx, h.Second, alice)
	if got := generationNumbers(infos); !slices.Equal(got, []projection.Generation{g1, g2}) {
		t.Errorf("Generations(alice) = %v, want [%d %d] before any sweep", got, g1, g2)
	}
	if got := activeOf(infos); !slices.Equal(got, []projection.Generation{g2}) {
		t.Errorf("active generations of alice = %v, want [%d]", got, g2)
	}
	if !s.f.NoCreatedAt {
		for _, info := range infos {
			if info.CreatedAt.IsZero() {
				t.Errorf("generation %d has no CreatedAt (set ProjectionFeatures.NoCreatedAt if the store cannot keep it)", info.Generation)
			}
		}
		if len(infos) == 2 && infos[1].CreatedAt.Before(infos[0].CreatedAt) {
			t.Errorf("generation %d was created at %v, before the earlier generation's %v", infos[1].Generation, infos[1].CreatedAt, infos[0].CreatedAt)
		}
	}
}

func (s *projectionSuite) emptyGrantSet(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	carol := user("carol")
	g1 := mustReplace(t, ctx, h.Store, carol, nil)
	snap := mustSnapshot(t, ctx, h.Second, carol)
	if snap.Generation != g1 || len(snap.Grants) != 0 {
		t.Errorf("Snapshot after an empty Replace = generation %d with %d grants; want generation %d, none", snap.Generation, len(snap.Grants), g1)
	}
	m, found, err := h.Second.Mask(ctx, carol, "doc", "d-1")
	if err != nil || found || m != 0 {
		t.Errorf("Mask of a subject with an empty generation = %v, %v, %v; want not found and no error: the subject is known to have no access", m, found, err)
	}
	// Revoking everything is a Replace with nothing.
	mustReplace(t, ctx, h.Store, carol, grantSet("doc", "d", 2, 4))
	if _, found := mustMask(t, ctx, h.Second, carol, "doc", "d-00001"); !found {
		t.Fatal("the grant written after the empty generation is not found")
	}
	g3 := mustReplace(t, ctx, h.Second, carol, []projection.Grant{})
	checkSnapshot(t, ctx, h.Store, carol, g3, nil)
	if m, found := mustMask(t, ctx, h.Store, carol, "doc", "d-00001"); found {
		t.Errorf("after replacing with an empty set, Mask still finds %v", m)
	}
}

func (s *projectionSuite) masksRoundTrip(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	dave := user("dave")
	masks := []projection.Mask{
		0, 1, 1 << 31, 1 << 32, 1 << 62, 1 << 63, math.MaxUint64,
		math.MaxInt64, 0x8000000000000001, 0xDEADBEEFCAFEBABE, 0x00FF00FF00FF00FF,
	}
	grants := make([]projection.Grant, len(masks))
	for i, m := range masks {
		grants[i] = projection.Grant{ResourceType: "doc", ResourceID: fmt.Sprintf("m-%02d", i), Mask: m}
	}
	gen := mustReplace(t, ctx, h.Store, dave, grants)
	for _, g := range grants {
		m, found := mustMask(t, ctx, h.Second, dave, g.ResourceType, g.ResourceID)
		if !found || m != g.Mask {
			t.Errorf("mask %v read back as %v (found=%v)", g.Mask, m, found)
		}
		if m.Has(63) != g.Mask.Has(63) {
			t.Errorf("mask %v: bit 63 read back as %v", g.Mask, m.Has(63))
		}
	}
	checkSnapshot(t, ctx, h.Second, dave, gen, grants)
}

func (s *projectionSuite) largeGeneration(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	mallory := user("mallory")
	grants := append(grantSet("doc", "big", largeGeneration/2, 5), grantSet("folder", "big", largeGeneration/2, 6)...)
	gen := mustReplace(t, ctx, h.Store, mallory, grants)
	checkSnapshot(t, ctx, h.Second, mallory, gen, grants)
	for _, i := range []int{0, len(grants) / 3, len(grants) - 1} {
		g := grants[i]
		if m, found := mustMask(t, ctx, h.Second, mallory, g.ResourceType, g.ResourceID); !found || m != g.Mask {
			t.Errorf("Mask(%s, %s) = %v, %v; want %v", g.ResourceType, g.ResourceID, m, found, g.Mask)
		}
	}
	// Replacing it with a small set leaves none of it visible.
	small := grantSet("doc", "small", 2, 7)
	gen2 := mustReplace(t, ctx, h.Second, mallory, small)
	checkSnapshot(t, ctx, h.Store, mallory, gen2, small)
	if n := mustSweep(t, ctx, h.Store); n != 1 {
		t.Errorf("Sweep deleted %d generations, want the large superseded one", n)
	}
}

func (s *projectionSuite) failedReplace(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	leo := user("leo")
	good := grantSet("doc", "l", 3, 1)
	gen := mustReplace(t, ctx, h.Store, leo, good)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	retry := mustReserve(t, ctx, h.Store)
	if err := h.Store.Replace(cancelled, leo, retry, grantSet("doc", "other", 500, 2)); err == nil {
		t.Error("Replace with a cancelled context succeeded")
	}
	if _, err := h.Store.Reserve(cancelled); err == nil {
		t.Error("Reserve with a cancelled context succeeded")
	}
	checkSnapshot(t, ctx, h.Second, leo, gen, good)
	if got := generationNumbers(mustGenerations(t, ctx, h.Second, leo)); !slices.Equal(got, []projection.Generation{gen}) {
		t.Errorf("after a failed Replace the generations are %v, want only %d", got, gen)
	}
	if _, err := h.Store.Snapshot(cancelled, leo); err == nil {
		t.Error("Snapshot with a cancelled context succeeded")
	}
	// A failed Replace may be retried with its generation.
	retried := grantSet("doc", "retried", 2, 3)
	if err := h.Store.Replace(ctx, leo, retry, retried); err != nil {
		t.Fatalf("retrying a failed Replace with its generation: %v", err)
	}
	checkSnapshot(t, ctx, h.Second, leo, retry, retried)
}
