package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/baton-go/baton/core/lock"
)

// retentionLoop sweeps every RetentionInterval under its own lock, which a
// different instance than the driver's leader may hold. It deletes only
// delivered (and parked) entries at or below the cursor and requeued dead
// letters, both older than RetentionWindow: the walk reads only above the
// cursor, so the two never touch the same rows. Each delete statement is
// bounded by RetentionBatchSize; one sweep repeats it, with
// RetentionBatchPause between batches, until it is caught up or its
// RetentionSweepBudget is spent, so retention keeps up with producers far
// beyond one batch per interval.
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

	st, err := withinValue(ctx, cfg.StoreTimeout, cfg.Store.State)
	if err != nil {
		cfg.Logger.Warn("outbox retention: reading the cursor failed", "err", err)
		return
	}
	// Whichever source settled them: rows carry no log position, so the
	// log's settled rows are those below its last passed mark.
	cur, err := SettledCursor(st)
	if err != nil {
		cfg.Logger.Warn("outbox retention: reading the cursor failed", "err", err)
		return
	}
	end := time.Now().Add(cfg.RetentionSweepBudget)
	if !cur.IsZero() {
		d.sweepTable(ctx, lk, end, "delivered entries", func(ctx context.Context) (int, error) {
			return cfg.Store.DeleteDelivered(ctx, cur, cfg.RetentionWindow, cfg.RetentionBatchSize)
		})
	}
	d.sweepTable(ctx, lk, end, "requeued dead letters", func(ctx context.Context) (int, error) {
		return cfg.Store.DeleteRequeued(ctx, cfg.RetentionWindow, cfg.RetentionBatchSize)
	})
}

// sweepTable runs one table's bounded delete in batches until a batch
// finds fewer than RetentionBatchSize rows (caught up), the budget ends at
// end, or the lock can no longer be trusted. The first batch always runs.
func (d *Driver) sweepTable(ctx context.Context, lk lock.Lock, end time.Time, what string, batch func(context.Context) (int, error)) {
	cfg := &d.cfg
	deleted, batches := 0, 0
	defer func() {
		if deleted > 0 {
			cfg.Logger.Info("outbox retention: deleted "+what, "count", deleted, "batches", batches)
		}
	}()
	for {
		if !lk.Trusted() {
			cfg.Logger.Warn("outbox retention: its lock can no longer be trusted; stopping the sweep", "lock", lk.Name())
			return
		}
		n, err := withinValue(ctx, cfg.StoreTimeout, batch)
		batches++
		deleted += n
		switch {
		case err != nil:
			if ctx.Err() == nil {
				cfg.Logger.Warn("outbox retention: deleting "+what+" failed", "err", err)
			}
			return
		case n < cfg.RetentionBatchSize:
			return // caught up
		case !time.Now().Before(end):
			cfg.Logger.Info("outbox retention: the sweep's budget is spent; the next sweep goes on", "what", what, "budget", cfg.RetentionSweepBudget)
			return
		}
		if !sleep(ctx, nil, cfg.RetentionBatchPause) {
			return
		}
	}
}
