package etcd_test

import (
	"context"
	"testing"

	"github.com/baton-go/baton/backends/etcd"
	"github.com/baton-go/baton/backends/etcd/internal/etcdtest"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
)

func newLeaseStore(t testing.TB, env *etcdtest.Env, opts etcd.LeaseStoreOptions) *etcd.LeaseStore {
	t.Helper()
	opts.Prefix = env.Prefix
	s, err := etcd.NewLeaseStore(env.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func TestLeaseStoreConformance(t *testing.T) {
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		env := etcdtest.New(t)
		// A second node: its own client on the same cluster.
		other := etcdtest.NewClient(t, env.Endpoints)
		second, err := etcd.NewLeaseStore(other, etcd.LeaseStoreOptions{Prefix: env.Prefix})
		if err != nil {
			t.Fatal(err)
		}
		return conformance.LeaseHarness{Store: newLeaseStore(t, env, etcd.LeaseStoreOptions{}), Second: second}
	}, conformance.LeaseFeatures{ShortLease: etcdtest.MinLeaseTTL, ExpiryLag: etcdtest.ExpiryLag})
}

var _ lease.Store = (*etcd.LeaseStore)(nil)
