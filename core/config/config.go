// Package config holds the one error shape that baton's constructors return
// for a Config or Options they cannot run with, so that core packages and
// adapters report a bad field the same way, and a caller can find the field
// with errors.As whatever package refused it.
//
// The conventions it serves, the same in every package of the module:
//
//   - A core component (core/...) is configured by a Config; an adapter's
//     constructor (backends/..., locks/..., graph) takes Options.
//   - Constructors are named New followed by what they return, and return
//     (T, error).
//   - Zero fields take defaults, named constants beside the type.
//     withDefaults returns a filled-in copy; validate then only checks it, and
//     its error is a *FieldError wrapping the package's sentinel
//     (lease.ErrInvalidConfig, lock.ErrInvalidOptions, ...).
//   - A long-running component blocks in Run(ctx) until ctx ends, and has a
//     Close only where a graceful release needs one.
package config

import "fmt"

// FieldError says which field of a Config or Options (or which argument of
// a constructor) is refused, and why. It wraps Kind, the refusing package's
// sentinel, so errors.Is(err, lease.ErrInvalidConfig) holds for it.
type FieldError struct {
	// Kind is the sentinel of the package that refused the value.
	Kind error
	// Field names the field as the caller wrote it: "RenewInterval",
	// "Processors[2]", "pglock.Options.PingInterval".
	Field string
	// Reason continues the sentence that starts with the field's name:
	// "is nil", "is -1s; it must be positive". Empty when Err says why.
	Reason string
	// Err is why, when the value was refused by another check (a lock
	// name's rule, a backoff's own validation); nil otherwise.
	Err error
}

// Error reads "<kind>: <field> <reason>", or "<kind>: <field>: <err>".
func (e *FieldError) Error() string {
	s := e.Field + " " + e.Reason
	if e.Err != nil {
		s = e.Field + ": " + e.Err.Error()
	}
	if e.Kind == nil {
		return s
	}
	return e.Kind.Error() + ": " + s
}

// Unwrap returns Kind and Err, so errors.Is finds either.
func (e *FieldError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Invalid returns a *FieldError for field, of kind, with the reason
// formatted from format and args.
func Invalid(kind error, field, format string, args ...any) error {
	return &FieldError{Kind: kind, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Wrap returns a *FieldError for field, of kind, refused for err.
func Wrap(kind error, field string, err error) error {
	return &FieldError{Kind: kind, Field: field, Err: err}
}
