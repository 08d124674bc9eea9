package pgxstore_test

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/workrow"
)

// Delivery is a row of the application's own outbound e-mail table:
//
//	CREATE TABLE deliveries (
//	    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
//	    created_at   timestamptz NOT NULL DEFAULT now(),
//	    recipient    text NOT NULL,
//	    body         text,
//	    attempts     integer NOT NULL DEFAULT 0,
//	    sent_at      timestamptz,
//	    parked_at    timestamptz,
//	    last_error   text,
//	    lock_id      uuid,
//	    locked_until timestamptz
//	) WITH (fillfactor = 90);
type Delivery struct {
	ID        int64   `db:"id"`
	Recipient string  `db:"recipient"`
	Body      *string `db:"body"`
	Attempts  int     `db:"attempts"`
}

// Deliveries are sent by a Worker on every instance; the claim makes that
// safe. The example needs a database, so it is compiled but not run.
func ExampleNewWorkRows() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	live := workrow.And(workrow.IsNull("sent_at"), workrow.IsNull("parked_at"))
	order := []workrow.Order{workrow.Asc("created_at")}

	// In a migration: the claim index, partial over the live rows.
	ddl, err := pgxstore.ClaimIndex{Table: "deliveries", Order: order, Live: live}.DDL()
	if err != nil {
		panic(err)
	}
	_ = ddl // CREATE INDEX IF NOT EXISTS "deliveries_claim" ON "deliveries" ("created_at", "id") WHERE ...

	store, err := pgxstore.NewWorkRows[int64](pool, pgxstore.WorkRowsOptions[Delivery]{
		Table: "deliveries", Live: live, Order: order,
	})
	if err != nil {
		panic(err)
	}
	if err := store.Check(ctx); err != nil { // readiness: columns and claim index
		panic(err)
	}

	worker, err := workrow.NewWorker(workrow.Config[int64, Delivery]{
		Store:       store,
		Eligible:    live,
		Order:       order,
		OnClaim:     []workrow.Set{workrow.Add("attempts", 1)},
		Attempt:     func(d Delivery) int { return d.Attempts },
		Lease:       2 * time.Minute, // well above one batch's worth of calls
		Backoff:     workrow.Steps{time.Minute, 15 * time.Minute, time.Hour, 12 * time.Hour},
		MaxAttempts: 8,
		OnComplete: func(now time.Time) []workrow.Set {
			return []workrow.Set{workrow.Assign("sent_at", now), workrow.Assign("body", nil)}
		},
		OnFail: func(_ time.Time, err error) []workrow.Set {
			return []workrow.Set{workrow.Assign("last_error", err.Error())}
		},
		OnPark: func(now time.Time, err error) []workrow.Set {
			return []workrow.Set{workrow.Assign("parked_at", now), workrow.Assign("last_error", err.Error())}
		},
		Handler: func(ctx context.Context, c workrow.Claimed[int64, Delivery]) workrow.Outcome {
			// No lock and no transaction are held here. Send with c.ID as
			// the idempotency key: delivery is at least once.
			retryAfter, err := send(ctx, c.ID, c.Row)
			if err != nil {
				return workrow.Fail(err).RetryAfter(retryAfter)
			}
			return workrow.Complete()
		},
		Logger: slog.Default(),
	})
	if err != nil {
		panic(err)
	}
	_ = worker.Run(ctx) // until ctx ends; run several for more throughput
}

func send(context.Context, int64, Delivery) (time.Duration, error) { return 0, nil }
