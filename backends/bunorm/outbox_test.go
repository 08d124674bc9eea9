package bunorm

import (
	"context"
	"database/sql"
	"testing"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
)

func mustOutboxStore(t testing.TB, db bun.IDB, opts OutboxStoreOptions) *OutboxStore {
	t.Helper()
	st, err := NewOutboxStore(context.Background(), db, opts)
	if err != nil {
		t.Fatalf("NewOutboxStore: %v", err)
	}
	return st
}

// bunOutboxTx is a producer transaction of the conformance suite: a bun.Tx
// with Enqueue on it, as an application would write it.
type bunOutboxTx struct{ tx bun.Tx }

func (p bunOutboxTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	return Enqueue(ctx, p.tx, id, lane, payload)
}
func (p bunOutboxTx) Commit(context.Context) error   { return p.tx.Commit() }
func (p bunOutboxTx) Rollback(context.Context) error { return p.tx.Rollback() }

func bunOutboxProducer(db *bun.DB) conformance.OutboxProducer {
	return conformance.OutboxProducerFunc(func(ctx context.Context) (conformance.OutboxTx, error) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{})
		if err != nil {
			return nil, err
		}
		return bunOutboxTx{tx: tx}, nil
	})
}

func TestOutboxStore_Conformance(t *testing.T) {
	conformance.RunOutboxStore(t, func(t *testing.T) conformance.OutboxHarness {
		_, db := bunEnv(t)
		return conformance.OutboxHarness{
			Store:    mustOutboxStore(t, db, OutboxStoreOptions{}),
			Producer: bunOutboxProducer(db),
		}
	}, conformance.OutboxFeatures{})
}
