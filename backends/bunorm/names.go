package bunorm

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// MaxSchemaNameLength is the longest schema, table or column name, in
// bytes, that this package accepts: PostgreSQL silently cuts longer names.
const MaxSchemaNameLength = 63

// validateSchemaName rejects schema names PostgreSQL would reject or
// silently change; field names the option, for the error.
func validateSchemaName(field, name string) error {
	var why string
	switch {
	case name == "":
		why = "it is empty"
	case strings.HasPrefix(name, "pg_"):
		why = `names starting with "pg_" are reserved for PostgreSQL's system schemas`
	case strings.TrimSpace(name) == "":
		why = "it is only white space"
	default:
		why = identifierProblem(name)
		if why == "" {
			return nil
		}
	}
	return fmt.Errorf("%w: %s %q: %s", ErrInvalidSchemaName, field, name, why)
}

// identifierProblem describes what keeps name from being a PostgreSQL
// identifier as written, or returns "".
func identifierProblem(name string) string {
	switch {
	case name == "":
		return "it is empty"
	case len(name) > MaxSchemaNameLength:
		return fmt.Sprintf("it is %d bytes long and the limit is %d (PostgreSQL would cut it short)", len(name), MaxSchemaNameLength)
	case strings.IndexByte(name, 0) >= 0:
		return "it contains a NUL byte"
	case !utf8.ValidString(name):
		return "it is not valid UTF-8"
	}
	return ""
}

// tableName is a table, schema-qualified when schema is set, as a bun
// query argument. bun.Name quotes one name whole (bun.Ident would split it
// at dots).
func tableName(schemaName, table string) schema.QueryAppender {
	if schemaName == "" {
		return bun.Name(table)
	}
	return bun.SafeQuery("?.?", bun.Name(schemaName), bun.Name(table))
}
