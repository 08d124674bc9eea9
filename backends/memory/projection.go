package memory

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-go/baton/core/projection"
)

// ProjectionStoreOptions configure a ProjectionStore. The zero value uses
// the defaults.
type ProjectionStoreOptions struct {
	// Now stamps each generation's CreatedAt. nil means time.Now.
	Now func() time.Time
}

// ProjectionStore is a projection.Store kept in memory. Create it with
// NewProjectionStore. It is safe for concurrent use.
//
// A generation is built outside the store's lock, as an immutable value, and
// made active by swapping one pointer under the lock: that swap is the flip,
// done only when the new generation is larger than the active one. Readers
// take the lock only to fetch the pointer of the subject's active
// generation, then read the immutable value.
type ProjectionStore struct {
	now func() time.Time

	mu       sync.RWMutex
	last     projection.Generation // the last one Reserve drew
	stored   map[projection.Generation]bool
	subjects map[projection.Subject]*projectionSubject
	// superseded counts the generations not active any more, of every
	// subject, so a sweep with nothing to do stops at once.
	superseded int
}

var _ projection.Store = (*ProjectionStore)(nil)

// projectionSubject is one subject's generations.
type projectionSubject struct {
	active     *projectionGeneration
	superseded []*projectionGeneration
}

// projectionGeneration is one generation. It never changes once it is in
// the store.
type projectionGeneration struct {
	gen       projection.Generation
	createdAt time.Time
	sorted    []projection.Grant // CompareGrants order
	masks     map[projectionResource]projection.Mask
}

type projectionResource struct{ typ, id string }

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o ProjectionStoreOptions) withDefaults() ProjectionStoreOptions {
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// NewProjectionStore returns an empty store. Every option is valid, so the error is
// always nil; it is there so that every constructor reads the same.
func NewProjectionStore(opts ProjectionStoreOptions) (*ProjectionStore, error) {
	opts = opts.withDefaults()
	return &ProjectionStore{now: opts.Now, stored: make(map[projection.Generation]bool), subjects: make(map[projection.Subject]*projectionSubject)}, nil
}

// Reserve implements projection.Store: the store's own counter.
func (s *ProjectionStore) Reserve(ctx context.Context) (projection.Generation, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last++
	return s.last, nil
}

// Replace implements projection.Store. Bad input and a stale generation
// write nothing.
func (s *ProjectionStore) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	if err := subject.Validate(); err != nil {
		return err
	}
	if err := projection.ValidateGrants(grants); err != nil {
		return err
	}
	if gen == 0 {
		return fmt.Errorf("baton/memory: %w: 0 is never a generation; use one from Reserve", projection.ErrInvalidGeneration)
	}
	g := &projectionGeneration{
		sorted: slices.SortedFunc(slices.Values(grants), projection.CompareGrants),
		masks:  make(map[projectionResource]projection.Mask, len(grants)),
	}
	for _, gr := range grants {
		g.masks[projectionResource{gr.ResourceType, gr.ResourceID}] = gr.Mask
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case gen > s.last:
		return fmt.Errorf("baton/memory: %w: generation %d was never reserved (the last reserved is %d)", projection.ErrInvalidGeneration, gen, s.last)
	case s.stored[gen]:
		return fmt.Errorf("baton/memory: %w: generation %d is already written", projection.ErrInvalidGeneration, gen)
	}
	st := s.subjects[subject]
	if st != nil && st.active != nil && st.active.gen > gen {
		return fmt.Errorf("baton/memory: %w: %s is at generation %d, reserved after %d", projection.ErrStale, subject, st.active.gen, gen)
	}
	g.gen = gen
	g.createdAt = s.now().Round(0)
	if st == nil {
		st = &projectionSubject{}
		s.subjects[subject] = st
	}
	if st.active != nil {
		st.superseded = append(st.superseded, st.active)
		s.superseded++
	}
	st.active = g
	s.stored[gen] = true
	return nil
}

// activeGeneration returns the subject's active generation, or an error
// wrapping projection.ErrNoProjection.
func (s *ProjectionStore) activeGeneration(ctx context.Context, subject projection.Subject) (*projectionGeneration, error) {
	if err := subject.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if st := s.subjects[subject]; st != nil && st.active != nil {
		return st.active, nil
	}
	return nil, fmt.Errorf("baton/memory: %w: %s", projection.ErrNoProjection, subject)
}

// Mask implements projection.Store.
func (s *ProjectionStore) Mask(ctx context.Context, subject projection.Subject, resourceType, resourceID string) (projection.Mask, bool, error) {
	if err := projection.ValidateResource(resourceType, resourceID); err != nil {
		return 0, false, err
	}
	g, err := s.activeGeneration(ctx, subject)
	if err != nil {
		return 0, false, err
	}
	m, found := g.masks[projectionResource{resourceType, resourceID}]
	return m, found, nil
}

// Snapshot implements projection.Store. The grants are the caller's copy.
func (s *ProjectionStore) Snapshot(ctx context.Context, subject projection.Subject) (projection.Snapshot, error) {
	g, err := s.activeGeneration(ctx, subject)
	if err != nil {
		return projection.Snapshot{}, err
	}
	return projection.Snapshot{Subject: subject, Generation: g.gen, Grants: slices.Clone(g.sorted)}, nil
}

// Generations implements projection.Store.
func (s *ProjectionStore) Generations(ctx context.Context, subject projection.Subject) ([]projection.GenerationInfo, error) {
	if err := subject.Validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.subjects[subject]
	if st == nil {
		return nil, nil
	}
	var infos []projection.GenerationInfo
	for _, g := range st.superseded {
		infos = append(infos, projection.GenerationInfo{Generation: g.gen, CreatedAt: g.createdAt})
	}
	if st.active != nil {
		infos = append(infos, projection.GenerationInfo{Generation: st.active.gen, Active: true, CreatedAt: st.active.createdAt})
	}
	return infos, nil
}

// Sweep implements projection.Store.
func (s *ProjectionStore) Sweep(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.superseded
	if n == 0 {
		return 0, nil
	}
	for _, st := range s.subjects {
		for _, g := range st.superseded {
			delete(s.stored, g.gen)
		}
		clear(st.superseded)
		st.superseded = st.superseded[:0:0]
	}
	s.superseded = 0
	return n, nil
}

// Forget drops every generation of every subject, as a crash restart
// empties PostgreSQL's UNLOGGED projection tables: afterwards every read
// returns projection.ErrNoProjection until the subject is refreshed. It is
// for testing what an application does then.
func (s *ProjectionStore) Forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.subjects)
	clear(s.stored)
	s.superseded = 0
}
