package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/core/workrow"
	lockmem "github.com/baton-go/baton/locks/memory"
)

// The reference adapters, wired to the suites as any adapter is, and run
// here too, so that a change to a suite the reference cannot pass fails
// in this package. The broken variants start from these harnesses.

// errNoTables is what the stand-in for a database without the tables
// fails with: the reference harnesses' SchemaMismatch.
var errNoTables = errors.New("the tables are missing (run the migrations)")

// noTables stands in for a store over a database without its tables: the
// memory stores have none, so it proves the suites' schema-mismatch
// subtests both ways. Every method of every store interface fails with
// err. The real proof is the PostgreSQL adapters' runs.
type noTables struct{ err error }

func (n noTables) fail(op string) error { return fmt.Errorf("%s: %w", op, n.err) }

func (n noTables) Heartbeat(context.Context, lease.HeartbeatRequest) ([]lease.Record, error) {
	return nil, n.fail("heartbeat")
}
func (n noTables) Release(context.Context, string, string, uint64) (bool, error) {
	return false, n.fail("release")
}
func (n noTables) Read(context.Context, []string) ([]lease.Record, error) { return nil, n.fail("read") }
func (n noTables) List(context.Context) ([]lease.Listed, error)           { return nil, n.fail("list") }

func (n noTables) Scan(context.Context, outbox.Cursor, int) ([]outbox.Entry, error) {
	return nil, n.fail("scan")
}
func (n noTables) Settle(context.Context, outbox.Settlement) error  { return n.fail("settle") }
func (n noTables) State(context.Context) (map[string]string, error) { return nil, n.fail("state") }
func (n noTables) NextXID(context.Context) (uint64, error)          { return 0, n.fail("next xid") }
func (n noTables) GetDead(context.Context, outbox.ID) (outbox.DeadLetter, error) {
	return outbox.DeadLetter{}, n.fail("get dead")
}
func (n noTables) ListDead(context.Context, outbox.ListOptions) ([]outbox.DeadLetter, error) {
	return nil, n.fail("list dead")
}
func (n noTables) Requeue(context.Context, outbox.ID, outbox.ID) error { return n.fail("requeue") }
func (n noTables) RequeueBatch(context.Context, outbox.RequeueBatch) (outbox.RequeueBatchResult, error) {
	return outbox.RequeueBatchResult{}, n.fail("requeue batch")
}
func (n noTables) DeleteDelivered(context.Context, outbox.Cursor, time.Duration, int) (int, error) {
	return 0, n.fail("delete delivered")
}
func (n noTables) DeleteRequeued(context.Context, time.Duration, int) (int, error) {
	return 0, n.fail("delete requeued")
}

// Begin, Enqueue, Commit and Rollback make it the producer of an outbox
// without tables too.
func (n noTables) Begin(context.Context) (conformance.OutboxTx, error) { return n, nil }
func (n noTables) Enqueue(context.Context, outbox.ID, string, []byte) error {
	return n.fail("enqueue")
}
func (n noTables) Commit(context.Context) error   { return n.fail("commit") }
func (n noTables) Rollback(context.Context) error { return nil }

func (n noTables) Reserve(context.Context) (projection.Generation, error) {
	return 0, n.fail("reserve")
}
func (n noTables) Replace(context.Context, projection.Subject, projection.Generation, []projection.Grant) error {
	return n.fail("replace")
}
func (n noTables) Mask(context.Context, projection.Subject, string, string) (projection.Mask, bool, error) {
	return 0, false, n.fail("mask")
}
func (n noTables) Snapshot(context.Context, projection.Subject) (projection.Snapshot, error) {
	return projection.Snapshot{}, n.fail("snapshot")
}
func (n noTables) Generations(context.Context, projection.Subject) ([]projection.GenerationInfo, error) {
	return nil, n.fail("generations")
}
func (n noTables) Sweep(context.Context) (int, error) { return 0, n.fail("sweep") }

func (n noTables) Claim(context.Context, workrow.ClaimSpec) ([]workrow.Claimed[int64, conformance.WorkRow], error) {
	return nil, n.fail("claim")
}
func (n noTables) FinalizeMany(context.Context, workrow.LockID, []workrow.Final[int64]) ([]bool, error) {
	return nil, n.fail("finalize")
}
func (n noTables) RenewMany(context.Context, workrow.LockID, time.Time, []int64) ([]bool, error) {
	return nil, n.fail("renew")
}
func (n noTables) ReleaseMany(context.Context, workrow.LockID, []int64) ([]bool, error) {
	return nil, n.fail("release")
}

var (
	_             lease.Store                               = noTables{}
	_             outbox.Store                              = noTables{}
	_             projection.Store                          = noTables{}
	_             workrow.Store[int64, conformance.WorkRow] = noTables{}
	_             conformance.OutboxProducer                = noTables{}
	_             conformance.OutboxTx                      = noTables{}
	missingTables                                           = noTables{err: errNoTables}
)

// Locks: the memory provider, with a short TTL so that a taken-away lock
// is noticed fast.

func newLockProvider(t *testing.T) *lockmem.Provider {
	t.Helper()
	p, err := lockmem.NewProvider(lockmem.Options{TTL: 600 * time.Millisecond, SafetyMargin: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func lockHarness(p *lockmem.Provider, provider lock.Provider) conformance.LockHarness {
	return conformance.LockHarness{
		Provider: provider,
		TakeAway: func(_ context.Context, name string) error {
			p.TakeAway(name)
			return nil
		},
	}
}

var lockFeatures = conformance.LockFeatures{LossDetection: time.Second}

func TestRunLockProvider_PassesTheMemoryProvider(t *testing.T) {
	skipInChild(t)
	conformance.RunLockProvider(t, func(t *testing.T) conformance.LockHarness {
		p := newLockProvider(t)
		return lockHarness(p, p)
	}, lockFeatures)
}

// Leases: the memory store on a clock a variant may move.

// leaseClock is the memory lease store's clock: the real one, unless a
// variant pins it for the call it is making.
type leaseClock struct {
	mu  sync.Mutex
	pin time.Time
}

func (c *leaseClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.pin.IsZero() {
		return c.pin
	}
	return time.Now()
}

// pinned runs f with the clock pinned at at.
func (c *leaseClock) pinned(at time.Time, f func()) {
	c.mu.Lock()
	c.pin = at
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.pin = time.Time{}
		c.mu.Unlock()
	}()
	f()
}

func newLeaseStore() (*memory.LeaseStore, *leaseClock) {
	clk := &leaseClock{}
	memLeases, err := memory.NewLeaseStore(memory.LeaseStoreOptions{Now: clk.now})
	if err != nil {
		panic(err)
	}
	return memLeases, clk
}

func leaseHarness(st lease.Store) conformance.LeaseHarness {
	return conformance.LeaseHarness{
		Store:          st,
		Unmigrated:     func(*testing.T) conformance.LeaseHarness { return conformance.LeaseHarness{Store: missingTables} },
		SchemaMismatch: errNoTables,
	}
}

func TestRunLeaseStore_PassesTheMemoryStore(t *testing.T) {
	skipInChild(t)
	conformance.RunLeaseStore(t, func(t *testing.T) conformance.LeaseHarness {
		st, _ := newLeaseStore()
		return leaseHarness(st)
	}, conformance.LeaseFeatures{})
}

// Outboxes: the memory store, its own producer, settling atomically.

func outboxHarness(st *memory.OutboxStore) conformance.OutboxHarness {
	return conformance.OutboxHarness{
		Store:      st,
		Producer:   memoryProducer(st),
		HoldSettle: settleAtOnce(st),
		Unmigrated: func(*testing.T) conformance.OutboxHarness {
			return conformance.OutboxHarness{Store: missingTables, Producer: missingTables}
		},
		SchemaMismatch: errNoTables,
	}
}

func memoryProducer(st *memory.OutboxStore) conformance.OutboxProducer {
	return conformance.OutboxProducerFunc(func(ctx context.Context) (conformance.OutboxTx, error) {
		tx, err := st.Begin(ctx)
		if err != nil {
			return nil, err
		}
		return tx, nil
	})
}

// settleAtOnce is HoldSettle for a store that settles atomically: by the
// time it returns the settlement is committed, so nothing ever waits for
// it.
func settleAtOnce(st outbox.Store) func(context.Context, outbox.Settlement) (conformance.HeldSettlement, error) {
	return func(ctx context.Context, s outbox.Settlement) (conformance.HeldSettlement, error) {
		if err := st.Settle(ctx, s); err != nil {
			return nil, err
		}
		return settledAtOnce{}, nil
	}
}

type settledAtOnce struct{}

func (settledAtOnce) Blocking(context.Context) (bool, error) { return false, nil }
func (settledAtOnce) Commit(context.Context) error           { return nil }
func (settledAtOnce) Rollback(context.Context) error         { return nil }

// outboxFeatures: entries are visible at once in memory; a variant that
// hides one fails in 2s instead of the default 10s.
var outboxFeatures = conformance.OutboxFeatures{VisibilityWait: 2 * time.Second}

func TestRunOutboxStore_PassesTheMemoryStore(t *testing.T) {
	skipInChild(t)
	conformance.RunOutboxStore(t, func(t *testing.T) conformance.OutboxHarness {
		memOutbox, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return outboxHarness(memOutbox)
	}, outboxFeatures)
}

// Projections.

func projectionHarness(st projection.Store) conformance.ProjectionHarness {
	return conformance.ProjectionHarness{
		Store: st,
		Unmigrated: func(*testing.T) conformance.ProjectionHarness {
			return conformance.ProjectionHarness{Store: missingTables}
		},
		SchemaMismatch: errNoTables,
	}
}

func TestRunProjectionStore_PassesTheMemoryStore(t *testing.T) {
	skipInChild(t)
	conformance.RunProjectionStore(t, func(t *testing.T) conformance.ProjectionHarness {
		memProjections, err := memory.NewProjectionStore(memory.ProjectionStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return projectionHarness(memProjections)
	}, conformance.ProjectionFeatures{})
}

// Work rows: the memory store over the suite's table.

type workRowStore = memory.WorkRowStore[int64, conformance.WorkRow]

func newWorkRowStore(t *testing.T) *workRowStore {
	t.Helper()
	st, err := memory.NewWorkRowStore[int64, conformance.WorkRow](memory.WorkRowStoreOptions{
		Live: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func workRowsHarness(st *workRowStore, store workrow.Store[int64, conformance.WorkRow]) conformance.WorkRowsHarness {
	return conformance.WorkRowsHarness{
		Store:  store,
		Insert: func(ctx context.Context, rows []conformance.WorkRow) error { return st.Insert(ctx, rows...) },
		Read: func(ctx context.Context) ([]conformance.WorkRowState, error) {
			rows, err := st.Rows(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]conformance.WorkRowState, len(rows))
			for i, r := range rows {
				out[i] = conformance.WorkRowState{WorkRow: r.Row, LockID: r.LockID, LockedUntil: r.LockedUntil}
			}
			return out, nil
		},
		ClaimIndexed: st.ClaimIndex,
		Signalled: conformance.InsertOnCommit(func(ctx context.Context, rows []conformance.WorkRow) error {
			return st.Insert(ctx, rows...)
		}),
		Unmigrated:     func(*testing.T) conformance.WorkRowsHarness { return conformance.WorkRowsHarness{Store: missingTables} },
		SchemaMismatch: errNoTables,
	}
}

func TestRunWorkRows_PassesTheMemoryStore(t *testing.T) {
	skipInChild(t)
	conformance.RunWorkRows(t, func(t *testing.T) conformance.WorkRowsHarness {
		st := newWorkRowStore(t)
		return workRowsHarness(st, st)
	}, conformance.WorkRowsFeatures{})
}

// skipInChild skips a test in a child process, which runs one variant.
func skipInChild(t *testing.T) {
	t.Helper()
	for _, b := range brokenSuites() {
		if os.Getenv(b.env) != "" {
			t.Skip("child process")
		}
	}
}
