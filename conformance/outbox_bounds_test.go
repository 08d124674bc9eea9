package conformance_test

import (
	"context"
	"errors"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
)

// The size rules' broken stores, added to brokenOutboxStores.
func init() {
	brokenOutboxStores["scan-ignores-the-byte-budget"] = brokenOutboxStore{
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: scanPastBudget{st}, Producer: memoryProducer(st)}
		},
		mustCatch:  []string{"ScanStopsAtTheByteBudget"},
		mustPassAt: []string{"ScanHonoursCursorAndLimit", "EnqueueRejectsOversizedPayloads", "ConcurrentProducersAreWalkedWithoutGaps"},
	}
	brokenOutboxStores["oversized-payload-without-the-sentinel"] = brokenOutboxStore{
		wrap: func(st *memory.OutboxStore) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: st, Producer: ownSizeCheck{memoryProducer(st)}}
		},
		mustCatch:  []string{"EnqueueRejectsOversizedPayloads"},
		mustPassAt: []string{"EnqueueRejectsInvalidEntries", "ScanStopsAtTheByteBudget"},
	}
}

// scanPastBudget reads on until the limit, as a store that counts entries
// only would: one pass could then hold BatchSize payloads of any size.
type scanPastBudget struct{ *memory.OutboxStore }

func (b scanPastBudget) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	var out []outbox.Entry
	for len(out) < limit {
		page, err := b.OutboxStore.Scan(ctx, after, limit-len(out))
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			break
		}
		out = append(out, page...)
		after = page[len(page)-1].Cursor()
	}
	return out, nil
}

// ownSizeCheck refuses large payloads with an error of its own, as an
// adapter that checks sizes itself instead of calling outbox.ValidateEntry
// would: callers cannot tell bad input from a failure.
type ownSizeCheck struct{ conformance.OutboxProducer }

func (p ownSizeCheck) Begin(ctx context.Context) (conformance.OutboxTx, error) {
	tx, err := p.OutboxProducer.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return ownSizeCheckTx{tx}, nil
}

type ownSizeCheckTx struct{ conformance.OutboxTx }

func (t ownSizeCheckTx) Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
	if len(payload) > outbox.MaxPayloadBytes {
		return errors.New("payload too large")
	}
	return t.OutboxTx.Enqueue(ctx, id, lane, payload)
}
