package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/core/lock"
)

// endlessStore always has a batch waiting after any cursor, and settles
// everything: a pass over it is the driver's own work and nothing else.
type endlessStore struct {
	Store // the methods a pass does not call
	batch []Entry
}

func (s *endlessStore) Scan(_ context.Context, after Cursor, limit int) ([]Entry, error) {
	for i := range s.batch {
		s.batch[i].XID = after.XID + 1
	}
	return s.batch[:min(limit, len(s.batch))], nil
}
func (s *endlessStore) Settle(context.Context, Settlement) error { return nil }
func (s *endlessStore) NextXID(context.Context) (uint64, error)  { return 1 << 62, nil }
func (s *endlessStore) State(context.Context) (map[string]string, error) {
	return map[string]string{}, nil
}
func (s *endlessStore) CountPending(context.Context, Cursor, int) (int, error) { return 7, nil }
func (s *endlessStore) CountDead(context.Context, int) (int, error)            { return 0, nil }

type heldLock struct{ lock.Lock }

func (heldLock) Token() uint64 { return 1 }
func (heldLock) Trusted() bool { return true }
func (heldLock) Name() string  { return DefaultLeaderLockName }

type noLocks struct{ lock.Provider }

// passWalker is a leader's walker over an endlessStore with batches of n
// entries on two lanes, delivered by processors that do nothing.
func passWalker(tb testing.TB, n int, hooks Hooks) *walker {
	tb.Helper()
	st := &endlessStore{batch: make([]Entry, n)}
	for i := range st.batch {
		lane := "a"
		if i >= n/2 {
			lane = "b"
		}
		st.batch[i] = Entry{ID: ID{byte(i), 1}, Lane: lane, Payload: []byte(`{}`)}
	}
	var procs []Processor
	for _, lane := range []string{"a", "b"} {
		out := make([]Outcome, n)
		for i := range out {
			out[i] = Delivered()
		}
		procs = append(procs, ProcessorFunc{LaneName: lane, Func: func(_ context.Context, run []Entry) ([]Outcome, error) {
			return out[:len(run)], nil
		}})
	}
	d, err := NewDriver(Config{Store: st, Locks: noLocks{}, Processors: procs, BatchSize: n, RetentionDisabled: true, Hooks: hooks,
		Notify: func(context.Context, Notice) error { return nil }})
	if err != nil {
		tb.Fatal(err)
	}
	w := &walker{d: d, lk: heldLock{}}
	w.f = d.newFeed(w.lk)
	if err := w.load(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return w
}

// onePass is what lead does for each pass.
func onePass(w *walker) {
	ctx := context.Background()
	pctx := w.startPass(ctx)
	delay, deposed := w.pass(pctx)
	w.endPass(pctx, delay, deposed)
}

// The walker BenchmarkPass drives is a leader's: a pass over it delivers
// and settles a whole batch, as lead's passes do. (A walker built without
// its feed made the benchmark crash in its first pass.)
func TestPass_TheBenchmarksWalkerDeliversAndSettlesAWholeBatch(t *testing.T) {
	w := passWalker(t, 10, nil)
	ctx := w.startPass(context.Background())
	delay, deposed := w.pass(ctx)
	cur, _ := w.walkCursor()
	if deposed || w.t.scanned != 10 || !w.t.settled || cur.XID != 1 {
		t.Fatalf("pass: delay %v, deposed %v, %d scanned, settled %v, cursor %v; want 10 scanned and settled, the cursor at xid 1",
			delay, deposed, w.t.scanned, w.t.settled, cur)
	}
	w.endPass(ctx, delay, deposed)
}

// Without hooks the hook call sites of a pass allocate nothing: the events
// are never built.
func TestHooks_NilHooksAllocateNothing(t *testing.T) {
	w := passWalker(t, 10, nil)
	run := []Entry{{Lane: "a"}}
	allocs := testing.AllocsPerRun(100, func() {
		ctx := w.startPass(context.Background())
		w.t.scanned = 10
		w.parkRun(ctx, run, "no processor")
		w.d.stuck(ctx, Notice{})
		w.endPass(ctx, time.Second, false)
	})
	if allocs != 0 {
		t.Errorf("the hook call sites allocate %v times per pass without hooks, want 0", allocs)
	}
}

// BenchmarkPass is one pass of 100 entries in two runs, with no hooks (the
// call sites only test for nil) and with hooks that do nothing (the events
// built and passed): the first is what every driver without hooks pays.
// The third is a pass of 1 000 entries whose lanes interleave, in 667 runs
// of one or two entries: what the driver pays per run.
func BenchmarkPass(b *testing.B) {
	for _, c := range []struct {
		name        string
		n           int
		hooks       Hooks
		interleaved bool
	}{{"hooks=nil", 100, nil, false}, {"hooks=nop", 100, NopHooks{}, false}, {"interleaved_lanes_1000", 1000, nil, true}} {
		b.Run(c.name, func(b *testing.B) {
			w := passWalker(b, c.n, c.hooks)
			if c.interleaved {
				batch := w.d.cfg.Store.(*endlessStore).batch
				for i := range batch {
					batch[i].Lane = []string{"a", "b"}[(i+i/3)%2]
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				onePass(w)
			}
		})
	}
}
