package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/memory"
)

// A lock guards work that one holder at a time may do; the fencing token
// goes with every write the holder makes.
func ExampleProvider() {
	ctx := context.Background()
	locks, err := memory.NewProvider(memory.Options{})
	if err != nil {
		panic(err)
	}

	l, err := locks.Acquire(ctx, "nightly-report", lock.AcquireOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Println("held with token", l.Token())

	// A second caller that will not wait is told the lock is taken.
	_, err = locks.Acquire(ctx, "nightly-report", lock.AcquireOptions{})
	fmt.Println("second caller:", errors.Is(err, lock.ErrNotAcquired))

	select {
	case <-l.Lost():
		fmt.Println("lost: stop working")
	default:
		fmt.Println("still ours: write, passing the token")
	}

	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	again, _ := locks.Acquire(ctx, "nightly-report", lock.AcquireOptions{})
	fmt.Println("next holder's token", again.Token())
	_ = again.Release(ctx)

	// Output:
	// held with token 1
	// second caller: true
	// still ours: write, passing the token
	// next holder's token 2
}
