package bunorm

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
)

// ErrSchemaMismatch is wrapped by every error caused by a missing or out of
// date table or column: run CreateSchema (or the migration that calls it),
// or check the Schema option and the search_path.
var ErrSchemaMismatch = errors.New("baton/bunorm: the database schema does not match")

// ErrInvalidSchemaName is returned (wrapped, naming the option and the
// reason) for a schema name PostgreSQL cannot hold as given.
var ErrInvalidSchemaName = errors.New("baton/bunorm: invalid schema name")

// area is the store an error comes from; it decides what a refusal by the
// database means.
type area int

const (
	areaSchema area = iota
	areaLease
	areaOutbox
	areaProjection
	areaWorkRow
	// areaSettle is the outbox's settlement: a refused value there is a
	// reason or a state value, not an entry.
	areaSettle
)

var areaNames = [...]string{"schema", "lease", "outbox", "projection", "work rows", "outbox"}

// sqlState returns the SQLSTATE of a server error from either driver bun
// runs on: pgdriver's Error (Field('C')) or pgx's PgError (SQLState()).
// "" for anything else.
func sqlState(err error) string {
	var withField interface{ Field(byte) string }
	if errors.As(err, &withField) {
		return withField.Field('C')
	}
	var withState interface{ SQLState() string }
	if errors.As(err, &withState) {
		return withState.SQLState()
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

// mapError is the one place where bun's and the drivers' errors become
// baton's: a missing table or column wraps ErrSchemaMismatch; no row wraps
// outbox.ErrNotFound (only the outbox looks rows up by a caller's id); a
// value the database refuses wraps the area's invalid-input sentinel
// (lease.ErrInvalidRole, outbox.ErrInvalidEntry,
// outbox.ErrInvalidSettlement, projection.ErrInvalidSubject); a conflict says that the statement may be
// retried. Context errors stay recognizable with errors.Is: every error is
// wrapped, never replaced.
func mapError(a area, op string, err error) error {
	prefix := "baton/bunorm: " + areaNames[a] + " " + op
	if a == areaOutbox && errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s: %w", prefix, outbox.ErrNotFound)
	}
	switch code := sqlState(err); code {
	case "42P01", "42703": // undefined_table, undefined_column
		return fmt.Errorf("%s: %w (run bunorm.CreateSchema, or check the Schema option and the search_path): %w", prefix, ErrSchemaMismatch, err)
	case "23514", "22021", "22P02", "22P05":
		// check_violation, character_not_in_repertoire,
		// invalid_text_representation (not JSON), untranslatable_character
		// (\u0000 in jsonb).
		var invalid error
		switch a {
		case areaLease:
			invalid = lease.ErrInvalidRole
		case areaOutbox:
			invalid = outbox.ErrInvalidEntry
		case areaSettle:
			invalid = outbox.ErrInvalidSettlement
		case areaProjection:
			invalid = projection.ErrInvalidSubject
		}
		if invalid != nil {
			return fmt.Errorf("%s: %w: the database refused it: %w", prefix, invalid, err)
		}
	case "23505": // unique_violation: an entry has the id already
		if a == areaOutbox {
			return fmt.Errorf("%s: %w: an entry has it already: %w", prefix, outbox.ErrIDInUse, err)
		}
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return fmt.Errorf("%s met a concurrent change and was rolled back; it may be retried "+
			"(baton's statements expect READ COMMITTED: check default_transaction_isolation): %w", prefix, err)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}
