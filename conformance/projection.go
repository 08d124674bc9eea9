package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Unmigrated, if set, returns a harness whose Store works on a
	// database without the projection tables. Every call of it must fail
	// with an error wrapping SchemaMismatch. nil skips that subtest: a
	// store with no tables has nothing to miss.
	Unmigrated func(t *testing.T) ProjectionHarness
	// SchemaMismatch is the adapter's error for a missing or different
	// schema, which Unmigrated's calls wrap.
	SchemaMismatch error
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
// the factory returns: one subtest per rule written on projection.Store
// (P1, P2, ...), named as docs/adapters.md lists them.
func RunProjectionStore(t *testing.T, factory func(t *testing.T) ProjectionHarness, features ProjectionFeatures) {
	runChecks(t, newProjectionSuite(factory, features).checks())
}

type projectionSuite struct {
	factory func(t *testing.T) ProjectionHarness
	f       ProjectionFeatures
}

func newProjectionSuite(factory func(t *testing.T) ProjectionHarness, features ProjectionFeatures) *projectionSuite {
	return &projectionSuite{factory: factory, f: features}
}

// checks lists the suite's subtests, area by area.
func (s *projectionSuite) checks() []check {
	return concat(s.writeChecks(), s.readChecks(), s.refreshChecks(), s.sweepChecks(), s.inputChecks())
}

// projectionBundle is what every projection subtest starts from.
type projectionBundle struct {
	h   ProjectionHarness
	ctx context.Context
}

// setup is the setup of every projection area: a fresh, empty store.
func (s *projectionSuite) setup(t *testing.T) projectionBundle {
	t.Helper()
	h := s.factory(t)
	if h.Store == nil {
		t.Fatal("conformance: the factory returned no Store")
	}
	if h.Second == nil {
		h.Second = h.Store
	}
	return projectionBundle{h: h, ctx: testCtx(t)}
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
