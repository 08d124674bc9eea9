package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/core/projection"
)

// ProjectionHarness is what a projection store's factory returns for one
// subtest.
type ProjectionHarness struct {
	// Store is the store under test. It must be over data of its own,
	// empty at the start of the subtest (a fresh schema, a new memory
	// store): the subtests count generations and sweep everything.
	Store projection.Store
	// Second, if set, is another store over the same data, as a second
	// node would have it (its own pool). Subtests with several writers,
	// readers or sweepers spread them over both. nil means Store alone.
	Second projection.Store
}

// ProjectionFeatures declares what a projection store cannot do. The zero
// value expects everything.
type ProjectionFeatures struct {
	// NoCreatedAt means the store does not record when a generation was
	// written: GenerationInfo.CreatedAt may be zero.
	NoCreatedAt bool
}

// Sizes of the projection subtests.
const (
	// mixFlips is how many times the writer of the mixing subtest
	// replaces the projection, alternating between two grant sets.
	mixFlips = 60
	// mixReaders is how many goroutines read during those flips.
	mixReaders = 6
	// mixLimit bounds the mixing subtest's writing.
	mixLimit = 20 * time.Second
	// racingRefreshers is how many goroutines replace one subject at once.
	racingRefreshers = 12
	// parallelSweeps is how many sweeps run at once.
	parallelSweeps = 8
	// largeGeneration is the grant count of the large-generation subtest.
	largeGeneration = 20_000
)

// RunProjectionStore runs the projection.Store contract against the stores
// the factory returns. Subtest names are stable, so a failure names the
// broken rule: EmptyStoreSaysNoProjection,
// ReplaceMakesTheNewGenerationActive, PointReadsAnswerFromTheActiveGeneration,
// EmptyGrantSetIsAValidGeneration, MasksRoundTripAllSixtyFourBits,
// ExactlyOneActiveGenerationAfterManyRefreshes,
// ConcurrentRefreshesLeaveExactlyOneActive,
// ReservationsIncreaseAcrossNodes, AnOlderReservationIsRefusedAsStale,
// FlipsInAnyOrderNeverMoveTheActiveGenerationBack,
// ReadersSeeOldOrNewNeverAMix,
// SweepRemovesOnlySupersededGenerations,
// SweepIsIdempotentUnderParallelRuns, InvalidInputWritesNothing,
// FailedReplaceKeepsThePreviousGeneration, LargeGenerationRoundTrips.
func RunProjectionStore(t *testing.T, factory func(t *testing.T) ProjectionHarness, features ProjectionFeatures) {
	s := &projectionSuite{factory: factory, f: features}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"EmptyStoreSaysNoProjection", s.emptyStore},
		{"ReplaceMakesTheNewGenerationActive", s.replaceActivates},
		{"PointReadsAnswerFromTheActiveGeneration", s.pointReads},
		{"EmptyGrantSetIsAValidGeneration", s.emptyGrantSet},
		{"MasksRoundTripAllSixtyFourBits", s.masksRoundTrip},
		{"ExactlyOneActiveGenerationAfterManyRefreshes", s.manyRefreshes},
		{"ConcurrentRefreshesLeaveExactlyOneActive", s.concurrentRefreshes},
		{"ReservationsIncreaseAcrossNodes", s.reservationsIncrease},
		{"AnOlderReservationIsRefusedAsStale", s.olderReservationRefused},
		{"FlipsInAnyOrderNeverMoveTheActiveGenerationBack", s.flipsInAnyOrder},
		{"ReadersSeeOldOrNewNeverAMix", s.neverAMix},
		{"SweepRemovesOnlySupersededGenerations", s.sweepSuperseded},
		{"SweepIsIdempotentUnderParallelRuns", s.sweepsInParallel},
		{"InvalidInputWritesNothing", s.invalidInput},
		{"FailedReplaceKeepsThePreviousGeneration", s.failedReplace},
		{"LargeGenerationRoundTrips", s.largeGeneration},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t)
		})
	}
}

type projectionSuite struct {
	factory func(t *testing.T) ProjectionHarness
	f       ProjectionFeatures
}

func (s *projectionSuite) harness(t *testing.T) ProjectionHarness {
	t.Helper()
	h := s.factory(t)
	if h.Store == nil {
		t.Fatal("conformance: the factory returned no Store")
	}
	if h.Second == nil {
		h.Second = h.Store
	}
	return h
}

// stores returns the harness's stores, the i-th goroutine's first.
func (h ProjectionHarness) pick(i int) projection.Store {
	if i%2 == 1 {
		return h.Second
	}
	return h.Store
}

func user(id string) projection.Subject { return projection.Subject{Type: "user", ID: id} }

// grantSet builds n grants of resource type typ, IDs prefix-0 ...,
// masks derived from seed.
func grantSet(typ, prefix string, n int, seed uint64) []projection.Grant {
	gs := make([]projection.Grant, n)
	for i := range gs {
		gs[i] = projection.Grant{
			ResourceType: typ,
			ResourceID:   fmt.Sprintf("%s-%05d", prefix, i),
			Mask:         projection.Mask(seed*0x9E3779B97F4A7C15 + uint64(i)*0xBF58476D1CE4E5B9),
		}
	}
	return gs
}

func sortedGrants(gs []projection.Grant) []projection.Grant {
	return slices.SortedFunc(slices.Values(gs), projection.CompareGrants)
}

func mustReserve(t *testing.T, ctx context.Context, st projection.Store) projection.Generation {
	t.Helper()
	gen, err := st.Reserve(ctx)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	if gen == 0 {
		t.Fatal("Reserve returned generation 0; generations start at 1")
	}
	return gen
}

// mustReplace reserves a generation from st and replaces subject's
// projection with it, as a refresh does, and returns the generation.
func mustReplace(t *testing.T, ctx context.Context, st projection.Store, subject projection.Subject, grants []projection.Grant) projection.Generation {
	t.Helper()
	gen := mustReserve(t, ctx, st)
	if err := st.Replace(ctx, subject, gen, grants); err != nil {
		t.Fatalf("Replace(%s, generation %d, %d grants): %v", subject, gen, len(grants), err)
	}
	return gen
}

// reserveAndReplace is mustReplace for goroutines: it returns what
// happened instead of failing the test.
func reserveAndReplace(ctx context.Context, st projection.Store, subject projection.Subject, grants []projection.Grant) (projection.Generation, error) {
	gen, err := st.Reserve(ctx)
	if err != nil {
		return 0, fmt.Errorf("Reserve: %w", err)
	}
	return gen, st.Replace(ctx, subject, gen, grants)
}

func mustSnapshot(t *testing.T, ctx context.Context, st projection.Store, subject projection.Subject) projection.Snapshot {
	t.Helper()
	snap, err := st.Snapshot(ctx, subject)
	if err != nil {
		t.Fatalf("Snapshot(%s): %v", subject, err)
	}
	if snap.Subject != subject {
		t.Fatalf("Snapshot(%s) names subject %s", subject, snap.Subject)
	}
	return snap
}

// checkSnapshot checks that subject's active generation is gen with exactly
// the grants want.
func checkSnapshot(t *testing.T, ctx context.Context, st projection.Store, subject projection.Subject, gen projection.Generation, want []projection.Grant) {
	t.Helper()
	snap := mustSnapshot(t, ctx, st, subject)
	if gen != 0 && snap.Generation != gen {
		t.Errorf("Snapshot(%s) is generation %d, want %d", subject, snap.Generation, gen)
	}
	if diff := grantDiff(snap.Grants, sortedGrants(want)); diff != "" {
		t.Errorf("Snapshot(%s) grants differ from those written: %s", subject, diff)
	}
}

// grantDiff describes how got differs from want (both in CompareGrants
// order), or returns "".
func grantDiff(got, want []projection.Grant) string {
	if slices.Equal(got, want) {
		return ""
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d grants, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("grant %d is %+v, want %+v", i, got[i], want[i])
		}
	}
	return "different order"
}

func mustMask(t *testing.T, ctx context.Context, st projection.Store, subject projection.Subject, typ, id string) (projection.Mask, bool) {
	t.Helper()
	m, found, err := st.Mask(ctx, subject, typ, id)
	if err != nil {
		t.Fatalf("Mask(%s, %s, %s): %v", subject, typ, id, err)
	}
	if !found && m != 0 {
		t.Errorf("Mask(%s, %s, %s) = %v with found=false; an absent grant has mask 0", subject, typ, id, m)
	}
	return m, found
}

func mustGenerations(t *testing.T, ctx context.Context, st projection.Store, subject projection.Subject) []projection.GenerationInfo {
	t.Helper()
	infos, err := st.Generations(ctx, subject)
	if err != nil {
		t.Fatalf("Generations(%s): %v", subject, err)
	}
	for i := 1; i < len(infos); i++ {
		if infos[i].Generation <= infos[i-1].Generation {
			t.Fatalf("Generations(%s) is not in increasing generation order: %+v", subject, infos)
		}
	}
	return infos
}

// activeOf returns the active generations in infos.
func activeOf(infos []projection.GenerationInfo) []projection.Generation {
	var active []projection.Generation
	for _, i := range infos {
		if i.Active {
			active = append(active, i.Generation)
		}
	}
	return active
}

func generationNumbers(infos []projection.GenerationInfo) []projection.Generation {
	gens := make([]projection.Generation, len(infos))
	for i, info := range infos {
		gens[i] = info.Generation
	}
	return gens
}

// mustSweep sweeps and returns the count.
func mustSweep(t *testing.T, ctx context.Context, st projection.Store) int {
	t.Helper()
	n, err := st.Sweep(ctx)
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	return n
}

func wantNoProjection(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, projection.ErrNoProjection) {
		t.Errorf("%s = %v, want an error wrapping ErrNoProjection (\"refresh it\"), never an answer", what, err)
	}
}

func (s *projectionSuite) emptyStore(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *projectionSuite) replaceActivates(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *projectionSuite) pointReads(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *projectionSuite) emptyGrantSet(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *projectionSuite) masksRoundTrip(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *projectionSuite) manyRefreshes(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	erin := user("erin")
	var gens []projection.Generation
	var last []projection.Grant
	for i := range 20 {
		last = grantSet("doc", fmt.Sprintf("r%d", i), 1+i%4, uint64(i))
		gens = append(gens, mustReplace(t, ctx, h.pick(i), erin, last))
		infos := mustGenerations(t, ctx, h.pick(i+1), erin)
		if got := activeOf(infos); len(got) != 1 || got[0] != gens[i] {
			t.Fatalf("after refresh %d the active generations are %v, want exactly [%d]", i, got, gens[i])
		}
	}
	checkSnapshot(t, ctx, h.Store, erin, gens[len(gens)-1], last)
	if got := generationNumbers(mustGenerations(t, ctx, h.Store, erin)); !slices.Equal(got, gens) {
		t.Errorf("Generations = %v, want every generation written, %v, until a sweep", got, gens)
	}
}

func (s *projectionSuite) concurrentRefreshes(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	frank := user("frank")
	sets := make([][]projection.Grant, racingRefreshers)
	for i := range sets {
		// Each set has resources of its own and shares "common" with
		// a mask of its own, so any blend of two sets is visible.
		sets[i] = append(grantSet("doc", fmt.Sprintf("w%02d", i), 8, uint64(i)),
			projection.Grant{ResourceType: "doc", ResourceID: "common", Mask: projection.Mask(i + 1)})
	}
	mustReplace(t, ctx, h.Store, frank, sets[0])

	var (
		wg      sync.WaitGroup
		done    = make(chan struct{})
		written sync.Map // Generation → set index
		stale   sync.Map // Generation → true, refused as stale
		errs    = make(chan error, 1000)
	)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	for i := range racingRefreshers {
		st := h.pick(i)
		wg.Go(func() {
			for range 3 {
				gen, err := reserveAndReplace(ctx, st, frank, sets[i])
				switch {
				case errors.Is(err, projection.ErrStale):
					stale.Store(gen, true) // a later reservation flipped first
				case err != nil:
					report(fmt.Errorf("refresher %d: Replace: %w", i, err))
					return
				default:
					written.Store(gen, i)
				}
			}
		})
	}
	// Meanwhile, at every moment exactly one generation is active.
	var checks atomic.Int64
	var cwg sync.WaitGroup
	for i := range 2 {
		st := h.pick(i)
		cwg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				infos, err := st.Generations(ctx, frank)
				if err != nil {
					report(fmt.Errorf("Generations during refreshes: %w", err))
					return
				}
				if a := activeOf(infos); len(a) != 1 {
					report(fmt.Errorf("during concurrent refreshes %d generations were active at once: %v", len(a), a))
					return
				}
				checks.Add(1)
			}
		})
	}
	wg.Wait()
	close(done)
	cwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	infos := mustGenerations(t, ctx, h.Store, frank)
	active := activeOf(infos)
	if len(active) != 1 {
		t.Fatalf("after %d concurrent refreshes, %d generations are active: %v", racingRefreshers*3, len(active), active)
	}
	succeeded, largest := 0, projection.Generation(0)
	written.Range(func(k, _ any) bool {
		succeeded++
		largest = max(largest, k.(projection.Generation))
		return true
	})
	if len(infos) != 1+succeeded {
		t.Errorf("%d generations stored, want %d (every Replace that was not stale writes one)", len(infos), 1+succeeded)
	}
	if active[0] != largest {
		t.Errorf("the active generation is %d, want the largest written, %d", active[0], largest)
	}
	stale.Range(func(k, _ any) bool {
		if g := k.(projection.Generation); g > active[0] {
			t.Errorf("Replace with generation %d was refused as stale, but no larger generation is active (%d)", g, active[0])
		}
		return true
	})
	i, ok := written.Load(active[0])
	if !ok {
		t.Fatalf("the active generation %d is none that Replace wrote", active[0])
	}
	checkSnapshot(t, ctx, h.Second, frank, active[0], sets[i.(int)])
	t.Logf("%d checks of the active generation during the refreshes", checks.Load())
}

func (s *projectionSuite) reservationsIncrease(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	var prev projection.Generation
	for i := range 20 {
		gen := mustReserve(t, ctx, h.pick(i))
		if gen <= prev {
			t.Fatalf("reservation %d is %d, not above the previous %d (from the other node)", i, gen, prev)
		}
		prev = gen
	}
	// Concurrent reservations are all distinct.
	var mu sync.Mutex
	seen := map[projection.Generation]bool{}
	var wg sync.WaitGroup
	for i := range 8 {
		st := h.pick(i)
		wg.Go(func() {
			for range 10 {
				gen, err := st.Reserve(ctx)
				mu.Lock()
				if err != nil || seen[gen] || gen <= prev {
					t.Errorf("a concurrent Reserve returned %d, %v: want a new number above %d", gen, err, prev)
				}
				seen[gen] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
}

// olderReservationRefused is the rule that keeps a revoked grant revoked:
// a refresh that reserved earlier (its fetch started earlier) and flips
// later is refused, and the later-fetched answer stays.
func (s *projectionSuite) olderReservationRefused(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	olive, pat := user("olive"), user("pat")
	withGrant := grantSet("doc", "o", 3, 1) // fetched before the revocation
	revoked := sortedGrants(withGrant)[1:]  // fetched after it
	older := mustReserve(t, ctx, h.Store)   // the slow refresh's fetch starts
	newer := mustReserve(t, ctx, h.Second)  // another node's starts later
	if err := h.Second.Replace(ctx, olive, newer, revoked); err != nil {
		t.Fatalf("Replace with the newer generation: %v", err)
	}
	err := h.Store.Replace(ctx, olive, older, withGrant)
	if !errors.Is(err, projection.ErrStale) {
		t.Fatalf("Replace with a generation reserved before the active one: err = %v, want ErrStale", err)
	}
	if errors.Is(err, projection.ErrInvalidGeneration) {
		t.Errorf("a stale Replace also reports ErrInvalidGeneration: %v", err)
	}
	checkSnapshot(t, ctx, h.Store, olive, newer, revoked)
	if _, found := mustMask(t, ctx, h.Second, olive, "doc", withGrant[0].ResourceID); found {
		t.Error("the revoked grant came back")
	}
	if got := generationNumbers(mustGenerations(t, ctx, h.Store, olive)); !slices.Equal(got, []projection.Generation{newer}) {
		t.Errorf("after a stale Replace the generations are %v, want only %d: a stale Replace writes nothing", got, newer)
	}
	// Still stale after a sweep, and after yet another refresh.
	mustSweep(t, ctx, h.Store)
	newest := mustReplace(t, ctx, h.Store, olive, revoked)
	if err := h.Second.Replace(ctx, olive, older, withGrant); !errors.Is(err, projection.ErrStale) {
		t.Errorf("the old generation again, after a sweep and a newer refresh: err = %v, want ErrStale", err)
	}
	checkSnapshot(t, ctx, h.Second, olive, newest, revoked)
	// The order is per subject: the older number is fine for a subject
	// nothing newer was written for.
	if err := h.Store.Replace(ctx, pat, older, withGrant); err != nil {
		t.Errorf("an older reservation for another subject: %v", err)
	}
	checkSnapshot(t, ctx, h.Second, pat, older, withGrant)
}

// flipsInAnyOrder reserves generations, then flips them concurrently in a
// scrambled order from both nodes: the active generation only ever grows,
// ends at the largest, and each Replace either wrote or was stale.
func (s *projectionSuite) flipsInAnyOrder(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	quinn := user("quinn")
	const n = 24
	gens := make([]projection.Generation, n)
	sets := make(map[projection.Generation][]projection.Grant, n)
	for i := range gens {
		gens[i] = mustReserve(t, ctx, h.pick(i))
		sets[gens[i]] = append(grantSet("doc", fmt.Sprintf("q%02d", i), 3, uint64(i)),
			projection.Grant{ResourceType: "doc", ResourceID: "common", Mask: projection.Mask(i + 1)})
	}
	// Largest first, then the rest interleaved: most flips arrive late.
	order := []int{n - 1}
	for i := range n - 1 {
		if i%2 == 0 {
			order = append(order, i/2)
		} else {
			order = append(order, n-2-i/2)
		}
	}
	var (
		stop   atomic.Bool
		wg, cw sync.WaitGroup
		mu     sync.Mutex
		fails  []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(fails) < 10 {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	for c := range 2 {
		st := h.pick(c)
		cw.Go(func() {
			var highest projection.Generation
			for !stop.Load() {
				snap, err := st.Snapshot(ctx, quinn)
				if errors.Is(err, projection.ErrNoProjection) {
					if highest != 0 {
						fail("the projection went absent after generation %d was active", highest)
						return
					}
					continue
				}
				if err != nil {
					fail("Snapshot during the flips: %v", err)
					return
				}
				if snap.Generation < highest {
					fail("the active generation went back from %d to %d", highest, snap.Generation)
					return
				}
				highest = snap.Generation
			}
		})
	}
	next := make(chan int, n)
	for _, i := range order {
		next <- i
	}
	close(next)
	var wrote, refused atomic.Int64
	for w := range 4 {
		st := h.pick(w)
		wg.Go(func() {
			for i := range next {
				err := st.Replace(ctx, quinn, gens[i], sets[gens[i]])
				switch {
				case errors.Is(err, projection.ErrStale):
					refused.Add(1)
				case err != nil:
					fail("Replace(generation %d): %v", gens[i], err)
				default:
					wrote.Add(1)
				}
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	cw.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	top := gens[n-1]
	checkSnapshot(t, ctx, h.Second, quinn, top, sets[top])
	infos := mustGenerations(t, ctx, h.Store, quinn)
	if got := activeOf(infos); !slices.Equal(got, []projection.Generation{top}) {
		t.Errorf("active generations %v, want only the largest, %d", got, top)
	}
	if int64(len(infos)) != wrote.Load() || wrote.Load()+refused.Load() != n {
		t.Errorf("%d generations stored, %d Replace calls wrote and %d were stale, of %d", len(infos), wrote.Load(), refused.Load(), n)
	}
	if refused.Load() == 0 {
		t.Errorf("no Replace was stale although the largest generation flipped first")
	}
}

// mixSets are the two grant sets the mixing subtest alternates between:
// each has resources of its own, and both grant "shared" with different
// masks.
func mixSets() (a, b []projection.Grant) {
	a = append(grantSet("doc", "only-a", 50, 11), projection.Grant{ResourceType: "doc", ResourceID: "shared", Mask: 0xA})
	b = append(grantSet("doc", "only-b", 30, 12), projection.Grant{ResourceType: "doc", ResourceID: "shared", Mask: 0xB << 60})
	return sortedGrants(a), sortedGrants(b)
}

func (s *projectionSuite) neverAMix(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *projectionSuite) sweepSuperseded(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	heidi, ivan, judy := user("heidi"), user("ivan"), user("judy")
	var last []projection.Grant
	var lastGen projection.Generation
	for i := range 5 {
		last = grantSet("doc", fmt.Sprintf("h%d", i), 3, uint64(i))
		lastGen = mustReplace(t, ctx, h.Store, heidi, last)
	}
	ivanSet := grantSet("doc", "i", 4, 9)
	ivanGen := mustReplace(t, ctx, h.Store, ivan, ivanSet)
	mustReplace(t, ctx, h.Store, judy, nil)
	judyGen := mustReplace(t, ctx, h.Store, judy, nil)

	if n := mustSweep(t, ctx, h.Second); n != 5 {
		t.Errorf("Sweep deleted %d generations, want the 5 superseded ones (4 of heidi, 1 of judy)", n)
	}
	for _, c := range []struct {
		subject projection.Subject
		gen     projection.Generation
		grants  []projection.Grant
	}{{heidi, lastGen, last}, {ivan, ivanGen, ivanSet}, {judy, judyGen, nil}} {
		infos := mustGenerations(t, ctx, h.Store, c.subject)
		if len(infos) != 1 || !infos[0].Active || infos[0].Generation != c.gen {
			t.Errorf("after the sweep, %s has generations %+v; want only the active %d", c.subject, infos, c.gen)
		}
		checkSnapshot(t, ctx, h.Store, c.subject, c.gen, c.grants)
	}
	if m, found := mustMask(t, ctx, h.Second, heidi, "doc", last[0].ResourceID); !found || m != last[0].Mask {
		t.Errorf("after the sweep Mask(heidi) = %v, %v; want %v", m, found, last[0].Mask)
	}
	if _, found, err := h.Second.Mask(ctx, judy, "doc", "x"); err != nil || found {
		t.Errorf("after the sweep, the empty active generation of judy reads as found=%v, err=%v", found, err)
	}
	// Idempotent: nothing left to do.
	for range 2 {
		if n := mustSweep(t, ctx, h.Store); n != 0 {
			t.Errorf("a second sweep deleted %d generations; nothing was superseded", n)
		}
	}
	checkSnapshot(t, ctx, h.Second, heidi, lastGen, last)
}

func (s *projectionSuite) sweepsInParallel(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	const subjects, rounds = 6, 4
	finals := map[projection.Subject][]projection.Grant{}
	active := map[projection.Subject]projection.Generation{}
	for i := range subjects {
		subject := user(fmt.Sprintf("u%d", i))
		for r := range rounds {
			finals[subject] = grantSet("doc", fmt.Sprintf("s%d", r), 2+r, uint64(i*10+r))
			active[subject] = mustReplace(t, ctx, h.pick(r), subject, finals[subject])
		}
	}
	var (
		wg      sync.WaitGroup
		deleted atomic.Int64
		stop    atomic.Bool
		errs    = make(chan error, parallelSweeps+subjects)
	)
	start := make(chan struct{})
	for i := range parallelSweeps {
		st := h.pick(i)
		wg.Go(func() {
			<-start
			n, err := st.Sweep(ctx)
			if err != nil {
				errs <- fmt.Errorf("sweep %d: %w", i, err)
				return
			}
			deleted.Add(int64(n))
		})
	}
	// Readers read every active generation while the sweeps run.
	var rwg sync.WaitGroup
	for i := range 2 {
		st := h.pick(i)
		rwg.Go(func() {
			<-start
			for !stop.Load() {
				for subject, want := range finals {
					snap, err := st.Snapshot(ctx, subject)
					if err != nil {
						errs <- fmt.Errorf("Snapshot(%s) during the sweeps: %w", subject, err)
						return
					}
					if diff := grantDiff(snap.Grants, sortedGrants(want)); diff != "" || snap.Generation != active[subject] {
						errs <- fmt.Errorf("Snapshot(%s) during the sweeps is generation %d (want %d): %s", subject, snap.Generation, active[subject], diff)
						return
					}
				}
			}
		})
	}
	close(start)
	wg.Wait()
	stop.Store(true)
	rwg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if want := subjects * (rounds - 1); deleted.Load() != int64(want) {
		t.Errorf("%d parallel sweeps deleted %d generations in all, want each of the %d superseded ones deleted exactly once", parallelSweeps, deleted.Load(), want)
	}
	for subject, gen := range active {
		infos := mustGenerations(t, ctx, h.Store, subject)
		if len(infos) != 1 || !infos[0].Active || infos[0].Generation != gen {
			t.Errorf("after the sweeps %s has generations %+v, want only the active %d", subject, infos, gen)
		}
	}
	if n := mustSweep(t, ctx, h.Second); n != 0 {
		t.Errorf("a sweep after the parallel ones deleted %d generations", n)
	}
}

func (s *projectionSuite) invalidInput(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
	kim := user("kim")
	good := grantSet("doc", "k", 2, 1)
	badSubjects := map[string]projection.Subject{
		"empty type":            {Type: "", ID: "kim"},
		"empty ID":              {Type: "user", ID: ""},
		"type over 128 bytes":   {Type: strings.Repeat("t", projection.MaxSubjectTypeLength+1), ID: "kim"},
		"ID over 256 bytes":     {Type: "user", ID: strings.Repeat("é", projection.MaxSubjectIDLength/2) + "x"},
		"NUL byte in the ID":    {Type: "user", ID: "k\x00im"},
		"invalid UTF-8 in ID":   {Type: "user", ID: "k\xffim"},
		"invalid UTF-8 in type": {Type: "us\xffer", ID: "kim"},
	}
	for what, subject := range badSubjects {
		if err := h.Store.Replace(ctx, subject, mustReserve(t, ctx, h.Store), good); !errors.Is(err, projection.ErrInvalidSubject) {
			t.Errorf("Replace with a subject with %s: err = %v, want ErrInvalidSubject", what, err)
		}
		if _, _, err := h.Store.Mask(ctx, subject, "doc", "k-00000"); !errors.Is(err, projection.ErrInvalidSubject) {
			t.Errorf("Mask with a subject with %s: err = %v, want ErrInvalidSubject", what, err)
		}
		if _, err := h.Store.Snapshot(ctx, subject); !errors.Is(err, projection.ErrInvalidSubject) {
			t.Errorf("Snapshot with a subject with %s: err = %v, want ErrInvalidSubject", what, err)
		}
	}
	// The limits themselves are accepted.
	longest := projection.Subject{Type: strings.Repeat("t", projection.MaxSubjectTypeLength), ID: strings.Repeat("é", projection.MaxSubjectIDLength/2)}
	gen := mustReplace(t, ctx, h.Store, longest, good)
	checkSnapshot(t, ctx, h.Second, longest, gen, good)

	badGrants := map[string][]projection.Grant{
		"an empty resource type":   {{ResourceType: "", ResourceID: "x"}},
		"an empty resource ID":     {{ResourceType: "doc", ResourceID: ""}},
		"a resource listed twice":  {{ResourceType: "doc", ResourceID: "x", Mask: 1}, {ResourceType: "doc", ResourceID: "y"}, {ResourceType: "doc", ResourceID: "x", Mask: 2}},
		"a resource ID too long":   {{ResourceType: "doc", ResourceID: strings.Repeat("r", projection.MaxResourceIDLength+1)}},
		"a NUL byte in a resource": {{ResourceType: "doc", ResourceID: "a\x00b"}},
	}
	for what, grants := range badGrants {
		bad := append(slices.Clone(good), grants...)
		if err := h.Store.Replace(ctx, kim, mustReserve(t, ctx, h.Store), bad); !errors.Is(err, projection.ErrInvalidGrant) {
			t.Errorf("Replace with %s: err = %v, want ErrInvalidGrant", what, err)
		}
	}
	// A generation must be one the store reserved and does not hold yet.
	unused := mustReserve(t, ctx, h.Second)
	for what, gen := range map[string]projection.Generation{
		"generation 0":                 0,
		"a generation never reserved":  unused + 1_000_000,
		"a generation already written": mustReplace(t, ctx, h.Store, user("kim's neighbour"), good),
	} {
		if err := h.Store.Replace(ctx, kim, gen, good); !errors.Is(err, projection.ErrInvalidGeneration) {
			t.Errorf("Replace with %s: err = %v, want ErrInvalidGeneration", what, err)
		}
	}
	// Nor did the never-reserved number move the store on: a number
	// reserved now still lets its Replace through.
	if err := h.Store.Replace(ctx, user("kim's other neighbour"), mustReserve(t, ctx, h.Store), good); err != nil {
		t.Errorf("Replace after one with a never-reserved generation: %v", err)
	}
	_, err := h.Second.Snapshot(ctx, kim)
	wantNoProjection(t, "Snapshot after only invalid Replace calls", err)
	if infos := mustGenerations(t, ctx, h.Second, kim); len(infos) != 0 {
		t.Errorf("invalid Replace calls left generations: %+v", infos)
	}
	// Nor do they disturb an existing generation.
	gen = mustReplace(t, ctx, h.Store, kim, good)
	if err := h.Store.Replace(ctx, kim, mustReserve(t, ctx, h.Store), append(slices.Clone(good), good[0])); !errors.Is(err, projection.ErrInvalidGrant) {
		t.Errorf("Replace with a duplicate: err = %v, want ErrInvalidGrant", err)
	}
	checkSnapshot(t, ctx, h.Second, kim, gen, good)
	if _, _, err := h.Store.Mask(ctx, kim, "", "x"); !errors.Is(err, projection.ErrInvalidGrant) {
		t.Errorf("Mask of an empty resource type: err = %v, want ErrInvalidGrant", err)
	}
}

func (s *projectionSuite) failedReplace(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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

func (s *projectionSuite) largeGeneration(t *testing.T) {
	h := s.harness(t)
	ctx := testCtx(t)
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
