package faults

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/outboxtest"
)

// logOracle is what the log scenario checks against: a test_decoding slot
// created once the log has taken over, before the producers commit.
type logOracle struct {
	pool   *pgxpool.Pool
	slot   string
	schema string
}

// newLogOracle waits until a driver has switched the outbox to the log,
// then creates the oracle's slot.
func newLogOracle(t *testing.T, url, schema string) *logOracle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for {
		var source string
		err := pool.QueryRow(ctx, `SELECT coalesce((SELECT value FROM baton_outbox_state WHERE key = $1), '')`, outbox.KeySource).Scan(&source)
		if err == nil && source == outbox.SourceLogical {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the drivers did not switch the outbox to the log: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	o := &logOracle{pool: pool, slot: schema + "_oracle", schema: schema}
	if err := outboxtest.CreateOracle(ctx, pool, o.slot); err != nil {
		t.Fatal(err)
	}
	return o
}

// check: taken in the order they happened, the first deliveries follow
// commit order; and the slot has confirmed nothing past the settled log
// position (a deposed leader cannot confirm what it did not settle).
func (o *logOracle) check(t *testing.T, es []event) violations {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var v violations
	order, err := outboxtest.CommitOrder(ctx, o.pool, o.slot, o.schema)
	if err != nil {
		v.add("the oracle slot could not be read: %v", err)
		return v
	}
	rank := make(map[string]int, len(order))
	for i, id := range order {
		rank[id.String()] = i
	}
	prev, prevID := -1, ""
	for _, e := range firstDeliveries(es) {
		r, ok := rank[e.ID]
		if !ok {
			continue // rolled back: checkRolledBackNotDelivered says so
		}
		if r < prev {
			v.add("entry %s first delivered by %s after entry %s, which committed later", e.ID, e.Child, prevID)
		}
		prev, prevID = r, e.ID
	}
	var confirmed, settled string
	err = o.pool.QueryRow(ctx, `SELECT (pg_wal_lsn_diff(confirmed_flush_lsn, '0/0'))::bigint::text FROM pg_replication_slots WHERE slot_name = $1`, o.schema).Scan(&confirmed)
	if err == nil {
		err = o.pool.QueryRow(ctx, `SELECT value FROM baton_outbox_state WHERE key = $1`, outbox.KeyLogLSN).Scan(&settled)
	}
	if err != nil {
		v.add("the slot's confirmed position or the settled one could not be read: %v", err)
		return v
	}
	c, _ := strconv.ParseUint(confirmed, 10, 64)
	s, _ := strconv.ParseUint(settled, 10, 64)
	if c > s {
		v.add("the slot confirmed %s, past the settled log position %s", lsnText(c), lsnText(s))
	}
	t.Logf("figure outbox log   %d entries in commit order; slot confirmed %s, settled %s", len(order), lsnText(c), lsnText(s))
	return v
}

func lsnText(n uint64) string { return fmt.Sprintf("%X/%X", n>>32, uint32(n)) }
