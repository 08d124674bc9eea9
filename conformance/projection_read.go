package conformance

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/core/projection"
)

// Reading: the active generation alone, never a mix, and "no projection"
// rather than an empty answer for a subject never refreshed.

func (s *projectionSuite) readChecks() []check {
	return area(s.setup,
		subtest[projectionBundle]{"EmptyStoreSaysNoProjection", s.emptyStore},
		subtest[projectionBundle]{"PointReadsAnswerFromTheActiveGeneration", s.pointReads},
		subtest[projectionBundle]{"ReadersSeeOldOrNewNeverAMix", s.neverAMix},
	)
}

func (s *projectionSuite) emptyStore(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	subject := user("nobody")
	for i, st := range []projection.Store{h.Store, h.Second} {
		m, found, err := st.Mask(ctx, subject, "doc", "d-1")
		wantNoProjection(t, fmt.Sprintf("store %d: Mask on an empty store", i), err)
		if found || m != 0 {
			t.Errorf("store %d: Mask on an empty store reported found=%v mask=%v", i, found, m)
		}
		_, err = st.Snapshot(ctx, subject)
		wantNoProjection(t, fmt.Sprintf("store %d: Snapshot on an empty store", i), err)
		if infos := mustGenerations(t, ctx, st, subject); len(infos) != 0 {
			t.Errorf("store %d: Generations on an empty store = %+v", i, infos)
		}
	}
	if n := mustSweep(t, ctx, h.Store); n != 0 {
		t.Errorf("Sweep on an empty store deleted %d generations", n)
	}
	// Another subject's projection does not make this one known.
	mustReplace(t, ctx, h.Store, user("somebody"), grantSet("doc", "d", 3, 1))
	_, _, err := h.Second.Mask(ctx, subject, "doc", "d-00000")
	wantNoProjection(t, "Mask of a subject never refreshed, next to one that was", err)
}

func (s *projectionSuite) pointReads(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	alice, bob := user("alice"), user("bob")
	grants := []projection.Grant{
		{ResourceType: "doc", ResourceID: "d-1", Mask: 0b101},
		{ResourceType: "doc", ResourceID: "d-2", Mask: 0},
		{ResourceType: "folder", ResourceID: "d-1", Mask: 0b10},
		{ResourceType: "doc", ResourceID: "ünïcode/ü", Mask: 7},
	}
	mustReplace(t, ctx, h.Store, alice, grants)
	mustReplace(t, ctx, h.Store, bob, []projection.Grant{{ResourceType: "doc", ResourceID: "d-9", Mask: 1}})
	for _, g := range grants {
		m, found := mustMask(t, ctx, h.Second, alice, g.ResourceType, g.ResourceID)
		if !found || m != g.Mask {
			t.Errorf("Mask(alice, %s, %s) = %v, found=%v; want %v, found", g.ResourceType, g.ResourceID, m, found, g.Mask)
		}
	}
	// A granted mask of 0 is found: the resource is known, no bit is held.
	for _, miss := range [][2]string{{"doc", "d-3"}, {"folder", "d-2"}, {"doc", "D-1"}, {"doc", "d-9"}} {
		if m, found := mustMask(t, ctx, h.Second, alice, miss[0], miss[1]); found {
			t.Errorf("Mask(alice, %s, %s) found %v; alice has no grant there", miss[0], miss[1], m)
		}
	}
	if m, found := mustMask(t, ctx, h.Store, bob, "doc", "d-9"); !found || m != 1 {
		t.Errorf("Mask(bob, doc, d-9) = %v, %v; want 1, found", m, found)
	}
	// Subject type and ID are both part of the key.
	_, _, err := h.Store.Mask(ctx, projection.Subject{Type: "group", ID: "alice"}, "doc", "d-1")
	wantNoProjection(t, "Mask of another subject type with the same ID", err)
}

func (s *projectionSuite) neverAMix(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	grace := user("grace")
	a, b := mixSets()
	mustReplace(t, ctx, h.Store, grace, a)

	var (
		stop    atomic.Bool
		reads   atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		fails   []string
		seenGen = map[projection.Generation]string{} // generation → "A" or "B", as read
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(fails) < 10 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
		stop.Store(true)
	}
	which := func(gs []projection.Grant) string {
		switch {
		case slices.Equal(gs, a):
			return "A"
		case slices.Equal(gs, b):
			return "B"
		}
		return ""
	}
	// Point reads: a resource only in A, one only in B, and the shared one.
	pointWant := map[string][2]struct {
		m     projection.Mask
		found bool
	}{
		a[0].ResourceID:   {{a[0].Mask, true}, {0, false}},
		b[0].ResourceID:   {{0, false}, {b[0].Mask, true}},
		"shared":          {{0xA, true}, {0xB << 60, true}},
		"in-neither-ever": {{0, false}, {0, false}},
	}
	points := []string{a[0].ResourceID, b[0].ResourceID, "shared", "in-neither-ever"}
	for r := range mixReaders {
		st := h.pick(r)
		wg.Go(func() {
			for n := 0; !stop.Load(); n++ {
				if r%2 == 0 {
					snap, err := st.Snapshot(ctx, grace)
					if err != nil {
						fail("reader %d: Snapshot during refreshes: %v", r, err)
						return
					}
					w := which(snap.Grants)
					if w == "" {
						fail("reader %d: Snapshot (generation %d) saw %d grants that are neither set A (%d) nor set B (%d): a mix or a half-built generation",
							r, snap.Generation, len(snap.Grants), len(a), len(b))
						return
					}
					mu.Lock()
					if prev, ok := seenGen[snap.Generation]; ok && prev != w {
						fails = append(fails, fmt.Sprintf("generation %d was read as set %s and later as set %s", snap.Generation, prev, w))
					}
					seenGen[snap.Generation] = w
					mu.Unlock()
				} else {
					id := points[n%len(points)]
					m, found, err := st.Mask(ctx, grace, "doc", id)
					if err != nil {
						fail("reader %d: Mask(%s) during refreshes: %v", r, id, err)
						return
					}
					w := pointWant[id]
					if (m != w[0].m || found != w[0].found) && (m != w[1].m || found != w[1].found) {
						fail("reader %d: Mask(%s) = %v, found=%v; want A's %v/%v or B's %v/%v", r, id, m, found, w[0].m, w[0].found, w[1].m, w[1].found)
						return
					}
				}
				reads.Add(1)
			}
		})
	}
	// A sweeper runs along: deleting superseded generations must not
	// disturb a reader.
	wg.Go(func() {
		for !stop.Load() {
			if _, err := h.Second.Sweep(ctx); err != nil {
				fail("Sweep during refreshes: %v", err)
				return
			}
		}
	})
	// The writer starts once every reader runs, and after each flip waits
	// for a few reads, so reads overlap flips however fast either is. It
	// flips mixFlips times, within mixLimit.
	written := map[projection.Generation]string{}
	limit := time.Now().Add(mixLimit)
	awaitReads := func(n int64) {
		for reads.Load() < n && !stop.Load() && time.Now().Before(limit) {
			time.Sleep(50 * time.Microsecond)
		}
	}
	awaitReads(mixReaders)
	for i := 0; i < mixFlips && !stop.Load() && time.Now().Before(limit); i++ {
		set, name := b, "B"
		if i%2 == 1 {
			set, name = a, "A"
		}
		before := reads.Load()
		gen, err := reserveAndReplace(ctx, h.pick(i), grace, set)
		if err != nil {
			fail("writer: Replace %d: %v", i, err)
			break
		}
		written[gen] = name
		awaitReads(before + 2*mixReaders)
	}
	stop.Store(true)
	wg.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	for gen, w := range seenGen {
		if want, ok := written[gen]; ok && want != w {
			t.Errorf("generation %d was written as set %s but read as set %s", gen, want, w)
		}
	}
	if len(written) < mixFlips && len(fails) == 0 {
		t.Errorf("only %d of %d refreshes happened within %v (%d reads); the subtest proved little", len(written), mixFlips, mixLimit, reads.Load())
	}
	t.Logf("%d reads during %d refreshes; %d generations seen", reads.Load(), len(written), len(seenGen))
}

// mixSets are the two grant sets the mixing subtest alternates between:
// each has resources of its own, and both grant "shared" with different
// masks.
func mixSets() (a, b []projection.Grant) {
	a = append(grantSet("doc", "only-a", 50, 11), projection.Grant{ResourceType: "doc", ResourceID: "shared", Mask: 0xA})
	b = append(grantSet("doc", "only-b", 30, 12), projection.Grant{ResourceType: "doc", ResourceID: "shared", Mask: 0xB << 60})
	return sortedGrants(a), sortedGrants(b)
}
