package bunstore

import (
	"testing"

	"github.com/baton-go/baton/internal/outboxtest"
)

func TestOutboxStore_CountsThePendingEntriesAndTheDeadLettersWaiting(t *testing.T) {
	_, db := bunEnv(t)
	outboxtest.CheckCounter(t, testContext(t), mustOutboxStore(t, db, OutboxStoreOptions{}), bunOutboxProducer(db))
}
