package conformance_test

import (
	"context"
	"errors"
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
	"last-flip-wins": {
		wrap:      func(s *memory.ProjectionStore) projection.Store { return lastFlipWins{s} },
		mustCatch: []string{"AnOlderReservationIsRefusedAsStale", "FlipsInAnyOrderNeverMoveTheActiveGenerationBack"},
		mustPassAt: []string{"ReplaceMakesTheNewGenerationActive", "ReadersSeeOldOrNewNeverAMix", "InvalidInputWritesNothing",
			"ReservationsIncreaseAcrossNodes", "SweepRemovesOnlySupersededGenerations", "FailedReplaceKeepsThePreviousGeneration"},
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
// in growing steps (1, 2, 4, ...), each step visible. Each step is a
// generation of its own, so Reserve sets aside a block of numbers and
// hands out the block's last one: the steps take the numbers below it.
type growingReplace struct {
	*memory.ProjectionStore
	mu     sync.Mutex                     // one Reserve or Replace at a time, as a per-subject lock would
	blocks map[projection.Generation]bool // the last numbers of the blocks not used yet
}

// growingSteps bounds the steps of one Replace: enough for 2^30 grants.
const growingSteps = 32

func (b *growingReplace) Reserve(ctx context.Context) (projection.Generation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var gen projection.Generation
	for range growingSteps {
		g, err := b.ProjectionStore.Reserve(ctx)
		if err != nil {
			return 0, err
		}
		gen = g
	}
	if b.blocks == nil {
		b.blocks = map[projection.Generation]bool{}
	}
	b.blocks[gen] = true
	return gen, nil
}

func (b *growingReplace) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	if err := subject.Validate(); err != nil {
		return err
	}
	if err := projection.ValidateGrants(grants); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.blocks[gen] { // not one it handed out: the store says why
		return b.ProjectionStore.Replace(ctx, subject, gen, grants)
	}
	delete(b.blocks, gen)
	step := gen - growingSteps + 1
	for end := 0; end < len(grants); end = min(max(2*end, 1), len(grants)) {
		if err := b.ProjectionStore.Replace(ctx, subject, step, grants[:end]); err != nil {
			return err
		}
		step++
	}
	return b.ProjectionStore.Replace(ctx, subject, gen, grants)
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

func (b *sweepDropsActive) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	err := b.ProjectionStore.Replace(ctx, subject, gen, grants)
	if err == nil {
		b.mu.Lock()
		b.known[subject] = true
		delete(b.dropped, subject)
		b.mu.Unlock()
	}
	return err
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

func (b topBitLost) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	clamped := make([]projection.Grant, len(grants))
	for i, g := range grants {
		clamped[i] = g
		if g.Mask > 1<<63-1 {
			clamped[i].Mask = 1<<63 - 1
		}
	}
	return b.ProjectionStore.Replace(ctx, subject, gen, clamped)
}

// emptyNotStored treats an empty grant set as nothing to write: the subject
// stays unknown, or keeps its previous grants, instead of having no access.
type emptyNotStored struct{ *memory.ProjectionStore }

func (b emptyNotStored) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	if len(grants) == 0 {
		return subject.Validate()
	}
	return b.ProjectionStore.Replace(ctx, subject, gen, grants)
}

// lastFlipWins orders flips by their arrival instead of by their
// reservation, as the contract used to allow: a Replace with an older
// generation than the active one is written anyway, under a fresh number,
// so the answer fetched earlier replaces the one fetched later.
type lastFlipWins struct{ *memory.ProjectionStore }

func (b lastFlipWins) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	err := b.ProjectionStore.Replace(ctx, subject, gen, grants)
	if !errors.Is(err, projection.ErrStale) {
		return err
	}
	later, err := b.ProjectionStore.Reserve(ctx)
	if err != nil {
		return err
	}
	return b.ProjectionStore.Replace(ctx, subject, later, grants)
}
