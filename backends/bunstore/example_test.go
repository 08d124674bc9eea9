package bunstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/migrate"

	"github.com/baton-go/baton/backends/bunstore"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
	lockmem "github.com/baton-go/baton/locks/memory"
)

// Delivery is the example service's work table: outbound webhooks. It
// embeds bunstore.LockColumns, so CreateTable gives it lock_id and
// locked_until.
type Delivery struct {
	bun.BaseModel `bun:"table:deliveries,alias:d"`

	ID          int64        `bun:"id,pk,autoincrement"`
	URL         string       `bun:"url,notnull"`
	CreatedAt   time.Time    `bun:"created_at,notnull,nullzero,default:now()"`
	Attempts    int          `bun:"attempts,notnull,default:0"`
	CompletedAt bun.NullTime `bun:"completed_at"`
	LastError   string       `bun:"last_error,nullzero"`
	bunstore.LockColumns
}

// deliveryRows describes the work table to baton: live rows are the ones
// not completed, queued by creation time.
var deliveryRows = bunstore.WorkRowsOptions{
	Live:  workrow.IsNull("completed_at"),
	Order: []workrow.Order{workrow.Asc("created_at")},
}

// createDelivery writes a delivery and announces it through the outbox, in
// one transaction: the entry exists exactly when the delivery does.
func createDelivery(ctx context.Context, db *bun.DB, url string) error {
	return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		d := &Delivery{URL: url}
		if _, err := tx.NewInsert().Model(d).Exec(ctx); err != nil { // first write: takes the xid
			return err
		}
		payload := fmt.Sprintf(`{"delivery": %d, "url": %q}`, d.ID, url)
		return bunstore.Enqueue(ctx, tx, outbox.NewID(), "deliveries.created", []byte(payload))
	})
}

// runExample is the whole service, once: migrate, write three deliveries,
// relay their outbox entries, then work the deliveries off their table.
func runExample(ctx context.Context, db *bun.DB, out io.Writer) error {
	// 1. Migrations: baton's tables and the service's, in one history.
	migrator := migrate.NewMigrator(db, Migrations)
	if err := migrator.Init(ctx); err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx); err != nil {
		return err
	}

	// 2. Writes: each delivery and its outbox entry commit together.
	for _, url := range []string{"https://a.example/hook", "https://b.example/hook", "https://c.example/hook"} {
		if err := createDelivery(ctx, db, url); err != nil {
			return err
		}
	}

	// 3. The outbox relay: one leader (a memory lock here: one process;
	// locks/pglock or locks/redis across nodes) walks the entries in order.
	store, err := bunstore.NewOutboxStore(ctx, db, bunstore.OutboxStoreOptions{})
	if err != nil {
		return err
	}
	locks, err := lockmem.NewProvider(lockmem.Options{})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var announced []string
	all := make(chan struct{})
	driver, err := outbox.NewDriver(outbox.Config{
		Store: store, Locks: locks, RetentionDisabled: true, IdleDelay: 20 * time.Millisecond,
		Notify: func(context.Context, outbox.Notice) error { return nil },
		Processors: []outbox.Processor{outbox.ProcessorFunc{LaneName: "deliveries.created",
			Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
				outcomes := make([]outbox.Outcome, len(run))
				mu.Lock()
				defer mu.Unlock()
				for i, e := range run {
					announced = append(announced, string(e.Payload))
					outcomes[i] = outbox.Delivered()
				}
				if len(announced) == 3 {
					close(all)
				}
				return outcomes, nil
			}}},
	})
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	relayDone := make(chan error, 1)
	go func() { relayDone <- driver.Run(relayCtx) }()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
	}
	stopRelay()
	if err := <-relayDone; err != nil {
		return err
	}
	mu.Lock()
	fmt.Fprintf(out, "announced %d deliveries\n", len(announced))
	mu.Unlock()

	// 4. The work rows: claim with bun expressions, deliver, finalize.
	rows, err := bunstore.NewWorkRows[int64, Delivery](ctx, db, deliveryRows)
	if err != nil {
		return err
	}
	now := time.Now()
	claim := bunstore.ClaimQuery{
		LockID: workrow.NewLockID(), Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 10,
		Where: func(q bun.QueryBuilder) bun.QueryBuilder { return q.Where("?TableAlias.attempts < ?", 5) },
		Set:   func(q *bun.UpdateQuery) *bun.UpdateQuery { return q.Set("attempts = ?TableAlias.attempts + 1") },
	}
	claimed, err := rows.ClaimWith(ctx, claim)
	if err != nil {
		return err
	}
	for _, c := range claimed {
		// The webhook call goes here, with no transaction or row lock held.
		owned, err := rows.FinalizeWith(ctx, claim.LockID, c.ID, time.Time{}, func(q *bun.UpdateQuery) *bun.UpdateQuery {
			return q.Set("completed_at = ?", time.Now())
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "delivered %s (attempt %d, still ours: %t)\n", c.Row.URL, c.Row.Attempts, owned)
	}
	var left int64
	if left, err = db.NewSelect().Model((*Delivery)(nil)).Where("completed_at IS NULL").Count(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d deliveries left\n", left)
	return nil
}

// Example is a service on bun end to end: bun migrations that include
// baton's tables, a delivery written together with its outbox entry, the
// relay, and a work table claimed and finalized with bun expressions. It
// needs a database (DATABASE_URL); TestExample runs the same code against
// the test server and checks its output.
func Example() {
	ctx := context.Background()
	// bun on pgx's database/sql driver: baton's statements go to it with
	// their values as parameters, and the lease watcher LISTENs on it.
	sqldb, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	db := bun.NewDB(sqldb, pgdialect.New())
	defer db.Close()
	if err := runExample(ctx, db, os.Stdout); err != nil {
		fmt.Println(err)
	}
}

// migrateRollbackAll rolls back the last migration group: both migrations,
// which ran together.
func migrateRollbackAll(ctx context.Context, db *bun.DB) (*migrate.MigrationGroup, error) {
	return migrate.NewMigrator(db, Migrations).Rollback(ctx)
}
