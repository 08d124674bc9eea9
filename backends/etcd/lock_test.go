package etcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/etcd"
	"github.com/baton-go/baton/backends/etcd/internal/etcdtest"
	"github.com/baton-go/baton/conformance"
)

// Lock timings of the tests: a short session, refreshed every second.
const (
	testLockTTL    = 3 * time.Second
	testLockMargin = 500 * time.Millisecond
)

func newLockProvider(t testing.TB, env *etcdtest.Env, opts etcd.LockProviderOptions) *etcd.LockProvider {
	t.Helper()
	opts.Prefix = env.Prefix
	p, err := etcd.NewLockProvider(env.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func TestLockProviderConformance(t *testing.T) {
	conformance.RunLockProvider(t, func(t *testing.T) conformance.LockHarness {
		env := etcdtest.New(t)
		opts := etcd.LockProviderOptions{TTL: testLockTTL, SafetyMargin: testLockMargin}
		p := newLockProvider(t, env, opts)
		// A second node: its own client and session on the same cluster.
		other := etcdtest.NewClient(t, env.Endpoints)
		opts.Prefix = env.Prefix
		second, err := etcd.NewLockProvider(other, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = second.Close(context.Background()) })
		return conformance.LockHarness{
			Provider: p,
			Second:   second,
			TakeAway: func(ctx context.Context, name string) error {
				resp, err := env.Client.Delete(ctx, p.LockKey(name))
				if err == nil && resp.Deleted != 1 {
					err = errors.New("no lock key to delete")
				}
				return err
			},
		}
	}, conformance.LockFeatures{LossDetection: testLockTTL})
}
