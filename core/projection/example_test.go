package projection_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/projection"
)

// The wiring of projections: a store, a Source for the engine, a Reader
// that refreshes through, a LocalReader that never leaves the store, and
// the Refresher and Sweeper loops.
func Example() {
	ctx := context.Background()
	store, err := memory.NewProjectionStore(memory.ProjectionStoreOptions{}) // pgxstore.NewProjectionStore in production
	if err != nil {
		panic(err)
	}

	// The engine, here a map; in production a client of the engine's
	// projection endpoint.
	var mu sync.Mutex
	engine := map[projection.Subject][]projection.Grant{}
	source := projection.SourceFunc(func(ctx context.Context, s projection.Subject) ([]projection.Grant, error) {
		mu.Lock()
		defer mu.Unlock()
		return engine[s], nil
	})
	bits := projection.Bits{"read": 0, "write": 1, "share": 63} // from the engine's definitions
	alice := projection.Subject{Type: "user", ID: "alice"}
	engine[alice] = []projection.Grant{{ResourceType: "doc", ResourceID: "plan", Mask: 1<<63 | 0b11}}

	local, err := projection.NewLocalReader(store)
	if err != nil {
		panic(err)
	}
	_, err = local.HasPermission(ctx, alice, "doc", "plan", bits, "read")
	fmt.Println("local read before any refresh says refresh:", errors.Is(err, projection.ErrNoProjection))

	reader, err := projection.NewReader(projection.ReaderConfig{Store: store, Source: source})
	if err != nil {
		panic(err)
	}
	share, err := reader.HasPermission(ctx, alice, "doc", "plan", bits, "share")
	fmt.Println("reader refreshes through; alice may share:", share, err)

	// Keep projections fresh and swept, for as long as runCtx lasts.
	refresher, err := projection.NewRefresher(projection.RefresherConfig{
		Store: store, Source: source, Interval: 5 * time.Minute,
		Subjects: func(context.Context) ([]projection.Subject, error) { return []projection.Subject{alice}, nil },
	})
	if err != nil {
		panic(err)
	}
	sweeper, err := projection.NewSweeper(projection.SweeperConfig{Store: store})
	if err != nil {
		panic(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(func() { _ = refresher.Run(runCtx) })
	loops.Go(func() { _ = sweeper.Run(runCtx) })

	// The engine revokes write, and says so: a signal refreshes at once.
	mu.Lock()
	engine[alice] = []projection.Grant{{ResourceType: "doc", ResourceID: "plan", Mask: 0b01}}
	mu.Unlock()
	if err := refresher.Refresh(alice); err != nil {
		panic(err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if write, err := local.HasPermission(ctx, alice, "doc", "plan", bits, "write"); err == nil && !write {
			break
		}
	}
	write, err := local.HasPermission(ctx, alice, "doc", "plan", bits, "write")
	fmt.Println("after the signal, alice may write:", write, err)

	// A subject the engine grants nothing is known to have no access.
	bob := projection.Subject{Type: "user", ID: "bob"}
	read, err := reader.HasPermission(ctx, bob, "doc", "plan", bits, "read")
	fmt.Println("bob may read:", read, err)

	stop()
	loops.Wait()

	// Output:
	// local read before any refresh says refresh: true
	// reader refreshes through; alice may share: true <nil>
	// after the signal, alice may write: false <nil>
	// bob may read: false <nil>
}
