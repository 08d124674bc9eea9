package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Every call the driver and its retention loop make to the store (Store,
// LogStore, LogReader, Counter) runs under a deadline of its own,
// Config.StoreTimeout. A call on a connection whose packets are dropped
// does not fail: it blocks until the operating system gives up on the
// connection, many minutes later, and a pass blocked in it counts no
// failure, so the stuck notice would not come. Under a deadline the call
// fails like any other: the pass records it in the failing streak, the
// notice comes after StuckAfter, and the next pass, ErrorDelay later, tries
// again and delivers as soon as the store answers. A watchdog reading the
// streak beside the pass would raise the notice too, but would leave the
// pass blocked and the outbox stalled until the operating system acted.
//
// The leader lock is no store call and has no such deadline: Acquire waits
// LeaderWait, and the provider keeps the lock's own time (lock.Lock.Trusted
// and Lost); a pass that fails on a store call keeps its leadership.

// within runs call under a deadline of limit.
func within(ctx context.Context, limit time.Duration, call func(context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	return gaveUp(ctx, cctx, limit, call(cctx))
}

// withinValue is within for a call that returns a value.
func withinValue[T any](ctx context.Context, limit time.Duration, call func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	v, err := call(cctx)
	return v, gaveUp(ctx, cctx, limit, err)
}

// gaveUp says so in err when the call failed because its own deadline
// passed, rather than because ctx ended.
func gaveUp(ctx, cctx context.Context, limit time.Duration, err error) error {
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("the store did not answer within StoreTimeout (%v): %w", limit, err)
	}
	return err
}
