package bunstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/internal/testenv"
)

// The outbox's logical source on bun, on a server with wal_level =
// logical: the same statements and reader as the pgx adapter's.
func TestOutboxLogStore_Conformance(t *testing.T) {
	conformance.RunOutboxLog(t, func(t *testing.T) conformance.OutboxLogHarness {
		env := testenv.LogicalPostgres(t)
		db := openBun(t, env)
		ctx := testContext(t)
		if err := Migrate(ctx, db, SchemaOptions{}); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		b := make([]byte, 5)
		_, _ = rand.Read(b)
		name := "baton_bun_" + hex.EncodeToString(b)
		st, err := NewOutboxLogStore(ctx, db, OutboxLogOptions{ConnString: env.URL, Slot: name, Publication: name, SlotCreateTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, ok, err := st.SlotStatus(ctx); err == nil && ok {
				if err := st.DropSlot(ctx, true); err != nil {
					t.Errorf("drop the slot: %v", err)
				}
			}
			_, _ = db.ExecContext(ctx, "DROP PUBLICATION IF EXISTS "+name)
		})
		return conformance.OutboxLogHarness{Log: st, Store: st, Producer: bunOutboxProducer(db)}
	}, conformance.OutboxLogFeatures{})
}

func TestNewOutboxLogStore_NeedsAConnectionString(t *testing.T) {
	_, err := NewOutboxLogStore(context.Background(), offlineDB(t), OutboxLogOptions{})
	if err == nil || !strings.Contains(err.Error(), "ConnString") {
		t.Fatalf("NewOutboxLogStore without ConnString: err = %v, want one naming ConnString", err)
	}
}
