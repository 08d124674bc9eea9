package projection_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/baton-go/baton/core/projection"
)

func newReader(t *testing.T, store projection.Store, source projection.Source) *projection.Reader {
	t.Helper()
	r, err := projection.NewReader(projection.ReaderConfig{Store: store, Source: source})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func newLocalReader(t *testing.T, store projection.Store) *projection.LocalReader {
	t.Helper()
	r, err := projection.NewLocalReader(store)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLocalReader_AbsentProjectionIsErrNoProjectionNeverNoAccess(t *testing.T) {
	ctx := t.Context()
	store := newCountingStore()
	local := newLocalReader(t, store)

	_, found, err := local.Mask(ctx, alice, "doc", "d-1")
	if !errors.Is(err, projection.ErrNoProjection) || found {
		t.Fatalf("Mask with no projection = found %v, %v; want ErrNoProjection", found, err)
	}
	held, err := local.HasPermission(ctx, alice, "doc", "d-1", bits, "read")
	if !errors.Is(err, projection.ErrNoProjection) || held {
		t.Fatalf("HasPermission with no projection = %v, %v; want ErrNoProjection", held, err)
	}
	if _, err := local.Snapshot(ctx, alice); !errors.Is(err, projection.ErrNoProjection) {
		t.Fatalf("Snapshot with no projection = %v; want ErrNoProjection", err)
	}

	// An empty generation is a known subject with no access: no error.
	store.write(t, alice)
	held, err = local.HasPermission(ctx, alice, "doc", "d-1", bits, "read")
	if err != nil || held {
		t.Fatalf("HasPermission with an empty generation = %v, %v; want false, nil", held, err)
	}
}

func TestLocalReader_HasPermissionReadsTheBitOfTheName(t *testing.T) {
	ctx := t.Context()
	store := newCountingStore()
	store.write(t, alice, doc("d-1", 1<<63|1))
	local := newLocalReader(t, store)
	for perm, want := range map[string]bool{"read": true, "write": false, "own": true} {
		if held, err := local.HasPermission(ctx, alice, "doc", "d-1", bits, perm); err != nil || held != want {
			t.Errorf("HasPermission(%s) = %v, %v; want %v", perm, held, err, want)
		}
	}
	if held, err := local.HasPermission(ctx, alice, "doc", "d-2", bits, "read"); err != nil || held {
		t.Errorf("HasPermission on an ungranted resource = %v, %v; want false", held, err)
	}
	if _, err := local.HasPermission(ctx, alice, "doc", "d-1", bits, "fly"); !errors.Is(err, projection.ErrUnknownPermission) {
		t.Errorf("HasPermission(fly) = %v, want ErrUnknownPermission", err)
	}
	// The name is checked before the store: also for an unknown subject.
	if _, err := local.HasPermission(ctx, bob, "doc", "d-1", bits, "fly"); !errors.Is(err, projection.ErrUnknownPermission) {
		t.Errorf("HasPermission(bob, fly) = %v, want ErrUnknownPermission", err)
	}
}

func TestReader_RefreshesThroughWhenTheProjectionIsAbsent(t *testing.T) {
	ctx := t.Context()
	store, source := newCountingStore(), newFakeSource()
	source.set(alice, doc("d-1", 0b11))
	r := newReader(t, store, source)

	held, err := r.HasPermission(ctx, alice, "doc", "d-1", bits, "write")
	if err != nil || !held {
		t.Fatalf("HasPermission = %v, %v; want true after a refresh-through", held, err)
	}
	// Now present: answered locally, no second Source call.
	for range 3 {
		if m, found, err := r.Mask(ctx, alice, "doc", "d-1"); err != nil || !found || m != 0b11 {
			t.Fatalf("Mask = %v, %v, %v", m, found, err)
		}
	}
	if n := source.callsOf(alice); n != 1 {
		t.Errorf("%d Source calls, want 1", n)
	}
	// A subject the engine grants nothing gets an empty generation, once.
	for range 2 {
		snap, err := r.Snapshot(ctx, bob)
		if err != nil || len(snap.Grants) != 0 || snap.Generation == 0 {
			t.Fatalf("Snapshot(bob) = %+v, %v; want an empty generation", snap, err)
		}
	}
	if n := source.callsOf(bob); n != 1 {
		t.Errorf("%d Source calls for bob, want 1", n)
	}
}

func TestReader_FailedRefreshIsErrNoProjectionWithTheCause(t *testing.T) {
	ctx := t.Context()
	store, source := newCountingStore(), newFakeSource()
	source.fail(errEngineDown)
	r := newReader(t, store, source)

	held, err := r.HasPermission(ctx, alice, "doc", "d-1", bits, "read")
	if held || !errors.Is(err, projection.ErrNoProjection) || !errors.Is(err, errEngineDown) {
		t.Fatalf("HasPermission with the engine down = %v, %v; want an error wrapping ErrNoProjection and the cause", held, err)
	}
	if replaces, _ := store.counts(); replaces != 0 {
		t.Errorf("a failed fetch wrote %d generations", replaces)
	}
	// The next call tries again.
	source.fail(nil)
	source.set(alice, doc("d-1", 1))
	if held, err := r.HasPermission(ctx, alice, "doc", "d-1", bits, "read"); err != nil || !held {
		t.Fatalf("after the engine came back: %v, %v", held, err)
	}
}

func TestReader_ConcurrentCallersForOneSubjectShareOneRefresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store, source := newCountingStore(), newFakeSource()
		source.set(alice, doc("d-1", 1))
		source.set(bob, doc("d-2", 2))
		release := source.hold()
		r := newReader(t, store, source)

		const callers = 20
		var wg sync.WaitGroup
		errs := make(chan error, 2*callers)
		for i := range callers {
			wg.Go(func() {
				m, found, err := r.Mask(ctx, alice, "doc", "d-1")
				if err != nil || !found || m != 1 {
					errs <- errors.Join(err, errors.New("alice: wrong answer"))
				}
			})
			if i < 3 {
				wg.Go(func() {
					if _, found, err := r.Mask(ctx, bob, "doc", "d-2"); err != nil || !found {
						errs <- errors.Join(err, errors.New("bob: wrong answer"))
					}
				})
			}
		}
		synctest.Wait() // every caller waits: the Source holds its answers
		if a, b := source.callsOf(alice), source.callsOf(bob); a != 1 || b != 1 {
			t.Fatalf("while held: %d Source calls for alice, %d for bob; want one each (one refresh per subject, subjects in parallel)", a, b)
		}
		release()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if replaces, _ := store.counts(); replaces != 2 {
			t.Errorf("%d Replace calls, want 2", replaces)
		}
	})
}

func TestReader_WaiterWhoseContextEndsLeavesTheRefreshRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, source := newCountingStore(), newFakeSource()
		source.set(alice, doc("d-1", 1))
		release := source.hold()
		r := newReader(t, store, source)

		leader := make(chan error, 1)
		go func() {
			_, err := r.Refresh(context.Background(), alice)
			leader <- err
		}()
		synctest.Wait()
		ctx, cancel := context.WithCancel(context.Background())
		waiter := make(chan error, 1)
		go func() {
			_, err := r.Refresh(ctx, alice)
			waiter <- err
		}()
		synctest.Wait()
		cancel()
		if err := <-waiter; !errors.Is(err, context.Canceled) {
			t.Fatalf("the waiter's Refresh = %v, want context.Canceled", err)
		}
		release()
		if err := <-leader; err != nil {
			t.Fatalf("the refresh itself = %v", err)
		}
		if n := source.callsOf(alice); n != 1 {
			t.Errorf("%d Source calls, want 1", n)
		}
	})
}

func TestReader_WaitersStartAgainWhenTheRefreshingCallersContextEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, source := newCountingStore(), newFakeSource()
		source.set(alice, doc("d-1", 1))
		release := source.hold()
		r := newReader(t, store, source)

		ctx, cancel := context.WithCancel(context.Background())
		leader := make(chan error, 1)
		go func() {
			_, err := r.Refresh(ctx, alice)
			leader <- err
		}()
		synctest.Wait()
		waiter := make(chan error, 1)
		go func() {
			_, _, err := r.Mask(context.Background(), alice, "doc", "d-1")
			waiter <- err
		}()
		synctest.Wait()
		cancel() // the refreshing caller gives up
		if err := <-leader; !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled refresh = %v, want context.Canceled", err)
		}
		synctest.Wait() // the waiter has started its own refresh, held too
		if n := source.callsOf(alice); n != 2 {
			t.Fatalf("%d Source calls, want 2: the waiter refreshes under its own context", n)
		}
		release()
		if err := <-waiter; err != nil {
			t.Fatalf("the waiter's Mask = %v, want an answer", err)
		}
	})
}

func TestReader_PanickingSourceFailsTheWaitersAndFreesTheSubject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := newCountingStore()
		gate := make(chan struct{})
		calls := 0
		source := projection.SourceFunc(func(ctx context.Context, s projection.Subject) ([]projection.Grant, error) {
			calls++
			if calls == 1 {
				<-gate
				panic("engine client bug")
			}
			return nil, nil
		})
		r := newReader(t, store, source)
		panicked := make(chan any, 1)
		go func() {
			defer func() { panicked <- recover() }()
			_, _ = r.Refresh(context.Background(), alice)
		}()
		synctest.Wait()
		waiter := make(chan error, 1)
		go func() {
			_, err := r.Refresh(context.Background(), alice)
			waiter <- err
		}()
		synctest.Wait()
		close(gate)
		if p := <-panicked; p != "engine client bug" {
			t.Fatalf("recovered %v, want the Source's panic", p)
		}
		if err := <-waiter; err == nil || !strings.Contains(err.Error(), "panicked") {
			t.Fatalf("the waiter's Refresh = %v, want an error saying the refresh panicked", err)
		}
		if _, err := r.Refresh(context.Background(), alice); err != nil {
			t.Fatalf("a later Refresh = %v; the subject must not stay stuck", err)
		}
	})
}

func TestNewReader_RejectsMissingPartsNamingTheField(t *testing.T) {
	for field, opts := range map[string]projection.ReaderConfig{
		"ReaderConfig.Store":  {Source: newFakeSource()},
		"ReaderConfig.Source": {Store: newCountingStore()},
	} {
		_, err := projection.NewReader(opts)
		if !errors.Is(err, projection.ErrInvalidConfig) || !strings.Contains(err.Error(), field) {
			t.Errorf("NewReader without %s = %v", field, err)
		}
	}
	if _, err := projection.NewLocalReader(nil); !errors.Is(err, projection.ErrInvalidConfig) {
		t.Errorf("NewLocalReader(nil) = %v", err)
	}
	r := newReader(t, newCountingStore(), newFakeSource())
	if _, err := r.Refresh(t.Context(), projection.Subject{Type: "user"}); !errors.Is(err, projection.ErrInvalidSubject) {
		t.Errorf("Refresh of a subject without ID = %v, want ErrInvalidSubject", err)
	}
}

// snapshotEngine answers each fetch with the grants it held when the fetch
// started, as an engine reading one snapshot does. A fetch can be made to
// hand its answer over late.
type snapshotEngine struct {
	mu      sync.Mutex
	grants  []projection.Grant
	hold    chan struct{} // the next fetch waits for it after reading
	started chan struct{} // closed when that fetch has read
}

func (e *snapshotEngine) set(grants ...projection.Grant) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.grants = grants
}

// holdNext makes the next fetch read at once and answer when release is
// called; started is closed once it has read.
func (e *snapshotEngine) holdNext() (started <-chan struct{}, release func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hold, e.started = make(chan struct{}), make(chan struct{})
	hold := e.hold
	return e.started, func() { close(hold) }
}

func (e *snapshotEngine) Grants(ctx context.Context, _ projection.Subject) ([]projection.Grant, error) {
	e.mu.Lock()
	answer := append([]projection.Grant(nil), e.grants...)
	hold, started := e.hold, e.started
	e.hold, e.started = nil, nil
	e.mu.Unlock()
	if hold != nil {
		close(started)
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return answer, nil
}

// Two nodes refresh one subject at once: node A's fetch reads the engine
// before a grant is revoked and answers late; node B's reads after the
// revocation and flips first. A's older answer must not replace B's, or the
// revoked grant comes back.
func TestRefresh_AnOlderFetchNeverUndoesANewerOne(t *testing.T) {
	ctx := t.Context()
	store := newCountingStore()
	engine := &snapshotEngine{}
	engine.set(doc("d-1", 1), doc("d-2", 1))
	nodeA, nodeB := newReader(t, store, engine), newReader(t, store, engine)

	started, release := engine.holdNext()
	aDone := make(chan error, 1)
	go func() {
		_, err := nodeA.Refresh(ctx, alice)
		aDone <- err
	}()
	<-started                 // A's fetch has read: it includes d-1
	engine.set(doc("d-2", 1)) // d-1 is revoked
	if _, err := nodeB.Refresh(ctx, alice); err != nil {
		t.Fatalf("node B's refresh: %v", err)
	}
	release() // A answers now, with what it read before the revocation
	errA := <-aDone
	if _, found, err := store.Mask(ctx, alice, "doc", "d-1"); err != nil || found {
		t.Fatalf("after both refreshes Mask(d-1) = found %v, %v: the older fetch brought a revoked grant back (node A's refresh: %v)", found, err, errA)
	}
	if _, found, _ := store.Mask(ctx, alice, "doc", "d-2"); !found {
		t.Fatal("the newer answer's grant d-2 is missing")
	}
	if !errors.Is(errA, projection.ErrStale) {
		t.Fatalf("node A's Refresh = %v, want an error wrapping ErrStale: someone fresher won", errA)
	}
}

// A refresh-through overtaken by a fresher refresh answers from that one,
// without an error.
func TestReader_RefreshThroughOvertakenByAFresherRefreshAnswersFromIt(t *testing.T) {
	ctx := t.Context()
	store := newCountingStore()
	engine := &snapshotEngine{}
	engine.set(doc("d-1", 1))
	through, other := newReader(t, store, engine), newReader(t, store, engine)

	started, release := engine.holdNext()
	type answer struct {
		found bool
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		_, found, err := through.Mask(ctx, alice, "doc", "d-1") // absent: refreshes through
		done <- answer{found, err}
	}()
	<-started
	engine.set() // everything revoked
	if _, err := other.Refresh(ctx, alice); err != nil {
		t.Fatal(err)
	}
	release()
	a := <-done
	if a.err != nil || a.found {
		t.Fatalf("Mask through a refresh that a fresher one overtook = found %v, %v; want the fresher answer: not found, no error", a.found, a.err)
	}
}
