package outbox

import "time"

// NoticeKind says what a Notice is about.
type NoticeKind string

const (
	// NoticeStuck: passes have ended in a retry for at least StuckAfter.
	// This is the one thing to alert on.
	NoticeStuck NoticeKind = "stuck"
	// NoticeDeadLetter: entries were parked and need an operator.
	NoticeDeadLetter NoticeKind = "dead_letter"
)

// Notice is sent through Config.Notify.
type Notice struct {
	Kind NoticeKind `json:"kind"`
	// Lane is the lane of the entry the walk is stuck on, or of the first
	// entry parked.
	Lane string `json:"lane"`
	// EntryID is that entry's id.
	EntryID ID `json:"entry_id"`
	// Since is when the failing streak began (stuck notices).
	Since time.Time `json:"since,omitzero"`
	// LastError is the reason of the last retry (stuck) or of the first
	// parked entry (dead letter).
	LastError string `json:"last_error,omitempty"`
	// Parked is how many entries the pass parked (dead-letter notices).
	Parked int `json:"parked,omitempty"`
	// At is when the notice was raised.
	At time.Time `json:"at"`
}
