package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

// WorkRow is a row of the work-rows suite's table. The factory creates, for
// each subtest, an empty table with these columns plus the two lock
// columns, and its claim index (WorkRowsOrder then id, partial over
// WorkRowsLive). In SQL:
//
//	id           bigint PRIMARY KEY
//	seq          bigint NOT NULL          -- the queue order
//	attempts     integer NOT NULL         -- counted at claim
//	completed_at timestamptz NULL         -- the live-row filter: IS NULL
//	last_error   text NULL
//	lock_id      uuid NULL
//	locked_until timestamptz NULL
type WorkRow struct {
	ID          int64      `db:"id"`
	Seq         int64      `db:"seq"`
	Attempts    int        `db:"attempts"`
	CompletedAt *time.Time `db:"completed_at"`
	LastError   *string    `db:"last_error"`
}

// WorkRowState is a row as the harness reads it back: with its lock
// columns, the zero LockID and time standing for NULL.
type WorkRowState struct {
	WorkRow
	LockID      workrow.LockID
	LockedUntil time.Time
}

// The claim index of the suite's table, and the live-row filter a store
// over it needs.
var (
	WorkRowsLive  = workrow.IsNull("completed_at")
	WorkRowsOrder = []workrow.Order{workrow.Asc("seq")}
)

// WorkRowsHarness is what a work-row store's factory returns for one
// subtest: a store over a fresh, empty table (see WorkRow) and the few
// operations the suite needs around it.
type WorkRowsHarness struct {
	// Store is the store under test.
	Store workrow.Store[int64, WorkRow]
	// Second, if set, is another store over the same table, as a second
	// node would have it (its own pool). Concurrent subtests spread over
	// both. nil means Store alone.
	Second workrow.Store[int64, WorkRow]
	// Insert adds rows as given, with NULL lock columns. Required.
	Insert func(ctx context.Context, rows []WorkRow) error
	// Read returns every row with its lock columns. Required.
	Read func(ctx context.Context) ([]WorkRowState, error)
	// ClaimIndexed returns the ids of the rows the claim index holds,
	// read through the index. Required unless WorkRowsFeatures.NoClaimIndex.
	ClaimIndexed func(ctx context.Context) ([]int64, error)
	// Signalled begins a producer's transaction that inserts rows as
	// Insert does and signals the table with the adapter's helper, and
	// returns it open. Required when Store is a workrow.Waker, unless
	// WorkRowsFeatures.NoWake.
	Signalled func(ctx context.Context, rows []WorkRow) (WorkRowsTx, error)
	// Unmigrated, if set, returns a harness whose Store works on a table
	// that does not exist (Insert, Read and ClaimIndexed are not used).
	// Every call of it must fail with an error wrapping SchemaMismatch.
	// nil skips that subtest.
	Unmigrated func(t *testing.T) WorkRowsHarness
	// SchemaMismatch is the adapter's error for a missing table or a
	// table of the wrong shape, which Unmigrated's calls wrap.
	SchemaMismatch error
}

// WorkRowsFeatures declares what a work-row store cannot do. The zero value
// expects everything.
type WorkRowsFeatures struct {
	// NoClaimIndex means the store has no index to inspect; the claim
	// index subtest then only checks that finished rows are never claimed
	// again.
	NoClaimIndex bool
	// NoWake means the store does not implement workrow.Waker: workers
	// poll. The wake-up subtests are skipped.
	NoWake bool
}

// Parameters of the work-rows subtests.
const (
	wrMaxAttempts   = 5
	wrLease         = time.Minute
	wrClaimers      = 8
	wrConcurrentRow = 400
	wrWorkerRows    = 300
	wrWorkers       = 4
	// wrConcurrency is the handlers per worker of the concurrent-handlers
	// subtest, above its batch size so that claims refill the hand while
	// handlers still run.
	wrConcurrency = 24
)

// RunWorkRows runs the workrow.Store contract against the stores the
// factory returns: one subtest per rule written on workrow.Store (W1, W2,
// ...), named as docs/adapters.md lists them.
//
// Leases are judged by ClaimSpec.Now, so most subtests move time by
// passing later Nows rather than by sleeping; the workers subtest runs
// workrow.Worker in real time.
func RunWorkRows(t *testing.T, factory func(t *testing.T) WorkRowsHarness, features WorkRowsFeatures) {
	runChecks(t, newWorkRowsSuite(factory, features).checks())
}

type workRowsSuite struct {
	factory func(t *testing.T) WorkRowsHarness
	f       WorkRowsFeatures
}

func newWorkRowsSuite(factory func(t *testing.T) WorkRowsHarness, features WorkRowsFeatures) *workRowsSuite {
	return &workRowsSuite{factory: factory, f: features}
}

// checks lists the suite's subtests, area by area.
func (s *workRowsSuite) checks() []check {
	return concat(s.claimChecks(), s.finalizeChecks(), s.workerChecks(), s.inputChecks(), s.wakeChecks(), s.severalClaimsChecks())
}

// workRowsBundle is what every work-rows subtest starts from.
type workRowsBundle struct {
	h   WorkRowsHarness
	ctx context.Context
}

// setup is the setup of every work-rows area: a store over a fresh, empty
// table.
func (s *workRowsSuite) setup(t *testing.T) workRowsBundle {
	t.Helper()
	h := s.factory(t)
	switch {
	case h.Store == nil:
		t.Fatal("conformance: the factory returned no Store")
	case h.Insert == nil || h.Read == nil:
		t.Fatal("conformance: the factory returned no Insert or Read")
	case h.ClaimIndexed == nil && !s.f.NoClaimIndex:
		t.Fatal("conformance: the factory returned no ClaimIndexed (declare NoClaimIndex if the store has no index)")
	}
	if h.Second == nil {
		h.Second = h.Store
	}
	return workRowsBundle{h: h, ctx: testCtx(t)}
}

// wrBase is a subtest's time origin, at the stores' microsecond resolution.
func wrBase() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

// wrEligible is the suite's claim predicate: not completed, attempts left.
var wrEligible = workrow.And(workrow.IsNull("completed_at"), workrow.Lt("attempts", wrMaxAttempts))

func wrSpec(now time.Time, batch int) workrow.ClaimSpec {
	return workrow.ClaimSpec{
		LockID:     workrow.NewLockID(),
		Now:        now,
		LeaseUntil: now.Add(wrLease),
		BatchSize:  batch,
		Eligible:   wrEligible,
		Order:      WorkRowsOrder,
		OnClaim:    []workrow.Set{workrow.Add("attempts", 1)},
	}
}

func wrComplete(at time.Time) []workrow.Set { return []workrow.Set{workrow.Assign("completed_at", at)} }

func wrInsert(t *testing.T, ctx context.Context, h WorkRowsHarness, rows ...WorkRow) {
	t.Helper()
	if err := h.Insert(ctx, rows); err != nil {
		t.Fatalf("Insert: %v", err)
	}
}

// fresh returns n new rows, ids 1..n, queued in id order.
func wrFresh(n int) []WorkRow {
	rows := make([]WorkRow, n)
	for i := range rows {
		rows[i] = WorkRow{ID: int64(i + 1), Seq: int64(10 * (i + 1))}
	}
	return rows
}

func wrRead(t *testing.T, ctx context.Context, h WorkRowsHarness) map[int64]WorkRowState {
	t.Helper()
	rows, err := h.Read(ctx)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	out := make(map[int64]WorkRowState, len(rows))
	for _, r := range rows {
		out[r.ID] = r
	}
	return out
}

func wrClaim(t *testing.T, ctx context.Context, st workrow.Store[int64, WorkRow], sp workrow.ClaimSpec) []workrow.Claimed[int64, WorkRow] {
	t.Helper()
	got, err := st.Claim(ctx, sp)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	for _, c := range got {
		if c.ID != c.Row.ID {
			t.Fatalf("Claim returned id %d with a row whose id is %d", c.ID, c.Row.ID)
		}
	}
	return got
}

func wrIDs(claimed []workrow.Claimed[int64, WorkRow]) []int64 {
	out := make([]int64, len(claimed))
	for i, c := range claimed {
		out[i] = c.ID
	}
	return out
}

func wrFinalize(t *testing.T, ctx context.Context, st workrow.Store[int64, WorkRow], lock workrow.LockID, finals ...workrow.Final[int64]) []bool {
	t.Helper()
	owned, err := st.FinalizeMany(ctx, lock, finals)
	if err != nil {
		t.Fatalf("FinalizeMany: %v", err)
	}
	if len(owned) != len(finals) {
		t.Fatalf("FinalizeMany answered %d results for %d rows", len(owned), len(finals))
	}
	return owned
}

func wrSame(a, b WorkRowState) bool {
	eqTime := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	eqStr := func(x, y *string) bool { return (x == nil) == (y == nil) && (x == nil || *x == *y) }
	return a.ID == b.ID && a.Seq == b.Seq && a.Attempts == b.Attempts && eqTime(a.CompletedAt, b.CompletedAt) &&
		eqStr(a.LastError, b.LastError) && a.LockID == b.LockID && a.LockedUntil.Equal(b.LockedUntil)
}

func wrDescribe(r WorkRowState) string {
	s := fmt.Sprintf("{id %d seq %d attempts %d", r.ID, r.Seq, r.Attempts)
	if r.CompletedAt != nil {
		s += " completed " + r.CompletedAt.UTC().Format(time.RFC3339Nano)
	}
	if r.LastError != nil {
		s += fmt.Sprintf(" error %q", *r.LastError)
	}
	if !r.LockID.IsZero() {
		s += " lock " + r.LockID.String()[:8]
	}
	if !r.LockedUntil.IsZero() {
		s += " until " + r.LockedUntil.UTC().Format(time.RFC3339Nano)
	}
	return s + "}"
}
