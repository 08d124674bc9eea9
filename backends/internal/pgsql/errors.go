package pgsql

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
)

// The sentinels of both adapters, defined once: each adapter exports them
// under the same names, so errors.Is gives the same answer on either.
var (
	// ErrSchemaMismatch is wrapped by every error caused by a missing or
	// out of date table or column, and matched by every *SchemaError.
	ErrSchemaMismatch = errors.New("baton: the database schema does not match")
	// ErrInvalidSchemaName is wrapped (naming the option and the reason)
	// for a schema name PostgreSQL cannot hold as given.
	ErrInvalidSchemaName = errors.New("baton: invalid schema name")
	// ErrSchemaTooNew is wrapped by Migrate when the database records a
	// migration version this binary does not know.
	ErrSchemaTooNew = errors.New("baton: the database schema is newer than this binary")
	// ErrClaimIndex is wrapped when a work table lacks its claim index or
	// has an index that keeps claims from being HOT updates.
	ErrClaimIndex = errors.New("baton: work table claim index")
	// ErrRebaseNotNeeded is returned by Rebase when the stored cursor is
	// below the transaction counter.
	ErrRebaseNotNeeded = errors.New("baton: the outbox needs no rebase: its cursor is below the transaction counter")
	// ErrRebaseNoRoom is returned by Rebase when the entries need more xid
	// values than lie below the oldest running transaction.
	ErrRebaseNoRoom = errors.New("baton: too few xid values below the horizon to rebase the outbox")
	// ErrListenUnsupported is wrapped when a store's handle cannot give a
	// session that LISTENs (Session): the lease watcher and the wake-ups
	// then have none, and the callers poll.
	ErrListenUnsupported = errors.New("baton: the database handle cannot listen")
)

// Adapter is the package the errors are reported for, "pgxstore" or
// "bunstore": messages start with "baton/<adapter>:" and name its functions.
type Adapter string

func (a Adapter) errorf(format string, args ...any) error {
	return fmt.Errorf("baton/"+string(a)+": "+format, args...)
}

// invalid is a refused option of the adapter's, of kind (the core
// package's sentinel), the field named with the adapter's package:
// "pgxstore.LeaseStoreOptions.Channel".
func (a Adapter) invalid(kind error, field, format string, args ...any) error {
	return config.Invalid(kind, string(a)+"."+field, format, args...)
}

// wrap is a refused option of the adapter's, refused for err.
func (a Adapter) wrap(kind error, field string, err error) error {
	return config.Wrap(kind, string(a)+"."+field, err)
}

// Area is the kind of statement an error comes from: it decides what a
// value the database refused means.
type Area int

const (
	AreaLease Area = iota
	AreaOutbox
	AreaSettle // the outbox's settlement: a refused value is a reason or a state value
	AreaProjection
	AreaWorkRow
)

var areaInfo = [...]struct {
	name, fix string
	refused   error // what a value the database refuses is
}{
	AreaLease:      {"lease", "check LeaseStoreOptions.Schema and the search_path", lease.ErrInvalidRole},
	AreaOutbox:     {"outbox", "check OutboxStoreOptions.Schema and the search_path", outbox.ErrInvalidEntry},
	AreaSettle:     {"outbox settle", "check OutboxStoreOptions.Schema and the search_path", outbox.ErrInvalidSettlement},
	AreaProjection: {"projection", "check ProjectionStoreOptions.Schema and the search_path", projection.ErrInvalidSubject},
	AreaWorkRow:    {"work table", "check WorkRowsOptions and the search_path", nil},
}

// mapError is the one place where driver errors become baton's: a missing
// table or column wraps ErrSchemaMismatch; no row, where the outbox looks
// up a caller's id, wraps outbox.ErrNotFound; a value the database refuses
// wraps the area's invalid-input sentinel; an outbox id in use wraps
// outbox.ErrIDInUse; a serialization failure or deadlock says the
// statement was rolled back and may be sent again. Every error is wrapped,
// never replaced, so context errors stay recognizable with errors.Is.
func (a Adapter) MapError(ar Area, op string, err error) error {
	info := areaInfo[ar]
	what := info.name + " " + op
	if ar == AreaOutbox && errors.Is(err, sql.ErrNoRows) {
		return a.errorf("%s: %w", what, outbox.ErrNotFound)
	}
	switch sqlState(err) {
	case "42P01", "42703": // undefined_table, undefined_column
		return a.errorf("%s: %w: a table or column is missing (run %s.Migrate, or %s): %w", what, ErrSchemaMismatch, a, info.fix, err)
	case "23514", "22021", "22P02", "22P05":
		// check_violation (a length), character_not_in_repertoire (not
		// UTF-8, or a NUL byte), invalid_text_representation (not JSON),
		// untranslatable_character (\u0000 in jsonb).
		if info.refused != nil {
			return a.errorf("%s: %w: the database refused it: %w", what, info.refused, err)
		}
	case "23505": // unique_violation
		if ar == AreaOutbox {
			return a.errorf("%s: %w: an entry has it already: %w", what, outbox.ErrIDInUse, err)
		}
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return a.errorf("%s met a concurrent change and was rolled back; it may be retried "+
			"(baton's statements expect READ COMMITTED: check default_transaction_isolation): %w", what, err)
	}
	return a.errorf("%s: %w", what, err)
}

// sqlState is the SQLSTATE of a server error, "" for any other error.
// Both adapters run on pgx, whose errors database/sql passes on as they
// are.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// isConflict reports a serialization failure or a deadlock: the statement
// was rolled back whole and may be sent again.
func isConflict(err error) bool {
	switch sqlState(err) {
	case "40001", "40P01":
		return true
	}
	return false
}

// quote quotes one identifier.
func quote(name string) string { return pgx.Identifier{name}.Sanitize() }

// Qualified quotes a relation's name, schema-qualified when schema is set.
func Qualified(schema, name string) string { return qualified(schema, name) }

func qualified(schema, name string) string {
	if schema == "" {
		return quote(name)
	}
	return pgx.Identifier{schema, name}.Sanitize()
}

// ValidateSchemaName rejects names PostgreSQL would reject or silently
// change (SchemaProblem); field names the option, for the error.
func ValidateSchemaName(field, name string) error {
	if why := SchemaProblem(name); why != "" {
		return config.Invalid(ErrInvalidSchemaName, field, "%q: %s", name, why)
	}
	return nil
}

// errNoRows is what a Row's Scan wraps when there is no row: pgx's
// ErrNoRows is database/sql's.
var errNoRows = sql.ErrNoRows
