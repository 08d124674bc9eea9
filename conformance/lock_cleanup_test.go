package conformance_test

import (
	"context"
	"testing"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lock"
)

// A lock subtest that stops before its Release (t.Fatal, t.SkipNow) still
// releases what it holds. A provider's lock may keep a resource that the
// harness's cleanup waits for, as a PostgreSQL advisory lock keeps its
// pool's connection: left held, the pool's Close would wait for ever and
// the suite would hang instead of reporting the failure.
func TestRunLockProvider_ReleasesWhatASubtestStoppingEarlyHeld(t *testing.T) {
	skipInChild(t)
	p := newLockProvider(t)
	names := []string{"cleanup/first", "cleanup/second"}
	t.Run("stops before its Release", func(t *testing.T) {
		h := conformance.SetUpLockSubtest(t, func(*testing.T) conformance.LockHarness { return lockHarness(p, p) })
		for i, q := range []lock.Provider{h.Provider, h.Second} {
			if _, err := q.Acquire(context.Background(), names[i], lock.AcquireOptions{}); err != nil {
				t.Fatalf("Acquire(%q): %v", names[i], err)
			}
		}
		t.SkipNow() // ends the subtest as t.Fatal would, without failing this test
	})
	for _, name := range names {
		l, err := p.Acquire(context.Background(), name, lock.AcquireOptions{})
		if err != nil {
			t.Errorf("%q is still held after the subtest that acquired it ended: %v", name, err)
			continue
		}
		if err := l.Release(context.Background()); err != nil {
			t.Errorf("Release(%q): %v", name, err)
		}
	}
}
