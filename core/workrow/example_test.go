package workrow_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/workrow"
)

// email is a row of an application's outbound e-mail table.
type email struct {
	ID        int64
	To        string
	Attempts  int
	SentAt    *time.Time
	LastError *string
}

// A worker delivers queued e-mails: one batch is claimed, every row is sent
// with no lock or transaction held, and the outcomes are finalized
// together. A failed send is retried after the ladder's delay, or after the
// remote side's Retry-After when that is longer.
func ExampleWorker() {
	ctx := context.Background()
	// In production: pgxstore.NewWorkRows[int64, email](pool, ...).
	store, err := memory.NewWorkRowStore[int64, email](memory.WorkRowStoreOptions{Live: workrow.IsNull("sent_at")})
	if err != nil {
		panic(err)
	}
	err = store.Insert(ctx,
		email{ID: 1, To: "ada@example.com"},
		email{ID: 2, To: "busy@example.com"},
		email{ID: 3, To: "grace@example.com"})
	if err != nil {
		panic(err)
	}

	send := func(ctx context.Context, e email) (retryAfter time.Duration, err error) {
		if e.To == "busy@example.com" {
			return 10 * time.Minute, errors.New("421 too many connections")
		}
		return 0, nil // use e.ID as the idempotency key of the remote call
	}

	w, err := workrow.NewWorker(workrow.Config[int64, email]{
		Store:    store,
		Eligible: workrow.And(workrow.IsNull("sent_at"), workrow.Lt("attempts", 8)),
		Order:    []workrow.Order{workrow.Asc("id")},
		OnClaim:  []workrow.Set{workrow.Add("attempts", 1)}, // counted even if the worker dies mid-call
		Attempt:  func(e email) int { return e.Attempts },
		Backoff:  workrow.Steps{time.Minute, 15 * time.Minute, time.Hour},
		OnComplete: func(now time.Time) []workrow.Set {
			return []workrow.Set{workrow.Assign("sent_at", now), workrow.Assign("last_error", nil)}
		},
		OnFail: func(_ time.Time, err error) []workrow.Set {
			return []workrow.Set{workrow.Assign("last_error", err.Error())}
		},
		Handler: func(ctx context.Context, c workrow.Claimed[int64, email]) workrow.Outcome {
			retryAfter, err := send(ctx, c.Row)
			if err != nil {
				return workrow.Fail(err).RetryAfter(retryAfter)
			}
			return workrow.Complete()
		},
	})
	if err != nil {
		panic(err)
	}

	start := time.Now()
	n, err := w.RunBatch(ctx) // Run(ctx) loops over batches until ctx ends
	if err != nil {
		panic(err)
	}
	fmt.Println("claimed", n)
	for id := int64(1); id <= 3; id++ {
		r, _, err := store.Row(ctx, id)
		if err != nil {
			panic(err)
		}
		e, visible := r.Row, r.LockedUntil
		switch {
		case e.SentAt != nil:
			fmt.Printf("%s: sent on attempt %d\n", e.To, e.Attempts)
		default:
			fmt.Printf("%s: %s; retried in about %v\n", e.To, *e.LastError, visible.Sub(start).Round(time.Minute))
		}
	}
	// Output:
	// claimed 3
	// ada@example.com: sent on attempt 1
	// busy@example.com: 421 too many connections; retried in about 10m0s
	// grace@example.com: sent on attempt 1
}
