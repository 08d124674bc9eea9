package memory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/memory"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newProvider(t *testing.T, opts memory.Options) *memory.Provider {
	t.Helper()
	p, err := memory.NewProvider(opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	conformance.RunLockProvider(t, func(t *testing.T) conformance.LockHarness {
		p := newProvider(t, memory.Options{TTL: 600 * time.Millisecond, SafetyMargin: 100 * time.Millisecond})
		return conformance.LockHarness{
			Provider: p,
			TakeAway: func(_ context.Context, name string) error {
				if !p.TakeAway(name) {
					return errors.New("no hold to take away")
				}
				return nil
			},
		}
	}, conformance.LockFeatures{LossDetection: time.Second})
}

func TestNew_RejectsInvalidOptions(t *testing.T) {
	for name, opts := range map[string]memory.Options{
		"negative TTL":     {TTL: -time.Second},
		"margin too large": {TTL: 3 * time.Second, SafetyMargin: 2 * time.Second},
		"inverted backoff": {Backoff: lock.Backoff{Min: time.Second, Max: time.Millisecond}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := memory.NewProvider(opts); !errors.Is(err, lock.ErrInvalidOptions) {
				t.Fatalf("err = %v, want ErrInvalidOptions", err)
			}
		})
	}
}
