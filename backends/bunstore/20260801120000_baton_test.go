package bunstore_test

import (
	"github.com/uptrace/bun/migrate"

	"github.com/baton-go/baton/backends/bunstore"
)

// Migrations are the example service's bun migrations. bun names a Go
// migration after the file that registers it, so this file's name puts
// baton's tables at 2026-08-01 12:00:00 in the service's history, like any
// other migration of its own.
var Migrations = migrate.NewMigrations()

func init() {
	Migrations.MustRegister(bunstore.MigrateUp, bunstore.MigrateDown)
}
