package outbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Processor delivers one lane's entries.
type Processor interface {
	// Lane is the lane this processor delivers. One processor per lane.
	Lane() string
	// Deliver delivers a run: consecutive entries of this lane, in walk
	// order. It must deliver them in order, one at a time (concurrency
	// inside a run reorders them), and return exactly one Outcome per
	// entry, in the same order. An entry it chose not to attempt (because
	// an earlier one must be retried) is a Retry. An error, a panic or a
	// wrong number of outcomes retries the whole run.
	//
	// Delivery is at least once: after a crash or a leader change an entry
	// may be delivered again. Give the destination the entry id as its
	// idempotency key.
	//
	// ctx carries the leader's fencing token (FencingToken); send it along,
	// so that the destination can refuse a deposed leader. A refusal of the
	// token is an error wrapping ErrFenced.
	Deliver(ctx context.Context, run []Entry) ([]Outcome, error)
}

// MaxReasonLength bounds, in bytes, the reasons the driver stores: a
// dead letter's error and the outbox's last_error. Longer ones are cut.
const MaxReasonLength = 4096

// reasonCut marks a reason StorableReason had to cut.
const reasonCut = " …(cut)"

// StorableReason is reason as the driver stores and notifies it, whatever
// a processor put in it (an engine's error body may hold anything): bytes
// that are not UTF-8 and characters that are not printable (NUL and other
// control characters, line separators, byte order marks) are written as Go
// escapes such as \x00, \n and \u2028, and the result is cut to
// MaxReasonLength bytes at a character boundary, marked " …(cut)". Printable
// UTF-8 that fits is returned unchanged. The driver applies it to every
// park and retry reason and every error before any store sees them, so no
// outcome can make a settlement fail.
func StorableReason(reason string) string {
	if len(reason) <= MaxReasonLength && utf8.ValidString(reason) && strings.IndexFunc(reason, notPrintable) < 0 {
		return reason
	}
	var b strings.Builder
	for i := 0; i < len(reason) && b.Len() <= MaxReasonLength; {
		r, size := utf8.DecodeRuneInString(reason[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, reason[i])
		case notPrintable(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(reason[i : i+size])
		}
		i += size
	}
	out := b.String()
	if len(out) <= MaxReasonLength {
		return out
	}
	out = out[:MaxReasonLength-len(reasonCut)]
	for !utf8.ValidString(out) { // drop a character the cut split
		out = out[:len(out)-1]
	}
	return out + reasonCut
}

func notPrintable(r rune) bool { return !unicode.IsPrint(r) }

// OutcomeKind classifies one entry's delivery.
type OutcomeKind uint8

const (
	// KindRetry: not delivered, may succeed later; the walk stops here.
	// It is the zero value, so an Outcome nobody set is never "delivered".
	KindRetry OutcomeKind = iota
	// KindDelivered: done; the cursor moves past it.
	KindDelivered
	// KindPark: can never succeed as is; it is parked in the dead letters and
	// the cursor moves past it.
	KindPark
)

func (k OutcomeKind) String() string {
	switch k {
	case KindDelivered:
		return "delivered"
	case KindPark:
		return "park"
	default:
		return "retry"
	}
}

// Outcome is the result of delivering one entry.
type Outcome struct {
	Kind OutcomeKind
	// Reason says why an entry was parked or must be retried; it is
	// stored as the dead letter's error or the outbox's last_error, made
	// storable first (StorableReason).
	Reason string
	// RetryAfter, on the Retry that stops the walk, is the delay before the
	// next pass (a remote 429 or 503 Retry-After), instead of ErrorDelay.
	RetryAfter time.Duration
}

// Delivered is the outcome of a delivered entry.
func Delivered() Outcome { return Outcome{Kind: KindDelivered} }

// Park is the outcome of an entry that can never be delivered as it is.
func Park(reason string) Outcome { return Outcome{Kind: KindPark, Reason: reason} }

// Retry is the outcome of an entry to try again on a later pass.
func Retry(reason string) Outcome { return Outcome{Kind: KindRetry, Reason: reason} }

// RetryAfter is a Retry that asks for the next pass to wait d.
func RetryAfter(reason string, d time.Duration) Outcome {
	return Outcome{Kind: KindRetry, Reason: reason, RetryAfter: d}
}

// ProcessorFunc adapts a function to a Processor.
type ProcessorFunc struct {
	LaneName string
	Func     func(ctx context.Context, run []Entry) ([]Outcome, error)
}

// Lane implements Processor.
func (p ProcessorFunc) Lane() string { return p.LaneName }

// Deliver implements Processor.
func (p ProcessorFunc) Deliver(ctx context.Context, run []Entry) ([]Outcome, error) {
	return p.Func(ctx, run)
}
