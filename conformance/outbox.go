package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// OutboxProducer begins the transactions entries are enqueued in: for a
// database adapter, the caller's own database transaction with the
// adapter's Enqueue on it.
type OutboxProducer interface {
	Begin(ctx context.Context) (OutboxTx, error)
}

// OutboxTx is one producer transaction.
type OutboxTx interface {
	// Enqueue writes an entry in the transaction. Invalid entries are
	// errors wrapping outbox.ErrInvalidEntry and write nothing.
	Enqueue(ctx context.Context, id outbox.ID, lane string, payload []byte) error
	Commit(ctx context.Context) error
	Rollback(ctx context.Context) error
}

// OutboxProducerFunc adapts a function to an OutboxProducer, so an
// adapter's harness needs no type of its own. Return a nil OutboxTx (not a
// typed nil pointer) with an error.
type OutboxProducerFunc func(ctx context.Context) (OutboxTx, error)

// Begin implements OutboxProducer.
func (f OutboxProducerFunc) Begin(ctx context.Context) (OutboxTx, error) { return f(ctx) }

// OutboxHarness is what an outbox store's factory returns. Every call must
// return a fresh, empty outbox (for a database, a schema of its own): the
// suite compares cursors and state across a whole subtest, and one subtest
// calls the factory several times to race settlements on an absent state.
type OutboxHarness struct {
	// Store is the store under test.
	Store outbox.Store
	// Producer writes entries into the same outbox, in transactions whose
	// xids come from the same counter as the store's (for PostgreSQL, the
	// same cluster).
	Producer OutboxProducer
	// HoldSettle applies a settlement as Store.Settle does, but stops just
	// before its commit and keeps it open until the returned
	// HeldSettlement ends it: for a database, the settling transaction with
	// everything written and every lock it took still held. Required: the
	// suite enqueues while a park is uncommitted.
	HoldSettle func(ctx context.Context, s outbox.Settlement) (HeldSettlement, error)
	// Unmigrated, if set, returns a harness (Store and Producer; HoldSettle
	// is not used) over a database without the outbox tables. Every call of
	// it must fail with an error wrapping SchemaMismatch. nil skips that
	// subtest: a store with no tables has nothing to miss.
	Unmigrated func(t *testing.T) OutboxHarness
	// SchemaMismatch is the adapter's error for a missing or different
	// schema, which Unmigrated's calls wrap.
	SchemaMismatch error
}

// HeldSettlement is a settlement applied and not yet committed.
type HeldSettlement interface {
	// Blocking reports whether another transaction (a producer's) is
	// waiting for this one to end.
	Blocking(ctx context.Context) (bool, error)
	// Commit commits the settlement.
	Commit(ctx context.Context) error
	// Rollback undoes it; after Commit it does nothing.
	Rollback(ctx context.Context) error
}

// OutboxFeatures declares what an outbox store cannot do, or how slow it
// may be. Every rule holds for every adapter so far; the zero value expects
// everything, with the default bound.
type OutboxFeatures struct {
	// VisibilityWait bounds how long a committed entry may take to appear
	// to Scan. 0 means 10s: on PostgreSQL the horizon is cluster-wide, and
	// any transaction open anywhere on the server, other tests' included,
	// holds it back for a while, so the suite never expects visibility at
	// once.
	VisibilityWait time.Duration
	// NoWake means the store does not implement outbox.Waker: its driver
	// polls. The wake-up subtests are skipped.
	NoWake bool
}

// Sizes of the outbox subtests.
const (
	// defaultVisibilityWait is VisibilityWait's default.
	defaultVisibilityWait = 10 * time.Second
	// outboxScanAll is a limit larger than any subtest's entry count.
	outboxScanAll = 1000
	// outboxSettleRounds and outboxSettlers shape the race of concurrent settlements.
	outboxSettleRounds = 10
	outboxSettlers     = 8
	// outboxWalkProducers, outboxWalkTxs and outboxWalkBatch shape the walk under load.
	outboxWalkProducers = 6
	outboxWalkTxs       = 15
	outboxWalkBatch     = 7
)

// RunOutboxStore runs the outbox.Store contract, the producer's Enqueue
// included, against the stores the factory returns: one subtest per rule
// written on outbox.Store (O1, O2, ...), named as docs/adapters.md lists
// them.
//
// The subtests assert that something is not visible only while they hold
// the older transaction open themselves, or behind a barrier (a later
// entry that has become visible), so they may share a PostgreSQL server
// with other tests. Xids are compared by order only, never by value.
func RunOutboxStore(t *testing.T, factory func(t *testing.T) OutboxHarness, features OutboxFeatures) {
	runChecks(t, newOutboxSuite(factory, features).checks())
}

type outboxSuite struct {
	factory func(t *testing.T) OutboxHarness
	f       OutboxFeatures
}

func newOutboxSuite(factory func(t *testing.T) OutboxHarness, features OutboxFeatures) *outboxSuite {
	if features.VisibilityWait == 0 {
		features.VisibilityWait = defaultVisibilityWait
	}
	return &outboxSuite{factory: factory, f: features}
}

// checks lists the suite's subtests, area by area.
func (s *outboxSuite) checks() []check {
	return concat(s.orderChecks(), s.scanChecks(), s.enqueueChecks(), s.settleChecks(), s.stateChecks(),
		s.deadChecks(), s.retentionChecks(), s.inputChecks(), s.wakeChecks(), s.bulkChecks(),
		s.traceChecks())
}

func (s *outboxSuite) harness(t *testing.T) OutboxHarness {
	t.Helper()
	h := s.factory(t)
	if h.Store == nil {
		t.Fatal("conformance: the factory returned no Store")
	}
	if h.Producer == nil {
		t.Fatal("conformance: the factory returned no Producer")
	}
	if h.HoldSettle == nil {
		t.Fatal("conformance: the factory returned no HoldSettle")
	}
	return h
}

// outboxT is one subtest's outbox and its checked operations: the bundle
// every outbox subtest starts from.
type outboxT struct {
	t    *testing.T
	ctx  context.Context
	h    OutboxHarness
	wait time.Duration // OutboxFeatures.VisibilityWait
}

// start is the setup of every outbox area: a fresh, empty outbox.
func (s *outboxSuite) start(t *testing.T) *outboxT {
	t.Helper()
	return &outboxT{t: t, ctx: testCtx(t), h: s.harness(t), wait: s.f.VisibilityWait}
}
