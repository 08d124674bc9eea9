package pgxstore

import (
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/projection"
)

// Tables of the projection store, created by the 0004_projections
// migration. Both are UNLOGGED: empty after a crash restart.
const (
	ProjectionHeaderTable = pgsql.ProjectionHeaderTable
	ProjectionDetailTable = pgsql.ProjectionDetailTable
	// ProjectionGenerationSequence numbers the generations; Reserve draws
	// from it. It is an ordinary, logged sequence (numbers never repeat)
	// with the default cache of 1, so a number drawn later on any session
	// is larger.
	ProjectionGenerationSequence = pgsql.ProjectionGenerationSequence
)

// ProjectionStoreOptions configure a ProjectionStore: Schema (the schema of
// the projection tables, "" for the search_path) and Logger (a Debug record
// per Replace and per Sweep that deleted something; nil discards). The bun
// adapter takes the same type.
type ProjectionStoreOptions = pgsql.ProjectionStoreOptions

// ProjectionStore is the projection.Store over baton_projection_header and
// baton_projection_detail. Create it with NewProjectionStore.
//
// Reserve is one nextval of baton_projection_generation. Replace runs one
// READ COMMITTED transaction, whatever the server's
// default_transaction_isolation: it inserts the generation's header row
// (inactive) under the reserved number, copies the detail rows in with
// COPY, then, holding a transaction-scoped advisory lock keyed by the
// subject, demotes the active generation if it is older and promotes the
// new one if no newer one is active (the lock and both updates in one
// round trip), and commits. A newer active generation makes Replace roll
// back with ErrStale. Every read is one statement, so one snapshot; Sweep
// is one statement that waits for no lock. Everything works through any
// pooler, PgBouncer's transaction mode included.
type ProjectionStore struct {
	*pgsql.ProjectionStore
}

var _ projection.Store = (*ProjectionStore)(nil)

// NewProjectionStore returns a ProjectionStore over pool, or an error
// naming the first invalid option. It sends nothing to the database; run
// Migrate (or the migrations) first.
func NewProjectionStore(pool *pgxpool.Pool, opts ProjectionStoreOptions) (*ProjectionStore, error) {
	if pool == nil {
		return nil, errors.New("baton/pgxstore: NewProjectionStore: the pool is nil")
	}
	st, err := pgsql.NewProjectionStore(newPoolDB(pool), adapter, opts)
	if err != nil {
		return nil, err
	}
	return &ProjectionStore{st}, nil
}
