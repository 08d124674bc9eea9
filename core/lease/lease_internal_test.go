package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Token must never return the token of a term that was not held at any
// moment of the call. The writer alternates between applying a term that
// has already lapsed (odd tokens: never held for a single instant) and a
// held term (even tokens); a reader that ever gets an odd token read the
// token of one term and the validity of another.
func TestLease_TokenNeverReturnsATermThatWasNotHeld(t *testing.T) {
	m, err := NewManager(Config{Store: nopStore{}, InstanceID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	m.base = time.Now().Add(-time.Hour) // so a lapsed term's validity is a positive past instant
	l := newLease(m, "r")
	lapsed := -m.cfg.LeaseDuration // a start so old that the term ended before it was applied
	const terms = 300_000

	var stop atomic.Bool
	var bad atomic.Uint64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				if tok := l.Token(); tok%2 == 1 {
					bad.Store(tok)
					stop.Store(true)
				}
			}
		})
	}
	for i := uint64(0); i < terms && !stop.Load(); i++ {
		now := time.Since(m.base)
		l.apply(Record{Role: "r", Held: true, Token: 2*i + 1}, true, now+lapsed)
		l.apply(Record{Role: "r", Held: true, Token: 2*i + 2}, true, now)
	}
	stop.Store(true)
	wg.Wait()
	if tok := bad.Load(); tok != 0 {
		t.Fatalf("Token returned %d, the token of a term that had lapsed before it was applied", tok)
	}
}

// nopStore satisfies Store for tests that drive a Lease directly.
type nopStore struct{}

func (nopStore) Heartbeat(context.Context, HeartbeatRequest) ([]Record, error) { return nil, nil }
func (nopStore) Release(context.Context, string, string, uint64) (bool, error) { return false, nil }
func (nopStore) Read(context.Context, []string) ([]Record, error)              { return nil, nil }
