package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-go/baton/core/internal/name"
	"github.com/baton-go/baton/core/internal/uuid"
)

// ID is an entry id: a UUID, chosen by the producer (normally a UUIDv7 from
// NewID). Ids order bytewise, as PostgreSQL's uuid type does.
type ID [16]byte

// NilID is the zero ID, never a valid entry id.
var NilID ID

// ErrInvalidEntry is returned (wrapped, with the reason) by ValidateEntry
// and every adapter's Enqueue for an entry that must not be written.
var ErrInvalidEntry = errors.New("baton/outbox: invalid entry")

// ErrIDInUse is returned (wrapped) by an adapter's Enqueue for an id that
// an entry or a dead letter already has. The id is the destination's
// idempotency key, so a second entry with it would be taken for a repeat;
// and two dead letters cannot share it. When the id's own entry is being
// parked at that moment, Enqueue is refused just the same: an id is never
// free between an entry and its dead letter.
var ErrIDInUse = errors.New("baton/outbox: the id is in use by an entry or a dead letter")

// MaxLaneLength bounds a lane name, in bytes.
const MaxLaneLength = 128

// MaxPayloadBytes bounds a payload, in bytes as given to Enqueue: 1 MiB.
// The walk reads entries in batches, and every instance in turn may lead
// it; an unbounded payload could exhaust each leader's memory one after
// the other. An event that needs more should carry a reference to where the
// data is instead.
const MaxPayloadBytes = 1 << 20

// NewID returns a fresh UUIDv7: 48 bits of Unix milliseconds, a counter,
// then random bits. Ids made by one process strictly increase, even within
// one millisecond, so entries a transaction enqueues one after another come
// out in that order.
func NewID() ID { return ID(uuid.NewV7()) }

// ParseID reads the canonical 36-character form (hyphens optional).
func ParseID(s string) (ID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return NilID, fmt.Errorf("baton/outbox: %q is not a UUID", s)
	}
	return ID(id), nil
}

// String is the canonical lower-case form with hyphens.
func (id ID) String() string { return uuid.Format(id) }

// IsNil reports whether id is the zero ID.
func (id ID) IsNil() bool { return id == NilID }

// MarshalText implements encoding.TextMarshaler.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ID) UnmarshalText(b []byte) error {
	v, err := ParseID(string(b))
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// Compare orders ids bytewise: -1, 0 or +1.
func (id ID) Compare(other ID) int {
	for i := range id {
		switch {
		case id[i] < other[i]:
			return -1
		case id[i] > other[i]:
			return 1
		}
	}
	return 0
}

// Entry is one outbox row.
type Entry struct {
	// XID is the 64-bit id of the producing transaction (xid8): the order
	// in which transactions took their xid, which is at their first write.
	XID       uint64
	ID        ID
	Lane      string
	Payload   json.RawMessage
	CreatedAt time.Time
	// TraceContext is the W3C trace context of the request that enqueued
	// the entry (WithTraceContext on Enqueue's context), or the zero
	// TraceContext.
	TraceContext TraceContext
}

// Cursor returns the position just at this entry.
func (e Entry) Cursor() Cursor { return Cursor{XID: e.XID, ID: e.ID} }

// Cursor is a position in the walk's (xid, id) order. The zero Cursor is
// before every entry.
type Cursor struct {
	XID uint64
	ID  ID
}

// Compare orders cursors by xid, then id: -1, 0 or +1.
func (c Cursor) Compare(other Cursor) int {
	switch {
	case c.XID < other.XID:
		return -1
	case c.XID > other.XID:
		return 1
	}
	return c.ID.Compare(other.ID)
}

// IsZero reports whether c is the start of the walk.
func (c Cursor) IsZero() bool { return c == Cursor{} }

// ValidateEntry is the rule every adapter's Enqueue applies before writing:
// a non-nil id, a lane of 1–128 bytes of UTF-8 without NUL, and a payload
// of at most MaxPayloadBytes that is one valid JSON value, in UTF-8,
// without the escape \u0000.
func ValidateEntry(id ID, lane string, payload []byte) error {
	if id.IsNil() {
		return fmt.Errorf("%w: the id is the nil UUID; use outbox.NewID()", ErrInvalidEntry)
	}
	if p := name.Problem(lane, MaxLaneLength); p != "" {
		return fmt.Errorf("%w: lane: %s", ErrInvalidEntry, strings.Replace(p, "the name", "the lane", 1))
	}
	if len(payload) == 0 {
		return fmt.Errorf("%w: the payload is empty; it must be JSON", ErrInvalidEntry)
	}
	if len(payload) > MaxPayloadBytes {
		return fmt.Errorf("%w: the payload is %d bytes; at most %d (outbox.MaxPayloadBytes) are allowed, "+
			"so put large data elsewhere and enqueue a reference to it", ErrInvalidEntry, len(payload), MaxPayloadBytes)
	}
	if !json.Valid(payload) {
		return fmt.Errorf("%w: the payload is not valid JSON", ErrInvalidEntry)
	}
	if !utf8.Valid(payload) {
		// encoding/json lets invalid UTF-8 through inside strings; jsonb
		// refuses it.
		return fmt.Errorf("%w: the payload is not valid UTF-8", ErrInvalidEntry)
	}
	if hasNULEscape(payload) {
		// Valid JSON, but PostgreSQL's jsonb cannot hold a NUL character.
		return fmt.Errorf("%w: the payload contains \\u0000, which jsonb cannot store", ErrInvalidEntry)
	}
	return nil
}

// hasNULEscape reports whether valid JSON holds the escape \u0000 (a
// backslash that is not itself escaped, then u0000).
func hasNULEscape(js []byte) bool {
	for i := 0; ; {
		j := bytes.Index(js[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		at := i + j
		slashes := 0
		for k := at - 1; k >= 0 && js[k] == '\\'; k-- {
			slashes++
		}
		if slashes%2 == 0 {
			return true
		}
		i = at + 1
	}
}
