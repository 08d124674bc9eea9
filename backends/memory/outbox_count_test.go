package memory_test

import (
	"testing"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/internal/outboxtest"
)

func TestOutboxStore_CountsThePendingEntriesAndTheDeadLettersWaiting(t *testing.T) {
	st, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	outboxtest.CheckCounter(t, t.Context(), st, outboxHarness(st).Producer)
}
