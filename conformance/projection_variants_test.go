package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/projection"
)

// The stores of projectionVariants, each the memory projection store with
// one rule broken.

// unknownIsEmpty answers for a subject never refreshed as for one with no
// access.
type unknownIsEmpty struct{ *memory.ProjectionStore }

func (b unknownIsEmpty) Mask(ctx context.Context, subject projection.Subject, typ, id string) (projection.Mask, bool, error) {
	m, found, err := b.ProjectionStore.Mask(ctx, subject, typ, id)
	if errors.Is(err, projection.ErrNoProjection) {
		return 0, false, nil
	}
	return m, found, err
}

func (b unknownIsEmpty) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	snap, err := b.ProjectionStore.Snapshot(ctx, subject)
	if errors.Is(err, projection.ErrNoProjection) {
		return projection.Snapshot{Subject: subject}, nil
	}
	return snap, err
}

// writeOrder lists a generation's grants in the order they were written.
type writeOrder struct {
	*memory.ProjectionStore
	mu      sync.Mutex
	written map[projection.Generation][]projection.Grant
}

func (b *writeOrder) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	if err := b.ProjectionStore.Replace(ctx, subject, gen, grants); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written == nil {
		b.written = map[projection.Generation][]projection.Grant{}
	}
	b.written[gen] = slices.Clone(grants)
	return nil
}

func (b *writeOrder) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	snap, err := b.ProjectionStore.Snapshot(ctx, subject)
	b.mu.Lock()
	defer b.mu.Unlock()
	if gs, ok := b.written[snap.Generation]; ok && err == nil {
		snap.Grants = slices.Clone(gs)
	}
	return snap, err
}

// maskByID finds a grant by its resource ID alone.
type maskByID struct{ *memory.ProjectionStore }

func (b maskByID) Mask(ctx context.Context, subject projection.Subject, typ, id string) (projection.Mask, bool, error) {
	if _, _, err := b.ProjectionStore.Mask(ctx, subject, typ, id); err != nil {
		return 0, false, err
	}
	snap, err := b.ProjectionStore.Snapshot(ctx, subject)
	if err != nil {
		return 0, false, err
	}
	for _, g := range snap.Grants {
		if g.ResourceID == id {
			return g.Mask, true, nil
		}
	}
	return 0, false, nil
}

// cappedReplace keeps at most 10,000 grants of a generation, as a store
// that writes one batch and forgets the rest.
type cappedReplace struct{ *memory.ProjectionStore }

func (b cappedReplace) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	return b.ProjectionStore.Replace(ctx, subject, gen, grants[:min(len(grants), 10_000)])
}

// burnsGenerations takes a generation as used when its Replace fails, so
// retrying it is refused.
type burnsGenerations struct {
	*memory.ProjectionStore
	mu     sync.Mutex
	burned map[projection.Generation]bool
}

func (b *burnsGenerations) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	b.mu.Lock()
	if b.burned[gen] {
		b.mu.Unlock()
		return fmt.Errorf("%w: generation %d was used by a failed Replace", projection.ErrInvalidGeneration, gen)
	}
	b.mu.Unlock()
	err := b.ProjectionStore.Replace(ctx, subject, gen, grants)
	if err != nil && ctx.Err() != nil {
		b.mu.Lock()
		if b.burned == nil {
			b.burned = map[projection.Generation]bool{}
		}
		b.burned[gen] = true
		b.mu.Unlock()
	}
	return err
}

// allActive lists every stored generation as active.
type allActive struct{ *memory.ProjectionStore }

func (b allActive) Generations(ctx context.Context, subject projection.Subject) ([]projection.GenerationInfo, error) {
	infos, err := b.ProjectionStore.Generations(ctx, subject)
	for i := range infos {
		infos[i].Active = true
	}
	return infos, err
}

// checkThenFlip checks for staleness, then writes: a flip decided on a
// read that a concurrent flip has made stale, which then writes its older
// answer anyway, under a fresh number. The rendezvous pairs two concurrent
// calls after their checks and lets the larger generation flip first.
type checkThenFlip struct {
	*memory.ProjectionStore
	meet rendezvous
}

type flipTurn struct {
	gen  projection.Generation
	done chan struct{}
}

func (b *checkThenFlip) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	if snap, err := b.ProjectionStore.Snapshot(ctx, subject); err == nil && snap.Generation > gen {
		return fmt.Errorf("%w: generation %d is active", projection.ErrStale, snap.Generation)
	}
	mine := flipTurn{gen: gen, done: make(chan struct{})}
	defer close(mine.done)
	if other, met, _ := b.meet.meet(mine); met {
		if o := other.(flipTurn); o.gen > gen {
			select {
			case <-o.done:
			case <-time.After(5 * time.Second):
			}
		}
	}
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

// racyReserve reads the counter, then increments it: two concurrent
// reservations both get the smaller number.
type racyReserve struct {
	*memory.ProjectionStore
	meet rendezvous
}

func (b *racyReserve) Reserve(ctx context.Context) (projection.Generation, error) {
	gen, err := b.ProjectionStore.Reserve(ctx)
	if err != nil {
		return 0, err
	}
	if other, met, _ := b.meet.meet(gen); met {
		return min(gen, other.(projection.Generation)), nil
	}
	return gen, nil
}

// staleSucceeds drops a stale Replace without saying so.
type staleSucceeds struct{ *memory.ProjectionStore }

func (b staleSucceeds) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	if err := b.ProjectionStore.Replace(ctx, subject, gen, grants); !errors.Is(err, projection.ErrStale) {
		return err
	}
	return nil
}

// doubleCountingSweep counts what concurrent sweeps deleted together as
// each one's own.
type doubleCountingSweep struct {
	*memory.ProjectionStore
	meet rendezvous
}

func (b *doubleCountingSweep) Sweep(ctx context.Context) (int, error) {
	n, err := b.ProjectionStore.Sweep(ctx)
	if err != nil {
		return n, err
	}
	if other, met, _ := b.meet.meet(n); met {
		return n + other.(int), nil
	}
	return n, nil
}

// invalidSubjectUnknown answers a point read for an invalid subject with
// "no projection" instead of refusing it.
type invalidSubjectUnknown struct{ *memory.ProjectionStore }

func (b invalidSubjectUnknown) Mask(ctx context.Context, subject projection.Subject, typ, id string) (projection.Mask, bool, error) {
	if subject.Validate() != nil {
		return 0, false, fmt.Errorf("%w: %s", projection.ErrNoProjection, subject)
	}
	return b.ProjectionStore.Mask(ctx, subject, typ, id)
}

// projectionCauseLost fails on an ended context with an error of its own.
type projectionCauseLost struct{ *memory.ProjectionStore }

func (b projectionCauseLost) Reserve(ctx context.Context) (projection.Generation, error) {
	if ctx.Err() != nil {
		return 0, errAborted
	}
	return b.ProjectionStore.Reserve(ctx)
}

func (b projectionCauseLost) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	if ctx.Err() != nil {
		return projection.Snapshot{}, errAborted
	}
	return b.ProjectionStore.Snapshot(ctx, subject)
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
	// snapshots counts Snapshot reads: after its first partial step, a
	// Replace waits for one, so some reader sees a half-built generation
	// however the goroutines are scheduled.
	snapshots atomic.Int64
}

func (b *growingReplace) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	snap, err := b.ProjectionStore.Snapshot(ctx, subject)
	b.snapshots.Add(1)
	return snap, err
}

// awaitSnapshot waits, up to 200ms, for a Snapshot read after the
// count seen.
func (b *growingReplace) awaitSnapshot(seen int64) {
	for deadline := time.Now().Add(200 * time.Millisecond); b.snapshots.Load() <= seen+1 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
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
		seen := b.snapshots.Load()
		if err := b.ProjectionStore.Replace(ctx, subject, step, grants[:end]); err != nil {
			return err
		}
		if end == 1 {
			b.awaitSnapshot(seen)
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
