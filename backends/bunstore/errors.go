package bunstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/baton-go/baton/backends/internal/pgsql"
)

// baton's sentinel errors: the same values the pgx adapter
// (backends/pgxstore) returns, so errors.Is gives the same answer on either.
var (
	// ErrSchemaMismatch is wrapped by every error caused by a missing or out
	// of date table or column, and matched by every *SchemaError.
	ErrSchemaMismatch = pgsql.ErrSchemaMismatch
	// ErrInvalidSchemaName is returned (wrapped, naming the option and the
	// reason) for a schema name PostgreSQL cannot hold as given.
	ErrInvalidSchemaName = pgsql.ErrInvalidSchemaName
	// ErrSchemaTooNew is returned (wrapped) by Migrate when the database
	// records a migration version this binary does not know.
	ErrSchemaTooNew = pgsql.ErrSchemaTooNew
	// ErrClaimIndex is wrapped by WorkRows.Check when a work table lacks
	// its claim index or has an index that keeps claims from being HOT
	// updates.
	ErrClaimIndex = pgsql.ErrClaimIndex
	// ErrRebaseNotNeeded and ErrRebaseNoRoom are OutboxStore.Rebase's; see
	// the pgx adapter.
	ErrRebaseNotNeeded = pgsql.ErrRebaseNotNeeded
	ErrRebaseNoRoom    = pgsql.ErrRebaseNoRoom
)

// ErrNonStandardStrings is returned, wrapped, by the store constructors for
// a session with standard_conforming_strings off.
//
// Values baton sends itself travel as parameters, but the predicates, orders
// and sets of ClaimWith and FinalizeWith are rendered by bun, which writes
// their values into the text as quoted literals ('it”s'), doubling quotes
// but leaving backslashes alone. That is right only while backslashes are
// ordinary characters in such literals; with the setting off a backslash
// escapes the quote after it, so a value holding \' ends the literal early
// and the rest of it runs as SQL.
var ErrNonStandardStrings = errors.New("baton/bunstore: the session has standard_conforming_strings off")

// checkSession refuses a session in which bun's literals are not safe. The
// stores run it once, when they are built: the setting comes from the
// server, the database, the role or the connection string, which a
// session's pooled connections share.
func checkSession(ctx context.Context, q pgsql.Querier, caller string) error {
	var v string
	if err := q.QueryRow(ctx, `SELECT current_setting('standard_conforming_strings')`).Scan(&v); err != nil {
		return fmt.Errorf("baton/bunstore: %s: reading standard_conforming_strings: %w", caller, err)
	}
	if v != "on" {
		return fmt.Errorf("baton/bunstore: %s: %w (it is %q): bun quotes values in the statement text, where a backslash "+
			"would then end a quoted value early and let the rest run as SQL; set it on, the PostgreSQL default, "+
			"for the server, the database (ALTER DATABASE ... SET standard_conforming_strings = on), the role or the connection",
			caller, ErrNonStandardStrings, v)
	}
	return nil
}
