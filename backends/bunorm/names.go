package bunorm

import (
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"

	"github.com/baton-go/baton/backends/internal/pgsql"
)

// MaxSchemaNameLength is the longest schema, table or column name, in
// bytes, that this package accepts: PostgreSQL silently cuts longer names.
const MaxSchemaNameLength = 63

// validateSchemaName rejects schema names PostgreSQL would reject or
// silently change (pgsql.SchemaProblem); field names the option, for the
// error.
func validateSchemaName(field, name string) error {
	if why := pgsql.SchemaProblem(name); why != "" {
		return fmt.Errorf("%w: %s %q: %s", ErrInvalidSchemaName, field, name, why)
	}
	return nil
}

// identifierProblem describes what keeps name from being a PostgreSQL
// identifier as written, or returns "" (pgsql.IdentifierProblem).
func identifierProblem(name string) string { return pgsql.IdentifierProblem(name) }

// tableName is a table, schema-qualified when schema is set, as a bun
// query argument. bun.Name quotes one name whole (bun.Ident would split it
// at dots).
func tableName(schemaName, table string) schema.QueryAppender {
	if schemaName == "" {
		return bun.Name(table)
	}
	return bun.SafeQuery("?.?", bun.Name(schemaName), bun.Name(table))
}
