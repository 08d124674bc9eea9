package bunstore

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
	"time"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/workrow"
)

// The tables of baton's schema, one bun model each, for services that read
// them with bun. The migration files create them (Migrate); the models
// carry their names, column types, nullability and defaults, and a test
// checks every model against the catalog of a migrated schema.
const (
	LockFencesTable       = pgsql.LockFencesTable
	LeaseTable            = pgsql.LeaseTable
	OutboxTable           = pgsql.OutboxTable
	OutboxStateTable      = pgsql.OutboxStateTable
	OutboxDeadTable       = pgsql.OutboxDeadTable
	ProjectionHeaderTable = pgsql.ProjectionHeaderTable
	ProjectionDetailTable = pgsql.ProjectionDetailTable
)

// LockFence is a row of baton_lock_fences: the fencing counter of one
// PostgreSQL advisory lock name (locks/pglock).
type LockFence struct {
	bun.BaseModel `bun:"table:baton_lock_fences,alias:baton_lock_fence"`

	Name      string    `bun:"name,pk,type:text"`
	Token     int64     `bun:"token,notnull,type:bigint,default:0"`
	UpdatedAt time.Time `bun:"updated_at,notnull,type:timestamptz,default:now()"`
}

// RoleLease is a row of baton_role_leases: one role's lease. Expiry is
// judged by the database clock; read it for display, never compare it with
// a local clock.
type RoleLease struct {
	bun.BaseModel `bun:"table:baton_role_leases,alias:baton_role_lease"`

	Role          string    `bun:"role,pk,type:text"`
	Holder        string    `bun:"holder,notnull,type:text"`
	HolderAddress string    `bun:"holder_address,notnull,type:text,default:''"`
	Token         int64     `bun:"token,notnull,type:bigint"`
	AcquiredAt    time.Time `bun:"acquired_at,notnull,type:timestamptz"`
	RenewedAt     time.Time `bun:"renewed_at,notnull,type:timestamptz"`
	ExpiresAt     time.Time `bun:"expires_at,notnull,type:timestamptz"`
}

// OutboxEntry is a row of baton_outbox. Write entries with Enqueue, which
// validates them; XID and CreatedAt come from the column defaults (a zero
// value makes bun write DEFAULT). TraceContext is the producer's W3C trace
// context as outbox.TraceContext.Encode writes it (read it with
// outbox.DecodeTraceContext), nil for none.
type OutboxEntry struct {
	bun.BaseModel `bun:"table:baton_outbox,alias:baton_outbox"`

	XID          uint64          `bun:"xid,notnull,nullzero,type:xid8,default:pg_current_xact_id()"`
	ID           UUID            `bun:"id,pk,type:uuid"`
	Lane         string          `bun:"lane,notnull,type:text"`
	Payload      json.RawMessage `bun:"payload,notnull,type:jsonb"`
	CreatedAt    time.Time       `bun:"created_at,notnull,nullzero,type:timestamptz,default:now()"`
	TraceContext *string         `bun:"trace_context,type:text"`
}

// OutboxState is a row of baton_outbox_state: one fact the outbox keeps
// about itself (outbox.StateKeys).
type OutboxState struct {
	bun.BaseModel `bun:"table:baton_outbox_state,alias:baton_outbox_state"`

	Key   string  `bun:"key,pk,type:text"`
	Value *string `bun:"value,type:text"`
}

// OutboxDeadLetter is a row of baton_outbox_dead: a parked entry, with its
// entry's trace context (as OutboxEntry's).
type OutboxDeadLetter struct {
	bun.BaseModel `bun:"table:baton_outbox_dead,alias:baton_outbox_dead"`

	ID         UUID            `bun:"id,pk,type:uuid"`
	XID        uint64          `bun:"xid,notnull,type:xid8"`
	Lane       string          `bun:"lane,notnull,type:text"`
	Payload    json.RawMessage `bun:"payload,notnull,type:jsonb"`
	Error      string          `bun:"error,notnull,type:text"`
	ParkedAt   time.Time       `bun:"parked_at,notnull,nullzero,type:timestamptz,default:now()"`
	RequeuedAs UUID            `bun:"requeued_as,type:uuid"`
	RequeuedAt bun.NullTime    `bun:"requeued_at,type:timestamptz"`
	// TraceContext is the parked entry's, as OutboxEntry.TraceContext.
	TraceContext *string `bun:"trace_context,type:text"`
}

// ProjectionHeader is a row of baton_projection_header (UNLOGGED): one
// generation of one subject's projection.
type ProjectionHeader struct {
	bun.BaseModel `bun:"table:baton_projection_header,alias:baton_projection_header"`

	Generation  int64     `bun:"generation,pk,type:bigint,default:nextval('baton_projection_generation')"`
	SubjectType string    `bun:"subject_type,notnull,type:text"` // COLLATE "C"
	SubjectID   string    `bun:"subject_id,notnull,type:text"`   // COLLATE "C"
	Active      bool      `bun:"active,notnull,type:boolean,default:false"`
	CreatedAt   time.Time `bun:"created_at,notnull,nullzero,type:timestamptz,default:now()"`
}

// ProjectionDetail is a row of baton_projection_detail (UNLOGGED): one
// resource's mask in one generation. Mask holds the 64-bit mask's bit
// pattern as a signed bigint.
type ProjectionDetail struct {
	bun.BaseModel `bun:"table:baton_projection_detail,alias:baton_projection_detail"`

	Generation   int64  `bun:"generation,pk,type:bigint"`
	ResourceType string `bun:"resource_type,pk,type:text"` // COLLATE "C"
	ResourceID   string `bun:"resource_id,pk,type:text"`   // COLLATE "C"
	Mask         int64  `bun:"mask,notnull,type:bigint"`
}

// Models returns one pointer of every baton model, in creation order, for
// db.RegisterModel or for tools that take models (for example to keep an
// AutoMigrator's hands off baton's tables; see docs/bun.md).
func Models() []any {
	return []any{
		(*LockFence)(nil), (*RoleLease)(nil),
		(*OutboxEntry)(nil), (*OutboxState)(nil), (*OutboxDeadLetter)(nil),
		(*ProjectionHeader)(nil), (*ProjectionDetail)(nil),
	}
}

// UUID is a uuid column as bun reads and writes it: the 16 bytes, NULL
// when all are zero. It converts to outbox.ID and workrow.LockID.
type UUID [16]byte

// IsZero reports whether u is the zero UUID (NULL in the column).
func (u UUID) IsZero() bool { return u == UUID{} }

// String is the canonical lower-case form with hyphens.
func (u UUID) String() string { return outbox.ID(u).String() }

// Value implements driver.Valuer: the canonical text, or NULL for the zero
// UUID.
func (u UUID) Value() (driver.Value, error) {
	if u.IsZero() {
		return nil, nil
	}
	return u.String(), nil
}

// Scan implements sql.Scanner for the text (or 16-byte) forms drivers
// return; NULL scans as the zero UUID.
func (u *UUID) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*u = UUID{}
		return nil
	case string:
		return u.parse(v)
	case []byte:
		if len(v) == 16 {
			copy(u[:], v)
			return nil
		}
		return u.parse(string(v))
	case [16]byte:
		*u = v
		return nil
	}
	return fmt.Errorf("baton/bunstore: cannot scan %T into a UUID", src)
}

func (u *UUID) parse(s string) error {
	id, err := outbox.ParseID(s)
	if err != nil {
		return err
	}
	*u = UUID(id)
	return nil
}

// LockColumns are the two columns baton stamps on a work row: embed them in
// the application's bun model of a work table,
//
//	type Delivery struct {
//		bun.BaseModel `bun:"table:deliveries,alias:d"`
//		ID          int64 `bun:",pk,autoincrement"`
//		...
//		bunstore.LockColumns
//	}
//
// so that CreateTable gives the table lock_id (uuid) and locked_until
// (timestamptz), both nullable, and a claimed row shows whose it is.
type LockColumns struct {
	// LockID is the claim that holds the row, zero (NULL) when none does.
	LockID UUID `bun:"lock_id,type:uuid"`
	// LockedUntil is when the claim's lease ends, or, after a failed
	// attempt, when the row becomes claimable again. Zero (NULL) when free.
	LockedUntil bun.NullTime `bun:"locked_until,type:timestamptz"`
}

// Lock returns the claim holding the row as a workrow.LockID (zero when
// free).
func (c LockColumns) Lock() workrow.LockID { return workrow.LockID(c.LockID) }
