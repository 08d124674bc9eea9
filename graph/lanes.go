package graph

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/baton-go/baton/core/outbox"
)

// The standard lanes' names, as stored in the outbox's lane column.
const (
	// LaneInit announces a new resource and its initial relations.
	LaneInit = "graph.init"
	// LaneMetadata announces an entity's new label.
	LaneMetadata = "graph.metadata"
)

// MaxNameLength bounds every type, id, relation and requested-by value of
// a payload, in bytes. They are identifiers, not text; the bound keeps an
// accidental blob out of the outbox and the engine's keys.
const MaxNameLength = 512

// MaxLabelLength bounds MetadataPayload.Label, in bytes.
const MaxLabelLength = 4096

// InitPayload is the graph.init payload: resource ResourceType/ResourceID
// now exists, with these initial relations. It is delivered as the request
// body of POST PathInit.
type InitPayload struct {
	ResourceType string     `json:"resourceType"`
	ResourceID   string     `json:"resourceId"`
	Relations    []Relation `json:"relations"`
	// RequestedBy is who asked for the resource, for the engine's audit
	// trail: a user id, or this service's name for a change no user asked
	// for. Required, so that no entry reaches the engine unattributed.
	RequestedBy string `json:"requestedBy"`
}

// Relation is one initial relation of a new resource: SubjectType
// SubjectID is Relation of the resource (user u1 is "parent" of it).
type Relation struct {
	Relation    string `json:"relation"`
	SubjectType string `json:"subjectType"`
	SubjectID   string `json:"subjectId"`
}

// Validate reports the first thing the engine would refuse, as an error
// wrapping ErrInvalidPayload that names the field. Relations may be empty.
func (p InitPayload) Validate() error {
	if err := checkName("resourceType", p.ResourceType); err != nil {
		return err
	}
	if err := checkName("resourceId", p.ResourceID); err != nil {
		return err
	}
	for i, r := range p.Relations {
		field := fmt.Sprintf("relations[%d].", i)
		if err := checkName(field+"relation", r.Relation); err != nil {
			return err
		}
		if err := checkName(field+"subjectType", r.SubjectType); err != nil {
			return err
		}
		if err := checkName(field+"subjectId", r.SubjectID); err != nil {
			return err
		}
	}
	return checkName("requestedBy", p.RequestedBy)
}

// MarshalJSON encodes the payload with relations as [] rather than null
// when there are none, so the engine never sees a missing list.
func (p InitPayload) MarshalJSON() ([]byte, error) {
	type plain InitPayload // no methods: no recursion
	if p.Relations == nil {
		p.Relations = []Relation{}
	}
	return json.Marshal(plain(p))
}

// MetadataPayload is the graph.metadata payload: entity EntityType/EntityID
// is now called Label. It is delivered as PUT PathMetadata with the type
// and id in the path and {"label": …} as the body.
type MetadataPayload struct {
	EntityType string `json:"entityType"`
	EntityID   string `json:"entityId"`
	// Label is the entity's display name. It may be empty (the label was
	// removed).
	Label string `json:"label"`
}

// Validate reports the first thing the engine would refuse, as an error
// wrapping ErrInvalidPayload that names the field.
func (p MetadataPayload) Validate() error {
	if err := checkName("entityType", p.EntityType); err != nil {
		return err
	}
	if err := checkName("entityId", p.EntityID); err != nil {
		return err
	}
	switch {
	case len(p.Label) > MaxLabelLength:
		return invalidPayload("label is %d bytes long, the limit is %d", len(p.Label), MaxLabelLength)
	case !utf8.ValidString(p.Label):
		return invalidPayload("label is not valid UTF-8")
	case strings.IndexByte(p.Label, 0) >= 0:
		return invalidPayload("label contains a NUL character")
	}
	return nil
}

// checkName is the rule for identifiers: 1..MaxNameLength bytes of UTF-8
// without control characters (a tab or a newline in an id is always a bug
// upstream, and invisible in every log that shows it).
func checkName(field, s string) error {
	switch {
	case s == "":
		return invalidPayload("%s is empty", field)
	case len(s) > MaxNameLength:
		return invalidPayload("%s is %d bytes long, the limit is %d", field, len(s), MaxNameLength)
	case !utf8.ValidString(s):
		return invalidPayload("%s %q is not valid UTF-8", field, s)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return invalidPayload("%s %q contains a control character", field, s)
	}
	return nil
}

// EnqueueFunc writes one outbox entry. Every backend's enqueue fits it
// through a closure over the caller's transaction, for example:
//
//	enqueue := func(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
//		return pgxstore.Enqueue(ctx, tx, id, lane, payload)
//	}
type EnqueueFunc func(ctx context.Context, id outbox.ID, lane string, payload []byte) error

// EnqueueInit validates p and enqueues it on LaneInit with id (normally
// outbox.NewID()). Call it inside the transaction that created the
// resource, after that transaction's write to the resource's own row.
func EnqueueInit(ctx context.Context, enqueue EnqueueFunc, id outbox.ID, p InitPayload) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return enqueueJSON(ctx, enqueue, id, LaneInit, p)
}

// EnqueueMetadata validates p and enqueues it on LaneMetadata with id
// (normally outbox.NewID()). Call it inside the transaction that changed
// the label, after that transaction's write to the entity's own row.
func EnqueueMetadata(ctx context.Context, enqueue EnqueueFunc, id outbox.ID, p MetadataPayload) error {
	if err := p.Validate(); err != nil {
		return err
	}
	return enqueueJSON(ctx, enqueue, id, LaneMetadata, p)
}

func enqueueJSON(ctx context.Context, enqueue EnqueueFunc, id outbox.ID, lane string, v any) error {
	if enqueue == nil {
		return invalidArgument("the enqueue function is nil")
	}
	if id.IsNil() {
		return fmt.Errorf("%w: the id is the nil UUID; use outbox.NewID()", outbox.ErrInvalidEntry)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("baton/graph: encoding the %s payload: %w", lane, err)
	}
	return enqueue(ctx, id, lane, b)
}

// decodeInit reads a stored graph.init payload. Unknown fields are
// accepted, so an entry written by a newer producer still delivers.
func decodeInit(b []byte) (InitPayload, error) {
	var p InitPayload
	if err := json.Unmarshal(b, &p); err != nil {
		return p, invalidPayload("the %s payload does not decode: %v", LaneInit, err)
	}
	return p, p.Validate()
}

func decodeMetadata(b []byte) (MetadataPayload, error) {
	var p MetadataPayload
	if err := json.Unmarshal(b, &p); err != nil {
		return p, invalidPayload("the %s payload does not decode: %v", LaneMetadata, err)
	}
	return p, p.Validate()
}

// metadataBody is the PUT body of a graph.metadata delivery.
type metadataBody struct {
	Label string `json:"label"`
}

// MetadataPath is the request path of a graph.metadata delivery for the
// entity, with both segments escaped.
func MetadataPath(entityType, entityID string) string {
	return "/api/v3/graph/entities/" + segment(entityType) + "/" + segment(entityID) + "/metadata"
}

// ProjectionPath is the request path of a subject's grants, with both
// segments escaped.
func ProjectionPath(subjectType, subjectID string) string {
	return "/api/v3/graph/projections/" + segment(subjectType) + "/" + segment(subjectID)
}
