package conformance_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
)

// countingStore is an adapter of its own: a lease.Store that counts the
// heartbeats it passes on to the memory store. It embeds the interface,
// not the memory store, so the memory store's WatchReleases and List stay
// hidden: this adapter announces no releases and lists no roles, and its
// features say so.
type countingStore struct {
	lease.Store
	heartbeats atomic.Int64
}

func (s *countingStore) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	s.heartbeats.Add(1)
	return s.Store.Heartbeat(ctx, req)
}

func TestCountingStore_Conformance(t *testing.T) {
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		// A store of its own for every subtest: the subtests run in
		// parallel, and each starts from nothing.
		memLeases, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st := &countingStore{Store: memLeases}
		t.Cleanup(func() { t.Logf("%d heartbeats", st.heartbeats.Load()) })
		return conformance.LeaseHarness{Store: st}
	}, conformance.LeaseFeatures{NoReleaseWatch: true, NoList: true})
}
