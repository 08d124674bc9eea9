package bunorm

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/uptrace/bun"
)

// ClaimIndex returns the claim index of the work table described by R and
// opts, as a bun CREATE INDEX IF NOT EXISTS query to run in a migration:
// the Order columns, then the id, partial over the Live rows,
//
//	q, err := bunorm.ClaimIndex[Delivery](db, opts)
//	...
//	_, err = q.Exec(ctx)
//
// named "<table>_claim" (set another with q.Index). Because it holds only
// live rows, a claim stays as fast with a million finished rows as with
// none. Keep the lock columns out of it and out of every other index of
// the table: claims, renewals and releases change only them, and stay HOT
// updates (no index entry written) as long as no index mentions them.
func ClaimIndex[R any](db bun.IDB, opts WorkRowsOptions) (*bun.CreateIndexQuery, error) {
	if db == nil {
		return nil, errors.New("baton/bunorm: ClaimIndex: the database handle is nil")
	}
	typ := reflect.TypeFor[R]()
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("baton/bunorm: ClaimIndex: the row type %v is not a struct; it must be the table's bun model", typ)
	}
	if err := opts.validate(db.Dialect().Tables().Get(typ)); err != nil {
		return nil, err
	}
	pred, args, err := renderCond(opts.Live, "", time.Time{})
	if err != nil {
		return nil, fmt.Errorf("baton/bunorm: WorkRowsOptions.Live: %w", err)
	}
	q := db.NewCreateIndex().Model((*R)(nil)).ModelTableExpr("?", tableName(opts.Schema, opts.Table)).
		Index(opts.Table + "_claim").IfNotExists()
	for _, o := range opts.Order {
		if o.Desc {
			q = q.ColumnExpr("? DESC", bun.Name(o.Column))
		} else {
			q = q.ColumnExpr("?", bun.Name(o.Column))
		}
	}
	return q.ColumnExpr("?", bun.Name(opts.IDColumn)).Where(pred, args...), nil
}

// ClaimIndex returns this store's claim index as a bun CREATE INDEX query;
// see the package-level ClaimIndex.
func (s *WorkRows[K, R]) ClaimIndex() *bun.CreateIndexQuery {
	q, err := ClaimIndex[R](s.db, s.opts)
	if err != nil { // cannot happen: the options were validated by NewWorkRows
		return s.db.NewCreateIndex().Err(err)
	}
	return q
}
