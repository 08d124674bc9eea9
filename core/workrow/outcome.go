package workrow

import (
	"errors"
	"fmt"
	"time"
)

// ErrNoOutcome is the failure recorded when a handler returns the zero
// Outcome.
var ErrNoOutcome = errors.New("baton/workrow: the handler returned no outcome")

// Kind is what an Outcome does with the row.
type Kind int

// The kinds of Outcome.
const (
	kindNone Kind = iota
	// KindComplete finishes the row with Config.OnComplete's sets.
	KindComplete
	// KindFail records the error (Config.OnFail) and delays the row by
	// the backoff; at Config.MaxAttempts it parks the row instead.
	KindFail
	// KindPark finishes the row as failed for good (Config.OnPark).
	KindPark
	// KindRelease hands the row back untouched, claimable at once.
	KindRelease
)

var kindNames = [...]string{"none", "complete", "fail", "park", "release"}

func (k Kind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Outcome is what a handler decided about its row.
type Outcome struct {
	kind       Kind
	err        error
	retryAfter time.Duration
	set        []Set
}

// Complete finishes the row: Config.OnComplete's sets, then these (which
// win for a column both set).
func Complete(set ...Set) Outcome { return Outcome{kind: KindComplete, set: set} }

// Fail records a failed attempt: Config.OnFail's sets for err, then these,
// and the row becomes claimable again after the backoff. A failure at
// Config.MaxAttempts parks the row instead.
func Fail(err error, set ...Set) Outcome {
	if err == nil {
		err = errors.New("baton/workrow: failed (no error given)")
	}
	return Outcome{kind: KindFail, err: err, set: set}
}

// Park gives up on the row for good: Config.OnPark's sets for err, then
// these. Without Config.OnPark it is a Fail.
func Park(err error, set ...Set) Outcome {
	if err == nil {
		err = errors.New("baton/workrow: parked (no error given)")
	}
	return Outcome{kind: KindPark, err: err, set: set}
}

// Release hands the row back with no bookkeeping: it is claimable again at
// once. The attempt counted at claim stays counted.
func Release() Outcome { return Outcome{kind: KindRelease} }

// RetryAfter returns o with the remote side's requested delay (a
// Retry-After header). The backoff waits at least that long.
func (o Outcome) RetryAfter(d time.Duration) Outcome {
	o.retryAfter = d
	return o
}

// Kind is what o does.
func (o Outcome) Kind() Kind { return o.kind }

// Err is the failure o records (nil for Complete and Release).
func (o Outcome) Err() error { return o.err }

// PanicError is the failure recorded for a handler that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("baton/workrow: the handler panicked: %v", e.Value)
}
