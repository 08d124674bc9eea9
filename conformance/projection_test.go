package conformance_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/projection"
)

// Each case below wraps the memory projection store with one defect; see
// brokenChild for how the suite is run against it.

const brokenProjectionEnv = "BATON_CONFORMANCE_BROKEN_PROJECTION"

var brokenProjectionStores = map[string]struct {
	wrap       func(*memory.ProjectionStore) projection.Store
	mustCatch  []string
	mustPassAt []string
}{
	"flip-is-not-atomic": {
		wrap:      func(s *memory.ProjectionStore) projection.Store { return &growingReplace{ProjectionStore: s} },
		mustCatch: []string{"ReadersSeeOldOrNewNeverAMix"},
		mustPassAt: []string{"EmptyStoreSaysNoProjection", "MasksRoundTripAllSixtyFourBits", "EmptyGrantSetIsAValidGeneration",
			"InvalidInputWritesNothing", "PointReadsAnswerFromTheActiveGeneration"},
	},
	"sweep-drops-active-generations": {
		wrap:      func(s *memory.ProjectionStore) projection.Store { return newSweepDropsActive(s) },
		mustCatch: []string{"SweepRemovesOnlySupersededGenerations", "SweepIsIdempotentUnderParallelRuns", "ReadersSeeOldOrNewNeverAMix"},
		mustPassAt: []string{"EmptyStoreSaysNoProjection", "MasksRoundTripAllSixtyFourBits", "ConcurrentRefreshesLeaveExactlyOneActive",
			"ExactlyOneActiveGenerationAfterManyRefreshes"},
	},
	"top-bit-lost": {
		wrap:      func(s *memory.ProjectionStore) projection.Store { return topBitLost{s} },
		mustCatch: []string{"MasksRoundTripAllSixtyFourBits"},
		// Most subtests' masks use the top bit, so most fail too.
		mustPassAt: []string{"EmptyStoreSaysNoProjection", "EmptyGrantSetIsAValidGeneration", "PointReadsAnswerFromTheActiveGeneration"},
	},
	"empty-set-not-stored": {
		wrap:       func(s *memory.ProjectionStore) projection.Store { return emptyNotStored{s} },
		mustCatch:  []string{"EmptyGrantSetIsAValidGeneration", "SweepRemovesOnlySupersededGenerations"},
		mustPassAt: []string{"ReadersSeeOldOrNewNeverAMix", "MasksRoundTripAllSixtyFourBits", "ConcurrentRefreshesLeaveExactlyOneActive"},
	},
}

// TestBrokenProjectionStoreChild is the child half: it runs only when the
// parent sets brokenProjectionEnv, and is expected to fail.
func TestBrokenProjectionStoreChild(t *testing.T) {
	kind := os.Getenv(brokenProjectionEnv)
	if kind == "" {
		t.Skip("runs only as the child of TestRunProjectionStore_CatchesBrokenStores")
	}
	bs, ok := brokenProjectionStores[kind]
	if !ok {
		t.Fatalf("unknown broken store %q", kind)
	}
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		return conformance.ProjectionHarness{Store: bs.wrap(memory.NewProjectionStore(memory.ProjectionStoreOptions{}))}
	}, conformance.ProjectionFeatures{})
}

func TestRunProjectionStore_CatchesBrokenStores(t *testing.T) {
	if os.Getenv(brokenProjectionEnv) != "" {
		t.Skip("child process")
	}
	for kind, bs := range brokenProjectionStores {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			brokenChild{
				Test: "TestBrokenProjectionStoreChild", Env: brokenProjectionEnv, Kind: kind, What: "store",
				MustCatch: bs.mustCatch, MustPassAt: bs.mustPassAt,
			}.run(t)
		})
	}
}

// TestRunProjectionStore_PassesTheMemoryStore runs the suite against the
// reference store here too, so a change to the suite that the reference
// cannot pass fails in this package.
func TestRunProjectionStore_PassesTheMemoryStore(t *testing.T) {
	if os.Getenv(brokenProjectionEnv) != "" {
		t.Skip("child process")
	}
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		return conformance.ProjectionHarness{Store: memory.NewProjectionStore(memory.ProjectionStoreOptions{})}
	}, conformance.ProjectionFeatures{})
}

// growingReplace writes a generation the way a store without an atomic flip
// would appear to readers: it empties the projection, then adds the grants
// in growing steps (1, 2, 4, ...), each step visible.
type growingReplace struct {
	*memory.ProjectionStore
	mu sync.Mutex // one Replace at a time, as a per-subject lock would
}

func (b *growingReplace) Replace(ctx context.Context, subject projection.Subject, grants []projection.Grant) (projection.Generation, error) {
	if err := subject.Validate(); err != nil {
		return 0, err
	}
	if err := projection.ValidateGrants(grants); err != nil {
		return 0, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var gen projection.Generation
	for end := 0; ; end = min(max(2*end, 1), len(grants)) {
		g, err := b.ProjectionStore.Replace(ctx, subject, grants[:end])
		if err != nil {
			return 0, err
		}
		gen = g
		if end == len(grants) {
			return gen, nil
		}
	}
}

// sweepDropsActive deletes the active generations too when it sweeps: the
// swept subjects read as absent until their next Replace.
type sweepDropsActive struct {
	*memory.ProjectionStore
	mu      sync.Mutex
	known   map[projection.Subject]bool
	dropped map[projection.Subject]bool
}

func newSweepDropsActive(s *memory.ProjectionStore) *sweepDropsActive {
	return &sweepDropsActive{ProjectionStore: s, known: map[projection.Subject]bool{}, dropped: map[projection.Subject]bool{}}
}

func (b *sweepDropsActive) Replace(ctx context.Context, subject projection.Subject, grants []projection.Grant) (projection.Generation, error) {
	gen, err := b.ProjectionStore.Replace(ctx, subject, grants)
	if err == nil {
		b.mu.Lock()
		b.known[subject] = true
		delete(b.dropped, subject)
		b.mu.Unlock()
	}
	return gen, err
}

func (b *sweepDropsActive) isDropped(subject projection.Subject) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dropped[subject]
}

func (b *sweepDropsActive) Sweep(ctx context.Context) (int, error) {
	n, err := b.ProjectionStore.Sweep(ctx)
	if err != nil {
		return n, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.known {
		if !b.dropped[s] {
			b.dropped[s] = true
			n++
		}
	}
	return n, nil
}

func (b *sweepDropsActive) Mask(ctx context.Context, subject projection.Subject, typ, id string) (projection.Mask, bool, error) {
	if b.isDropped(subject) {
		return 0, false, fmt.Errorf("broken: %w", projection.ErrNoProjection)
	}
	return b.ProjectionStore.Mask(ctx, subject, typ, id)
}

func (b *sweepDropsActive) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	if b.isDropped(subject) {
		return projection.Snapshot{}, fmt.Errorf("broken: %w", projection.ErrNoProjection)
	}
	return b.ProjectionStore.Snapshot(ctx, subject)
}

func (b *sweepDropsActive) Generations(ctx context.Context, subject projection.Subject) ([]projection.GenerationInfo, error) {
	if b.isDropped(subject) {
		return nil, nil
	}
	return b.ProjectionStore.Generations(ctx, subject)
}

// topBitLost stores masks in 63 bits, as a signed column converted with a
// clamp instead of by bit pattern would.
type topBitLost struct{ *memory.ProjectionStore }

func (b topBitLost) Replace(ctx context.Context, subject projection.Subject, grants []projection.Grant) (projection.Generation, error) {
	clamped := make([]projection.Grant, len(grants))
	for i, g := range grants {
		clamped[i] = g
		if g.Mask > 1<<63-1 {
			clamped[i].Mask = 1<<63 - 1
		}
	}
	return b.ProjectionStore.Replace(ctx, subject, clamped)
}

// emptyNotStored treats an empty grant set as nothing to write: the subject
// stays unknown, or keeps its previous grants, instead of having no access.
type emptyNotStored struct{ *memory.ProjectionStore }

func (b emptyNotStored) Replace(ctx context.Context, subject projection.Subject, grants []projection.Grant) (projection.Generation, error) {
	if len(grants) == 0 {
		if err := subject.Validate(); err != nil {
			return 0, err
		}
		return 1 << 40, nil
	}
	return b.ProjectionStore.Replace(ctx, subject, grants)
}
