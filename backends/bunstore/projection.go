package bunstore

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/projection"
)

// ProjectionStoreOptions configure a ProjectionStore: Schema (the schema of
// the projection tables, "" for the search_path) and Logger (a Debug record
// per Replace and per Sweep that deleted something; nil discards). The pgx
// adapter takes the same type.
type ProjectionStoreOptions = pgsql.ProjectionStoreOptions

// ProjectionStore is the projection.Store over baton_projection_header and
// baton_projection_detail (both UNLOGGED), on a bun.IDB. Create it with
// NewProjectionStore.
//
// Its statements and transactions are the pgx adapter's (the grants go in
// one INSERT from arrays instead of COPY), and a flip takes the same
// advisory lock, so bun and pgx nodes share the tables and the sequence.
// Replace and Sweep run READ COMMITTED whatever the server's default (a
// savepoint on a bun.Tx).
type ProjectionStore struct {
	*pgsql.ProjectionStore
}

var _ projection.Store = (*ProjectionStore)(nil)

// NewProjectionStore returns a ProjectionStore over db, or an error naming
// the first invalid option. db must run on pgx's database/sql driver
// (ErrUnsupportedDriver). It asks the database one thing,
// standard_conforming_strings, and refuses a session without it
// (ErrNonStandardStrings); run Migrate first.
func NewProjectionStore(ctx context.Context, db bun.IDB, opts ProjectionStoreOptions) (*ProjectionStore, error) {
	h, err := open(db, "NewProjectionStore")
	if err != nil {
		return nil, err
	}
	st, err := pgsql.NewProjectionStore(h, adapter, opts)
	if err != nil {
		return nil, err
	}
	if err := checkSession(ctx, h, "NewProjectionStore"); err != nil {
		return nil, err
	}
	return &ProjectionStore{st}, nil
}
