package bunstore

import (
	"context"
	"testing"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/internal/testenv"
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
			Unmigrated: func(t *testing.T) conformance.ProjectionHarness {
				return conformance.ProjectionHarness{Store: mustProjectionStore(t, openBun(t, testenv.Postgres(t)), ProjectionStoreOptions{})}
			},
			SchemaMismatch: ErrSchemaMismatch,
		}
	}, conformance.ProjectionFeatures{})
}

// TestProjectionStore_ConformanceUnderRepeatableReadByDefault runs the
// contract on sessions whose default_transaction_isolation is REPEATABLE
// READ (a connection parameter, never the server's setting): Replace runs
// READ COMMITTED whatever the default, as the PostgreSQL adapter does.
func TestProjectionStore_ConformanceUnderRepeatableReadByDefault(t *testing.T) {
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		env, _ := bunEnv(t)
		repeatableRead := *env
		repeatableRead.URL += "&default_transaction_isolation=repeatable%20read"
		db := openBun(t, &repeatableRead)
		var level string
		if err := db.NewRaw("SHOW default_transaction_isolation").Scan(testContext(t), &level); err != nil || level != "repeatable read" {
			t.Fatalf("the session's default isolation is %q, %v; the test needs repeatable read", level, err)
		}
		return conformance.ProjectionHarness{
			Store:  mustProjectionStore(t, db, ProjectionStoreOptions{}),
			Second: mustProjectionStore(t, openBun(t, &repeatableRead), ProjectionStoreOptions{}),
		}
	}, conformance.ProjectionFeatures{})
}
