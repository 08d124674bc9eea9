package projection

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton/core/internal/name"
)

// Length limits, in bytes of UTF-8. The PostgreSQL tables refuse longer
// subjects too.
const (
	MaxSubjectTypeLength  = 128
	MaxSubjectIDLength    = 256
	MaxResourceTypeLength = 128
	MaxResourceIDLength   = 256
)

var (
	// ErrNoProjection means the store holds no active generation for the
	// subject: it was never refreshed, or (PostgreSQL, whose projection
	// tables are UNLOGGED) the database restarted after a crash and came
	// back with empty tables. It calls for a refresh. It NEVER means "the
	// subject has no access": a subject the engine grants nothing has an
	// empty generation, and its reads answer "not found" without this error.
	ErrNoProjection = errors.New("baton/projection: no projection of the subject; refresh it")

	// ErrInvalidSubject is returned (wrapped, with the reason) for a
	// subject whose type or ID is empty, too long, not UTF-8 or contains a
	// NUL byte. Nothing is read or written.
	ErrInvalidSubject = errors.New("baton/projection: invalid subject")

	// ErrInvalidGrant is returned (wrapped, naming the grant) by Replace
	// for a grant set with an invalid resource type or ID, or with one
	// resource listed twice. Nothing is written.
	ErrInvalidGrant = errors.New("baton/projection: invalid grant")

	// ErrInvalidGeneration is returned (wrapped, with the reason) by
	// Replace for a generation the store did not reserve (0, or above any
	// Reserve answered) or one it already holds. Nothing is written.
	ErrInvalidGeneration = errors.New("baton/projection: invalid generation")

	// ErrStale is returned by Replace when the subject's active generation
	// was reserved after the one offered: a refresh whose fetch started
	// later has already flipped, so this older answer is dropped and the
	// fresher one stays. Nothing is written. It is not a failure, and no
	// retry is needed; the refreshers treat it as "someone fresher won".
	ErrStale = errors.New("baton/projection: stale refresh: a generation reserved later is already active")
)

// Subject is who a projection is for: a user, a service account, ... as
// the engine names them.
type Subject struct {
	Type string
	ID   string
}

// String is "type:id", for messages.
func (s Subject) String() string { return s.Type + ":" + s.ID }

// Validate rejects a subject a store must not act on: an empty, too long
// (MaxSubjectTypeLength, MaxSubjectIDLength), non-UTF-8 or NUL-holding type
// or ID.
func (s Subject) Validate() error {
	if p := name.Problem(s.Type, MaxSubjectTypeLength); p != "" {
		return fmt.Errorf("%w: Subject.Type: %s", ErrInvalidSubject, p)
	}
	if p := name.Problem(s.ID, MaxSubjectIDLength); p != "" {
		return fmt.Errorf("%w: Subject.ID: %s", ErrInvalidSubject, p)
	}
	return nil
}

// Grant is one resource a subject can touch, with the bits it holds there.
type Grant struct {
	ResourceType string
	ResourceID   string
	Mask         Mask
}

// CompareGrants orders grants by resource type, then resource ID, byte by
// byte: the order in which Snapshot lists them.
func CompareGrants(a, b Grant) int {
	if c := cmp.Compare(a.ResourceType, b.ResourceType); c != 0 {
		return c
	}
	return cmp.Compare(a.ResourceID, b.ResourceID)
}

// ValidateResource rejects a resource type or ID that no grant can carry:
// empty, too long (MaxResourceTypeLength, MaxResourceIDLength), not UTF-8
// or holding a NUL byte. Stores check point reads with it.
func ValidateResource(resourceType, resourceID string) error {
	if p := resourceProblem(resourceType, resourceID); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidGrant, p)
	}
	return nil
}

func resourceProblem(resourceType, resourceID string) string {
	if p := name.Problem(resourceType, MaxResourceTypeLength); p != "" {
		return "ResourceType: " + p
	}
	if p := name.Problem(resourceID, MaxResourceIDLength); p != "" {
		return "ResourceID: " + p
	}
	return ""
}

// ValidateGrants rejects a grant set that cannot be a generation: a grant
// with an invalid resource type or ID, or a resource listed twice (the
// engine gives one mask per resource). An empty set is valid: the subject
// has no access anywhere. Stores call it before writing anything.
func ValidateGrants(grants []Grant) error {
	type resource struct{ typ, id string }
	seen := make(map[resource]int, len(grants))
	for i, g := range grants {
		if p := resourceProblem(g.ResourceType, g.ResourceID); p != "" {
			return fmt.Errorf("%w: grants[%d].%s", ErrInvalidGrant, i, p)
		}
		r := resource{g.ResourceType, g.ResourceID}
		if j, dup := seen[r]; dup {
			return fmt.Errorf("%w: grants[%d] and grants[%d] are both for %s %q; list each resource once", ErrInvalidGrant, j, i, g.ResourceType, g.ResourceID)
		}
		seen[r] = i
	}
	return nil
}

// Generation numbers a complete grant set of one subject, and orders the
// refreshes of a subject. A refresh reserves its number from the store
// (Store.Reserve) before it fetches the grants, so a larger number means a
// fetch that started later, by the store's own sequence and never by a
// node's clock. Numbers are unique within a store; 0 is never a generation.
type Generation uint64

// Snapshot is a subject's active generation, read in one piece.
type Snapshot struct {
	Subject    Subject
	Generation Generation
	// Grants are in CompareGrants order, one per resource; empty (never
	// an error) when the engine granted the subject nothing.
	Grants []Grant
}

// GenerationInfo describes one stored generation of a subject.
type GenerationInfo struct {
	Generation Generation
	// Active is true for the one generation that reads answer from; the
	// others are superseded and wait for a sweep.
	Active bool
	// CreatedAt is when the generation was written, by the store's clock.
	// Zero when the store does not keep it.
	CreatedAt time.Time
}

// Store is the adapter side of projections: generations of grant sets, one
// active per subject. Implementations must be safe for concurrent use, also
// from several processes when the store is shared (PostgreSQL);
// conformance.RunProjectionStore is the executable contract.
//
// A refresh is Reserve, then the fetch from the Source, then Replace with
// the reserved generation. The active generation of a subject is always
// the largest it holds: Replace refuses (ErrStale) a generation reserved
// before the active one, so an answer fetched earlier never replaces one
// fetched later, whatever order the flips arrive in. A revoked grant
// cannot come back through a slow refresh.
//
// Writing and flipping are one method. Replace writes a whole generation and
// makes it the active one atomically: a reader sees the previous
// generation, then the new one, and never a part of either. Keeping them
// together lets each store pick its own atomic step: the memory store swaps
// a pointer under its lock; the PostgreSQL store copies the rows and flips
// the header in one transaction, taking its only contended lock just
// before the commit. There is no state in which a half-written generation
// can outlive a failed or abandoned Replace, so a store never has to tell a
// generation being built from a superseded one.
//
// The rules a store keeps are numbered P1 to P18 on the methods below and
// here; conformance.RunProjectionStore checks each one with a subtest of
// its own (docs/adapters.md lists which). Besides the methods' own:
//
//   - P17 context: every method called with an ended context fails with an
//     error that wraps ctx.Err(), and a Replace writes nothing.
//   - P18 schema: a store over a database without its tables fails every
//     call with the adapter's schema-mismatch error, and never with
//     ErrNoProjection, which would call for a refresh that cannot help.
type Store interface {
	// Reserve draws a new generation number for one Replace. Call it
	// before fetching the grants that generation will hold. A reserved
	// number that is never used is simply skipped.
	//
	//   - P11 reservations: every number is larger than every number drawn
	//     before it from this store, by any node sharing it; concurrent
	//     reservations are all distinct.
	Reserve(ctx context.Context) (Generation, error)

	// Replace writes grants as generation gen of subject and makes it the
	// subject's active generation, superseding the previous one, all at
	// once.
	//
	//   - P1 activate: the new generation is active at once, through every
	//     store over the same data; its grants read back in CompareGrants
	//     order, whatever order they were written in, and a resource only
	//     the superseded generation granted is gone. Generations lists both
	//     until a sweep, with CreatedAt when the store keeps it.
	//   - P2 empty set: an empty grant set is a generation like any other:
	//     the subject is known to have no access anywhere, and replacing a
	//     generation with one revokes everything.
	//   - P3 masks: every mask comes back with all 64 bits as written.
	//   - P4 size: a generation of 20,000 grants is written and read back
	//     whole.
	//   - P5 failure: when Replace fails, the previous generation stays
	//     active and nothing of the new one is visible; a failed (not
	//     stale) Replace may be retried with the same generation.
	//   - P8 never a mix: a reader sees the previous generation, then the
	//     new one, and never a part of either, whatever it reads with and
	//     while sweeps run.
	//   - P9 one active: after every Replace exactly one generation of the
	//     subject is active, the one just written.
	//   - P10 serialized: concurrent Replace calls for one subject are
	//     serialized: exactly one generation is active at every moment and
	//     afterwards, the largest that was written, and each call writes the
	//     generation it was given and no other.
	//   - P12 stale: when the subject's active generation is larger than
	//     gen, Replace writes nothing and returns an error wrapping ErrStale
	//     (not ErrInvalidGeneration), also after sweeps; the order is per
	//     subject.
	//   - P13 any order: flips of reserved generations arriving in any
	//     order, concurrently, only ever move the active generation up, to
	//     the largest; each one either writes or is stale.
	//   - P16 bad input: an invalid subject (ErrInvalidSubject), grant set
	//     (ValidateGrants, ErrInvalidGrant) or generation (0, one never
	//     reserved, or one already written: ErrInvalidGeneration) is
	//     refused and writes nothing; a never-reserved number does not move
	//     the store on. Mask and Snapshot refuse an invalid subject, Mask an
	//     invalid resource (ErrInvalidGrant), the same way.
	Replace(ctx context.Context, subject Subject, gen Generation, grants []Grant) error

	// Mask reads the mask of one resource in the subject's active
	// generation. found is false when the generation has no grant for the
	// resource (no access there).
	//
	//   - P6 no projection: with no active generation, Mask and Snapshot
	//     return an error wrapping ErrNoProjection, never an answer, even
	//     when other subjects have one; Generations is empty and Sweep
	//     deletes nothing.
	//   - P7 point reads: the answer is the active generation's mask for
	//     that resource type and ID, both part of the key, as are the
	//     subject's type and ID; a granted mask of 0 is found.
	Mask(ctx context.Context, subject Subject, resourceType, resourceID string) (mask Mask, found bool, err error)

	// Snapshot reads the subject's whole active generation, in one
	// consistent read (P1, P6, P8).
	Snapshot(ctx context.Context, subject Subject) (Snapshot, error)

	// Generations lists the subject's stored generations, oldest first:
	// the active one and any superseded ones not yet swept. It is for
	// inspection and tests; no read path needs it (P1, P9).
	Generations(ctx context.Context, subject Subject) ([]GenerationInfo, error)

	// Sweep deletes every superseded generation, of every subject, and
	// returns how many it deleted. It takes no lock.
	//
	//   - P14 superseded only: it never touches an active generation, so
	//     readers are unaffected; a sweep with nothing to do deletes
	//     nothing.
	//   - P15 parallel: of concurrent sweeps, one per node, each superseded
	//     generation is deleted by exactly one, and the counts add up to
	//     the generations deleted.
	Sweep(ctx context.Context) (int, error)
}

// Source fetches a subject's grants from the engine that computes them. An
// empty answer means the subject has no access anywhere; an error means
// nothing is known, and no generation is written.
type Source interface {
	Grants(ctx context.Context, subject Subject) ([]Grant, error)
}

// SourceFunc adapts a function to Source.
type SourceFunc func(ctx context.Context, subject Subject) ([]Grant, error)

// Grants calls f.
func (f SourceFunc) Grants(ctx context.Context, subject Subject) ([]Grant, error) {
	return f(ctx, subject)
}

// refresh reserves a generation, fetches subject's grants from source and
// replaces its projection in store with them. The reservation comes first:
// it is what orders this fetch against concurrent ones. An error wrapping
// ErrStale means a refresh that fetched later has flipped already.
func refresh(ctx context.Context, store Store, source Source, subject Subject) (Generation, error) {
	gen, err := store.Reserve(ctx)
	if err != nil {
		return 0, fmt.Errorf("baton/projection: refresh %s: reserving a generation: %w", subject, err)
	}
	grants, err := source.Grants(ctx, subject)
	if err != nil {
		return 0, fmt.Errorf("baton/projection: refresh %s: fetching the grants: %w", subject, err)
	}
	if err := store.Replace(ctx, subject, gen, grants); err != nil {
		return 0, fmt.Errorf("baton/projection: refresh %s: %w", subject, err)
	}
	return gen, nil
}
