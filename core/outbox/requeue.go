package outbox

import (
	"context"
	"fmt"
	"time"
)

// Bulk requeue: the repair after an incident that parked many entries (a
// producer shipped before its processor). RequeueDead applies the rule;
// each adapter's Store.RequeueBatch does one bounded transaction of it.

// DefaultRequeueBatch and MaxRequeueBatch bound RequeueBatch.Limit: one
// transaction holds at most this many dead letters locked.
const (
	DefaultRequeueBatch = 100
	MaxRequeueBatch     = 1000
)

// RequeueFilter chooses the dead letters a bulk requeue takes. The zero
// value takes every dead letter.
type RequeueFilter struct {
	// Lane, when set, takes only dead letters of this lane.
	Lane string
	// WaitingOnly skips dead letters requeued before; without it they are
	// taken, refused and counted (RequeueResult.AlreadyRequeued).
	WaitingOnly bool
	// ParkedSince and ParkedBefore, when set, take only dead letters
	// parked at or after ParkedSince and before ParkedBefore (store's
	// clock).
	ParkedSince, ParkedBefore time.Time
}

// Matches reports whether d is one the filter takes: the rule every
// adapter's RequeueBatch selects by.
func (f RequeueFilter) Matches(d DeadLetter) bool {
	switch {
	case f.Lane != "" && d.Lane != f.Lane:
		return false
	case f.WaitingOnly && !d.RequeuedAs.IsNil():
		return false
	case !f.ParkedSince.IsZero() && d.ParkedAt.Before(f.ParkedSince):
		return false
	case !f.ParkedBefore.IsZero() && !d.ParkedAt.Before(f.ParkedBefore):
		return false
	}
	return true
}

// RequeueBatch is one transaction of a bulk requeue.
type RequeueBatch struct {
	Filter RequeueFilter
	// After continues a bulk requeue: only dead letters after this
	// (xid, id) position, exclusive. The zero cursor starts at the oldest.
	After Cursor
	// Limit bounds the dead letters the batch takes, from 1 to
	// MaxRequeueBatch.
	Limit int
	// DryRun takes and counts them as a requeue would, and writes nothing.
	DryRun bool
}

// Requeued is one dead letter a bulk requeue took, and the entry it became
// (NilID in a dry run, and for one refused as requeued before).
type Requeued struct {
	ID         ID
	XID        uint64
	RequeuedAs ID
}

// RequeueBatchResult is what one RequeueBatch took.
type RequeueBatchResult struct {
	// Requeued lists the dead letters requeued (or, in a dry run, that
	// would be), in (xid, id) order.
	Requeued []Requeued
	// AlreadyRequeued counts the matching dead letters refused because
	// they were requeued before.
	AlreadyRequeued int
	// Last is the position of the last dead letter taken, requeued or
	// refused: the next batch's After. Zero when it took none.
	Last Cursor
	// Taken is how many dead letters the batch took, requeued or refused.
	Taken int
}

// RequeueResult is the outcome of a whole bulk requeue.
type RequeueResult struct {
	Requeued        []Requeued
	AlreadyRequeued int
	Batches         int
	DryRun          bool
}

// RequeueConfig configures RequeueDead.
type RequeueConfig struct {
	Filter RequeueFilter
	// Limit bounds how many dead letters are taken in all, requeued or
	// refused; 0 means no bound.
	Limit int
	// BatchSize is how many one transaction takes; 0 means
	// DefaultRequeueBatch.
	BatchSize int
	DryRun    bool
}

func (c RequeueConfig) withDefaults() RequeueConfig {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultRequeueBatch
	}
	return c
}

func (c RequeueConfig) validate() error {
	switch {
	case c.Limit < 0:
		return fmt.Errorf("baton/outbox: requeue: Limit is %d; it must not be negative (0 for no bound)", c.Limit)
	case c.BatchSize < 1 || c.BatchSize > MaxRequeueBatch:
		return fmt.Errorf("baton/outbox: requeue: BatchSize is %d; it must be from 1 to %d (0 for %d)", c.BatchSize, MaxRequeueBatch, DefaultRequeueBatch)
	case !c.Filter.ParkedSince.IsZero() && !c.Filter.ParkedBefore.IsZero() && !c.Filter.ParkedSince.Before(c.Filter.ParkedBefore):
		return fmt.Errorf("baton/outbox: requeue: ParkedSince %v is not before ParkedBefore %v; nothing could match", c.Filter.ParkedSince, c.Filter.ParkedBefore)
	}
	return nil
}

// CheckRequeueBatch is the argument rule of Store.RequeueBatch, which every
// adapter applies before touching anything.
func CheckRequeueBatch(b RequeueBatch) error {
	if b.Limit < 1 || b.Limit > MaxRequeueBatch {
		return fmt.Errorf("the limit is %d; it must be from 1 to %d", b.Limit, MaxRequeueBatch)
	}
	return nil
}

// RequeueDead requeues the dead letters the filter takes, oldest (xid, id)
// first, in batches of one transaction each, so the replayed entries walk
// in the relative order the originals had. A dead letter requeued before
// is refused and counted, never an error. On an error the batches before
// it stay applied; the result says what they did.
func RequeueDead(ctx context.Context, s Store, cfg RequeueConfig) (RequeueResult, error) {
	cfg = cfg.withDefaults()
	res := RequeueResult{DryRun: cfg.DryRun}
	if err := cfg.validate(); err != nil {
		return res, err
	}
	var after Cursor
	taken := 0
	for cfg.Limit == 0 || taken < cfg.Limit {
		n := cfg.BatchSize
		if cfg.Limit > 0 {
			n = min(n, cfg.Limit-taken)
		}
		b, err := s.RequeueBatch(ctx, RequeueBatch{Filter: cfg.Filter, After: after, Limit: n, DryRun: cfg.DryRun})
		if err != nil {
			return res, fmt.Errorf("baton/outbox: requeue batch %d: %w", res.Batches+1, err)
		}
		if b.Taken == 0 {
			break
		}
		res.Batches++
		res.Requeued = append(res.Requeued, b.Requeued...)
		res.AlreadyRequeued += b.AlreadyRequeued
		taken += b.Taken
		after = b.Last
		if b.Taken < n {
			break
		}
	}
	return res, nil
}
