package conformance

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// OutboxLogHarness is what a log store's factory returns. Every call must
// return a fresh, empty outbox with a log of its own (for PostgreSQL, a
// schema, a publication and a slot of its own).
type OutboxLogHarness struct {
	// Log is the log store under test.
	Log outbox.LogStore
	// Store is the table store of the same outbox: the suite reads the
	// state and the dead letters through it.
	Store outbox.Store
	// Producer writes entries into the outbox, as for RunOutboxStore.
	Producer OutboxProducer
	// Lose, if set, makes the log unreadable from the settled position,
	// as an invalidated slot is. nil skips that subtest, which then needs
	// a test of the adapter's own (PostgreSQL: on a server of its own,
	// since max_slot_wal_keep_size is the server's).
	Lose func(t *testing.T)
}

// OutboxLogFeatures declares how slow a log store may be. The zero value
// expects everything, with the default bound.
type OutboxLogFeatures struct {
	// VisibilityWait bounds how long a committed entry may take to come
	// out of the log. 0 means 10s.
	VisibilityWait time.Duration
}

// RunOutboxLog runs the outbox.LogStore contract against the stores the
// factory returns: one subtest per rule written on outbox.LogStore and
// outbox.LogReader (R1, R2, ...), named as docs/adapters.md lists them.
//
// Every subtest opens its reader before it writes, so that what it reads
// was committed after the log began (a new PostgreSQL slot starts at its
// creation), and uses fencing tokens of its own choosing.
func RunOutboxLog(t *testing.T, factory func(t *testing.T) OutboxLogHarness, features OutboxLogFeatures) {
	runChecks(t, newOutboxLogSuite(factory, features).checks())
}

type outboxLogSuite struct {
	factory func(t *testing.T) OutboxLogHarness
	f       OutboxLogFeatures
}

func newOutboxLogSuite(factory func(t *testing.T) OutboxLogHarness, features OutboxLogFeatures) *outboxLogSuite {
	if features.VisibilityWait == 0 {
		features.VisibilityWait = defaultVisibilityWait
	}
	return &outboxLogSuite{factory: factory, f: features}
}

func (s *outboxLogSuite) checks() []check {
	return concat(s.readChecks(), s.readerChecks(), s.logSettleChecks(), s.logInputChecks(), s.logTraceChecks(), s.budgetChecks(), s.logReplaceChecks())
}

// logT is one subtest's outbox and log.
type logT struct {
	outboxT
	log  outbox.LogStore
	lose func(t *testing.T)
}

func (s *outboxLogSuite) start(t *testing.T) *logT {
	t.Helper()
	h := s.factory(t)
	switch {
	case h.Log == nil:
		t.Fatal("conformance: the factory returned no Log")
	case h.Store == nil:
		t.Fatal("conformance: the factory returned no Store")
	case h.Producer == nil:
		t.Fatal("conformance: the factory returned no Producer")
	}
	return &logT{
		outboxT: outboxT{t: t, ctx: testCtx(t), h: OutboxHarness{Store: h.Store, Producer: h.Producer}, wait: s.f.VisibilityWait},
		log:     h.Log, lose: h.Lose,
	}
}

// open opens a reader with token and closes it when the subtest ends.
func (x *logT) open(token uint64) outbox.LogReader {
	x.t.Helper()
	r, err := x.log.Open(x.ctx, token)
	if err != nil {
		x.t.Fatalf("Open(token %d): %v", token, err)
	}
	if r == nil {
		x.t.Fatal("Open returned a nil reader and no error")
	}
	x.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.Close(ctx)
	})
	return r
}

// readLogWait is how long one Read of the helpers waits for entries.
const readLogWait = 200 * time.Millisecond

// readN reads from after until n entries came (or VisibilityWait passed,
// which fails the subtest), and returns them with the last Reached. Each
// Read goes on after the previous one's Reached, as the driver's does.
func (x *logT) readN(r outbox.LogReader, after outbox.LogPosition, n int) ([]outbox.LogEntry, outbox.LogPosition) {
	x.t.Helper()
	var got []outbox.LogEntry
	deadline := time.Now().Add(x.wait)
	for len(got) < n {
		b, err := r.Read(x.ctx, after, outboxScanAll, readLogWait)
		if err != nil {
			x.t.Fatalf("Read after %s: %v", after, err)
		}
		x.checkBatch(b, after, outboxScanAll)
		got = append(got, b.Entries...)
		after = b.Reached
		if len(got) < n && time.Now().After(deadline) {
			x.t.Fatalf("after %v the log gave %d of %d entries: %v", x.wait, len(got), n, logIDs(got))
		}
	}
	return got, after
}

// readIdle reads what the log has from after, waiting a little for more.
func (x *logT) readIdle(r outbox.LogReader, after outbox.LogPosition) outbox.LogBatch {
	x.t.Helper()
	b, err := r.Read(x.ctx, after, outboxScanAll, readLogWait)
	if err != nil {
		x.t.Fatalf("Read after %s: %v", after, err)
	}
	x.checkBatch(b, after, outboxScanAll)
	return b
}

// checkBatch fails the subtest for a batch that breaks R5 in the ways
// every Read can be checked for: too many entries, one not after after,
// positions that do not increase, a Reached behind them.
func (x *logT) checkBatch(b outbox.LogBatch, after outbox.LogPosition, limit int) {
	x.t.Helper()
	if len(b.Entries) > limit {
		x.t.Fatalf("Read with limit %d returned %d entries", limit, len(b.Entries))
	}
	prev := after
	for _, e := range b.Entries {
		if e.Pos.Compare(prev) <= 0 {
			x.t.Fatalf("entry %s at %s is not after %s (the read's after, or the entry before it)", e.ID, e.Pos, prev)
		}
		prev = e.Pos
	}
	if b.Reached.Compare(prev) < 0 {
		x.t.Fatalf("Reached %s is before %s", b.Reached, prev)
	}
}

func logIDs(es []outbox.LogEntry) []outbox.ID {
	out := make([]outbox.ID, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}

// onlyLanes keeps the entries of the given lanes.
func onlyLanes(es []outbox.LogEntry, lanes ...string) []outbox.LogEntry {
	return slices.DeleteFunc(slices.Clone(es), func(e outbox.LogEntry) bool { return !slices.Contains(lanes, e.Lane) })
}

// A lost log, the arguments and the context.

func (s *outboxLogSuite) logInputChecks() []check {
	return area(s.start,
		subtest[*logT]{"ALostLogIsRecognisable", testLogLost},
		subtest[*logT]{"InvalidReadArgumentsAreErrors", testInvalidReadArguments},
		subtest[*logT]{"LogCancelledContextIsRecognisable", testLogCancelledContext},
	)
}

// testInvalidReadArguments: R16.
func testInvalidReadArguments(t *testing.T, x *logT) {
	r := x.open(1)
	if _, err := r.Read(x.ctx, r.Start(), 0, 0); err == nil {
		t.Error("Read with limit 0 succeeded")
	}
	if _, err := r.Read(x.ctx, r.Start(), 10, -time.Second); err == nil {
		t.Error("Read with a negative wait succeeded")
	}
}

// testLogCancelledContext: R17.
func testLogCancelledContext(t *testing.T, x *logT) {
	r := x.open(1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := []call{
		{"Open", func(ctx context.Context) error { return ignore(x.log.Open(ctx, 2)) }},
		{"Mark", func(ctx context.Context) error { return ignore(x.log.Mark(ctx)) }},
		{"SettleLog", func(ctx context.Context) error {
			return x.log.SettleLog(ctx, outbox.LogSettlement{To: outbox.LogPosition{LSN: 1}})
		}},
		{"Read", func(ctx context.Context) error { return ignore(r.Read(ctx, r.Start(), 10, time.Second)) }},
		{"Confirm", func(ctx context.Context) error { return r.Confirm(ctx, r.Start()) }},
	}
	for _, c := range calls {
		if err := c.do(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: err = %v, want one wrapping context.Canceled", c.what, err)
		}
	}
	st := x.state()
	if _, ok := st[outbox.KeyLogLSN]; ok {
		t.Errorf("a cancelled SettleLog wrote the log position: state %v", st)
	}
}
