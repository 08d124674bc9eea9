package bunstore_test

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/bunstore"
)

// The service's own work table, with its claim index, in the migration
// after baton's.
func init() {
	Migrations.MustRegister(func(ctx context.Context, db *bun.DB) error {
		return db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.NewCreateTable().Model((*Delivery)(nil)).Exec(ctx); err != nil {
				return err
			}
			ix, err := bunstore.ClaimIndex[Delivery](tx, deliveryRows)
			if err != nil {
				return err
			}
			_, err = ix.Exec(ctx)
			return err
		})
	}, func(ctx context.Context, db *bun.DB) error {
		_, err := db.NewDropTable().Model((*Delivery)(nil)).IfExists().Exec(ctx)
		return err
	})
}
