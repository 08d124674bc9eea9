package projection_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/projection"
)

// fakeSource is an engine that answers from a map. It counts calls per
// subject, and can be told to fail or to hold its answers until released.
type fakeSource struct {
	mu     sync.Mutex
	grants map[projection.Subject][]projection.Grant
	calls  map[projection.Subject]int
	err    error
	gate   chan struct{} // when set, calls wait for it to close (or ctx)
}

var errEngineDown = errors.New("engine unreachable")

func newFakeSource() *fakeSource {
	return &fakeSource{grants: map[projection.Subject][]projection.Grant{}, calls: map[projection.Subject]int{}}
}

func (s *fakeSource) set(subject projection.Subject, grants ...projection.Grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.grants[subject] = grants
}

func (s *fakeSource) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// hold makes calls wait until the returned function is called.
func (s *fakeSource) hold() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gate := make(chan struct{})
	s.gate = gate
	return func() {
		s.mu.Lock()
		if s.gate == gate {
			s.gate = nil
		}
		s.mu.Unlock()
		close(gate)
	}
}

func (s *fakeSource) callsOf(subject projection.Subject) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[subject]
}

func (s *fakeSource) Grants(ctx context.Context, subject projection.Subject) ([]projection.Grant, error) {
	s.mu.Lock()
	s.calls[subject]++
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return s.grants[subject], nil
}

// countingStore counts the store calls the core makes.
type countingStore struct {
	*memory.ProjectionStore
	mu       sync.Mutex
	replaces int
	sweeps   int
	sweepErr error
}

func newCountingStore() *countingStore {
	memProjections, err := memory.NewProjectionStore(memory.ProjectionStoreOptions{})
	if err != nil {
		panic(err)
	}
	return &countingStore{ProjectionStore: memProjections}
}

func (s *countingStore) Replace(ctx context.Context, subject projection.Subject, gen projection.Generation, grants []projection.Grant) error {
	s.mu.Lock()
	s.replaces++
	s.mu.Unlock()
	return s.ProjectionStore.Replace(ctx, subject, gen, grants)
}

// write reserves a generation and writes grants as subject's projection.
func (s *countingStore) write(t *testing.T, subject projection.Subject, grants ...projection.Grant) projection.Generation {
	t.Helper()
	gen, err := s.Reserve(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replace(t.Context(), subject, gen, grants); err != nil {
		t.Fatal(err)
	}
	return gen
}

func (s *countingStore) Sweep(ctx context.Context) (int, error) {
	s.mu.Lock()
	s.sweeps++
	err := s.sweepErr
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return s.ProjectionStore.Sweep(ctx)
}

func (s *countingStore) counts() (replaces, sweeps int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replaces, s.sweeps
}

var (
	alice = projection.Subject{Type: "user", ID: "alice"}
	bob   = projection.Subject{Type: "user", ID: "bob"}
	bits  = projection.Bits{"read": 0, "write": 1, "own": 63}
)

func doc(id string, m projection.Mask) projection.Grant {
	return projection.Grant{ResourceType: "doc", ResourceID: id, Mask: m}
}
