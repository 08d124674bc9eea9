package graph_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	locksmemory "github.com/baton-go/baton/locks/memory"
)

// A leader that believes it still leads (its lock provider never told it
// otherwise: a pause, a partition) delivers after a successor with a newer
// token did. The engine refuses it, and the deposed leader settles nothing:
// it neither parks the entry nor records a failure.
func TestDeposedLeader_IsRefusedByTheEngineAndSettlesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e := graphtest.New(t)
	store, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})

	// Two providers that do not know of each other: both grant the leader
	if err != nil {
		t.Fatal(err)
	}
	// lock, A with token 1, B (after four earlier acquisitions) with 5.
	provA, _ := locksmemory.NewProvider(locksmemory.Options{})
	provB, _ := locksmemory.NewProvider(locksmemory.Options{})
	for range 4 {
		l, err := provB.Acquire(ctx, outbox.DefaultLeaderLockName, lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
	}

	arrived, hold := make(chan struct{}, 1), make(chan struct{})
	e.FaultFunc(graphtest.PathInit, func(r *http.Request) (graphtest.Fault, bool) {
		if r.Header.Get(graph.FencingTokenHeader) == "1" {
			select {
			case arrived <- struct{}{}:
			default:
			}
			<-hold // A's request is on the wire while B delivers
		}
		return graphtest.Fault{}, false
	})

	tx, _ := store.Begin(ctx)
	entry := initEntry(t, "d1")
	if err := tx.Enqueue(ctx, entry.ID, entry.Lane, entry.Payload); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	start := func(p lock.Provider) {
		procs, err := graph.StandardProcessors(graph.ProcessorOptions{DeliveryURL: e.URL(), Client: e.Client()})
		if err != nil {
			t.Fatal(err)
		}
		d, err := outbox.NewDriver(outbox.Config{
			Store: store, Locks: p, Processors: procs,
			Notify:    func(context.Context, outbox.Notice) error { return nil },
			IdleDelay: 10 * time.Millisecond, ErrorDelay: 10 * time.Millisecond, LeaderWait: 100 * time.Millisecond,
			RetentionDisabled: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { _ = d.Run(ctx) })
	}

	countedA := &countingProvider{Provider: provA}
	start(countedA)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("leader A's delivery never reached the engine")
	}
	start(provB)
	if _, err := e.WaitDeliveries(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	close(hold)

	deadline := time.Now().Add(10 * time.Second)
	var refused *graphtest.Request
	for refused == nil {
		for _, r := range e.RequestsTo(graphtest.PathInit) {
			if r.FencingToken == 1 {
				refused = &r
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("leader A's request never finished")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if refused.Status != http.StatusConflict {
		t.Fatalf("the engine answered the deposed leader's request (token 1, after token 5) with %d; want 409", refused.Status)
	}
	if ds := e.Deliveries(); len(ds) != 1 || ds[0].FencingToken != 5 {
		t.Fatalf("deliveries %+v; want exactly the successor's, with token 5", ds)
	}
	// A's next term begins only after the refused one ended.
	for countedA.acquired() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("leader A did not step down after the refusal")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if dead, err := store.ListDead(ctx, outbox.ListOptions{}); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters %+v, %v; the deposed leader must not park what it was refused", dead, err)
	}
	st, err := store.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st[outbox.KeyFailedAttempts] != "" || st[outbox.KeyLastError] != "" {
		t.Fatalf("state %v; the deposed leader's refusal was settled as a failure", st)
	}
}

// countingProvider counts the locks it granted.
type countingProvider struct {
	*locksmemory.Provider
	mu sync.Mutex
	n  int
}

func (p *countingProvider) Acquire(ctx context.Context, name string, opts lock.AcquireOptions) (lock.Lock, error) {
	l, err := p.Provider.Acquire(ctx, name, opts)
	if err == nil {
		p.mu.Lock()
		p.n++
		p.mu.Unlock()
	}
	return l, err
}

func (p *countingProvider) acquired() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}
