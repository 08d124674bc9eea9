package bunstore

import (
	"context"
	"testing"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/internal/testenv"
)

func mustLeaseStore(t testing.TB, db bun.IDB, opts LeaseStoreOptions) *LeaseStore {
	t.Helper()
	st, err := NewLeaseStore(context.Background(), db, opts)
	if err != nil {
		t.Fatalf("NewLeaseStore: %v", err)
	}
	return st
}

func TestLeaseStore_Conformance(t *testing.T) {
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		env, db := bunEnv(t)
		return conformance.LeaseHarness{
			Store:  mustLeaseStore(t, db, LeaseStoreOptions{Channel: "releases " + env.Schema}),
			Second: mustLeaseStore(t, openBun(t, env), LeaseStoreOptions{Channel: "releases " + env.Schema}),
			Unmigrated: func(t *testing.T) conformance.LeaseHarness {
				return conformance.LeaseHarness{Store: mustLeaseStore(t, openBun(t, testenv.Postgres(t)), LeaseStoreOptions{})}
			},
			SchemaMismatch: ErrSchemaMismatch,
		}
	}, conformance.LeaseFeatures{})
}
