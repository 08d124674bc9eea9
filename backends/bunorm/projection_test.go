package bunorm

import (
	"context"
	"testing"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/conformance"
)

func mustProjectionStore(t testing.TB, db bun.IDB, opts ProjectionStoreOptions) *ProjectionStore {
	t.Helper()
	st, err := NewProjectionStore(context.Background(), db, opts)
	if err != nil {
		t.Fatalf("NewProjectionStore: %v", err)
	}
	return st
}

func TestProjectionStore_Conformance(t *testing.T) {
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		env, db := bunEnv(t)
		return conformance.ProjectionHarness{
			Store:  mustProjectionStore(t, db, ProjectionStoreOptions{}),
			Second: mustProjectionStore(t, openBun(t, env), ProjectionStoreOptions{}),
		}
	}, conformance.ProjectionFeatures{})
}
