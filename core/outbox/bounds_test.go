package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/outbox"
)

// jsonString is a payload of exactly n bytes: one JSON string.
func jsonString(n int) []byte {
	return []byte(`"` + strings.Repeat("a", n-2) + `"`)
}

const (
	maxPayload = outbox.MaxPayloadBytes
	scanBudget = outbox.MaxScanBytes
)

func TestValidateEntry_RefusesAPayloadAboveTheMaximum(t *testing.T) {
	if err := outbox.ValidateEntry(outbox.NewID(), "lane", jsonString(maxPayload)); err != nil {
		t.Errorf("a payload of exactly the maximum: %v", err)
	}
	err := outbox.ValidateEntry(outbox.NewID(), "lane", jsonString(maxPayload+1))
	if !errors.Is(err, outbox.ErrInvalidEntry) || !strings.Contains(err.Error(), "1048577 bytes") {
		t.Errorf("a payload one byte too large: %v; want ErrInvalidEntry giving its size", err)
	}
}

func TestEnqueue_AnOversizedPayloadWritesNothing(t *testing.T) {
	s, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, _ := s.Begin(ctx)
	if err := tx.Enqueue(ctx, outbox.NewID(), "lane", jsonString(maxPayload+1)); !errors.Is(err, outbox.ErrInvalidEntry) {
		t.Fatalf("Enqueue of an oversized payload: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if es, err := s.Scan(ctx, outbox.Cursor{}, 10); err != nil || len(es) != 0 {
		t.Fatalf("after the refused enqueue the outbox holds %d entries (%v)", len(es), err)
	}
}

// sizeRecorder delivers everything and records the payload bytes of each
// pass (one run per pass: one lane).
type sizeRecorder struct {
	mu     sync.Mutex
	passes []int
	n      int
}

func (s *sizeRecorder) Lane() string { return "big" }

func (s *sizeRecorder) Deliver(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total := 0
	for _, e := range run {
		total += len(e.Payload)
	}
	s.passes = append(s.passes, total)
	s.n += len(run)
	return all(len(run), outbox.Delivered()), nil
}

// Both sources keep the budget: the walk's Scan (O8) and the log's Read
// (R19).
func TestDriver_APassHoldsAtMostTheScanBudgetAndTheNextFollowsAtOnce(t *testing.T) {
	for _, logical := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t)
			const entries = 20
			ctx := context.Background()
			rec := &sizeRecorder{}
			cfg := r.config(rec)
			cfg.BatchSize = 100 // far more than fit in the budget
			if logical {
				cfg.Log = r.store.Log()
				r.run(cfg)
				synctest.Wait() // the log has taken over: it delivers what commits from now on
			}
			tx, _ := r.store.Begin(ctx)
			for range entries {
				if err := tx.Enqueue(ctx, outbox.NewID(), "big", jsonString(maxPayload-64)); err != nil {
					t.Fatal(err)
				}
			}
			tx.Commit(ctx)
			if !logical {
				r.run(cfg)
			}
			synctest.Wait()
			rec.mu.Lock()
			defer rec.mu.Unlock()
			// Delivered at once: a pass cut short by bytes is not an idle one.
			if rec.n != entries {
				t.Fatalf("logical=%v: %d of %d entries delivered before any delay (passes %v): a pass cut by the byte budget waited IdleDelay",
					logical, rec.n, entries, rec.passes)
			}
			for i, b := range rec.passes {
				if b > scanBudget+maxPayload {
					t.Errorf("logical=%v: pass %d held %d payload bytes, more than the scan budget plus one payload (%d)", logical, i, b, scanBudget+maxPayload)
				}
			}
			if len(rec.passes) < 3 {
				t.Errorf("logical=%v: %d passes for %d MiB of payloads, want them split by the budget", logical, len(rec.passes), entries)
			}
		})
	}
}
