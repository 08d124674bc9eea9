package pgxstore

import (
	"testing"

	"github.com/baton-go/baton/internal/outboxtest"
	"github.com/baton-go/baton/internal/testenv"
)

func TestOutboxStore_CountsThePendingEntriesAndTheDeadLettersWaiting(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	outboxtest.CheckCounter(t, ctx, mustOutboxStore(t, env.Pool, OutboxStoreOptions{}), pgxOutboxProducer(env.Pool, Enqueue))
}
