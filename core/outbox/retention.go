package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/baton-go/baton/core/lock"
)

// retentionLoop sweeps every RetentionInterval under its own lock, which a
// different instance than the driver's leader may hold. It deletes only
// delivered entries at or below the cursor and requeued dead letters, both
// older than RetentionWindow and at most RetentionBatchSize per table: the
// walk reads only above the cursor, so the two never touch the same rows.
func (d *Driver) retentionLoop(ctx context.Context) {
	for {
		d.sweepOnce(ctx)
		if !sleep(ctx, nil, d.cfg.RetentionInterval) {
			return
		}
	}
}

func (d *Driver) sweepOnce(ctx context.Context) {
	cfg := &d.cfg
	lk, err := cfg.Locks.Acquire(ctx, cfg.RetentionLockName, lock.AcquireOptions{})
	if err != nil {
		if !errors.Is(err, lock.ErrNotAcquired) && ctx.Err() == nil {
			cfg.Logger.Warn("outbox retention: acquiring its lock failed", "lock", cfg.RetentionLockName, "err", err)
		}
		return // another instance sweeps this interval
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = lk.Release(rctx)
	}()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() { // owned: ends with ctx, cancelled on return
		select {
		case <-lk.Lost():
			cancel()
		case <-ctx.Done():
		}
	}()

	st, err := cfg.Store.State(ctx)
	if err != nil {
		cfg.Logger.Warn("outbox retention: reading the cursor failed", "err", err)
		return
	}
	cur, err := CursorFromState(st)
	if err != nil {
		cfg.Logger.Warn("outbox retention: reading the cursor failed", "err", err)
		return
	}
	if !cur.IsZero() {
		n, err := cfg.Store.DeleteDelivered(ctx, cur, cfg.RetentionWindow, cfg.RetentionBatchSize)
		if err != nil {
			cfg.Logger.Warn("outbox retention: deleting delivered entries failed", "err", err)
		} else if n > 0 {
			cfg.Logger.Info("outbox retention: deleted delivered entries", "count", n)
		}
	}
	n, err := cfg.Store.DeleteRequeued(ctx, cfg.RetentionWindow, cfg.RetentionBatchSize)
	if err != nil {
		cfg.Logger.Warn("outbox retention: deleting requeued dead letters failed", "err", err)
	} else if n > 0 {
		cfg.Logger.Info("outbox retention: deleted requeued dead letters", "count", n)
	}
}
