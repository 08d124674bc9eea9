package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lease"
)

// Two instances compete for one role; the holder does the role's work in
// cycles, each gated by IsHeld, and hands over when its Run's ctx ends.
func ExampleManager() {
	store, err := memory.NewLeaseStore(memory.LeaseStoreOptions{}) // pgxstore.NewLeaseStore in production
	if err != nil {
		panic(err)
	}

	// start runs an instance's manager until stop is called.
	start := func(id string) (stop func(), l *lease.Lease) {
		m, err := lease.NewManager(lease.Config{Store: store, InstanceID: id, Address: "http://" + id + ":8080"})
		if err != nil {
			panic(err)
		}
		l, err = m.Register("maintenance")
		if err != nil {
			panic(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				panic(err)
			}
		}, l
	}
	stopA, la := start("a")
	waitUntil(la.IsHeld)
	stopB, lb := start("b")
	defer stopB()
	waitUntil(func() bool { return lb.CurrentHolder() != "" })

	for _, l := range []*lease.Lease{la, lb} {
		if l.IsHeld() { // gate every cycle, never "start leading" once
			fmt.Println("runs the maintenance cycle with fencing token", l.Token())
		} else {
			fmt.Println("stands by; holder is", l.CurrentHolderAddress())
		}
	}

	stopA() // graceful: Run releases the role on its way out
	waitUntil(lb.IsHeld)
	fmt.Println("after a stopped, b holds with token", lb.Token())

	// Output:
	// runs the maintenance cycle with fencing token 1
	// stands by; holder is http://a:8080
	// after a stopped, b holds with token 2
}

func waitUntil(cond func() bool) {
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			panic("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
