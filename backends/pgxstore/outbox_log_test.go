package pgxstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
	locksmemory "github.com/baton-go/baton/locks/memory"
)

// The outbox's logical source on a server with wal_level = logical
// (testenv.LogicalPostgres: a throwaway server, since the shared one runs
// with replica).

// logEnv is one test's outbox on the logical server: its schema, migrated,
// and a log store with a slot and publication of its own, dropped when
// the test ends.
type logEnv struct {
	*testenv.PostgresEnv
	store *OutboxLogStore
	slot  string
}

func newLogEnv(t *testing.T) *logEnv {
	t.Helper()
	env := testenv.LogicalPostgres(t)
	return attachLog(t, env, logOptions(t))
}

// logOptions are options with a slot and publication named for one test.
func logOptions(t *testing.T) OutboxLogOptions {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	name := "baton_t_" + hex.EncodeToString(b)
	return OutboxLogOptions{Slot: name, Publication: name, SlotCreateTimeout: 20 * time.Second, StatusInterval: time.Second}
}

// attachLog migrates env and makes a log store over it with opts, whose
// slot and publication are dropped when the test ends.
func attachLog(t *testing.T, env *testenv.PostgresEnv, opts OutboxLogOptions) *logEnv {
	t.Helper()
	mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
	return logStoreOn(t, env, opts)
}

// logStoreOn is attachLog over env's schema as it is.
func logStoreOn(t *testing.T, env *testenv.PostgresEnv, opts OutboxLogOptions) *logEnv {
	t.Helper()
	st, err := NewOutboxLogStore(env.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, env.ServerURL)
		if err != nil {
			t.Errorf("drop the slot: %v", err)
			return
		}
		defer conn.Close(ctx)
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, err = conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, opts.Slot)
			if err == nil {
				_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, opts.Slot)
			}
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("drop the slot %s: %v", opts.Slot, err)
		}
		_, _ = conn.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{opts.Publication}.Sanitize())
	})
	return &logEnv{PostgresEnv: env, store: st, slot: opts.Slot}
}

// delivered records what a driver delivered, in order.
type delivered struct {
	lane    string
	mu      sync.Mutex
	entries []outbox.Entry
	answer  func(run []outbox.Entry) []outbox.Outcome
}

func (d *delivered) Lane() string { return d.lane }

func (d *delivered) Deliver(_ context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]outbox.Outcome, len(run))
	for i := range out {
		out[i] = outbox.Delivered()
	}
	if d.answer != nil {
		out = d.answer(run)
	}
	for i, e := range run {
		if out[i].Kind != outbox.KindRetry {
			d.entries = append(d.entries, e)
		}
	}
	return out, nil
}

func (d *delivered) ids() []outbox.ID {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]outbox.ID, len(d.entries))
	for i, e := range d.entries {
		out[i] = e.ID
	}
	return out
}

// runDriver runs a driver over store, and over log when it is not nil,
// with the processors, until the returned stop is called (or the test
// ends).
func runDriver(t *testing.T, store outbox.Store, log outbox.LogStore, configure func(*outbox.Config), procs ...outbox.Processor) (stop func()) {
	t.Helper()
	locks, err := locksmemory.NewProvider(locksmemory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := outbox.Config{
		Store: store, Log: log, Locks: locks, Processors: procs,
		Notify:    func(context.Context, outbox.Notice) error { return nil },
		IdleDelay: 50 * time.Millisecond, ErrorDelay: 200 * time.Millisecond, RetentionDisabled: true,
	}
	if configure != nil {
		configure(&cfg)
	}
	d, err := outbox.NewDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

// eventually polls cond every 20ms until it holds, failing the test after
// within.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitSource waits until the stored state names source.
func awaitSource(t *testing.T, st outbox.Store, source string) {
	t.Helper()
	eventually(t, 30*time.Second, "the outbox's source is not "+source, func() bool {
		s, err := st.State(context.Background())
		return err == nil && s[outbox.KeySource] == source
	})
}

// invert runs the xid-inversion case on pool: A writes elsewhere first
// (taking the older xid); B changes the entity row; A waits for B's row
// lock; B enqueues and commits; A gets the row, enqueues and commits. It
// returns A's and B's entry ids.
func invert(t *testing.T, ctx context.Context, pool *pgxpool.Pool, lane string) (idA, idB outbox.ID) {
	t.Helper()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS entity (id int PRIMARY KEY, v int);
CREATE TABLE IF NOT EXISTS elsewhere (n int);
INSERT INTO entity VALUES (1, 0) ON CONFLICT DO NOTHING`); err != nil {
		t.Fatal(err)
	}
	idA, idB = outbox.NewID(), outbox.NewID()
	a, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Rollback(context.WithoutCancel(ctx))
	var pidA int32
	if err := a.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pidA); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, `INSERT INTO elsewhere VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	b, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Rollback(context.WithoutCancel(ctx))
	if _, err := b.Exec(ctx, `UPDATE entity SET v = v + 10 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan error, 1)
	go func() {
		if _, err := a.Exec(ctx, `UPDATE entity SET v = v + 1 WHERE id = 1`); err != nil {
			aDone <- err
			return
		}
		if err := Enqueue(ctx, a, idA, lane, []byte(`{"tx":"A"}`)); err != nil {
			aDone <- err
			return
		}
		aDone <- a.Commit(ctx)
	}()
	eventually(t, 10*time.Second, "A does not wait for B's row lock", func() bool {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT wait_event_type IS NOT DISTINCT FROM 'Lock' FROM pg_stat_activity WHERE pid = $1`, pidA).Scan(&waiting)
		return err == nil && waiting
	})
	if err := Enqueue(ctx, b, idB, lane, []byte(`{"tx":"B"}`)); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	var xa, xb uint64
	if err := pool.QueryRow(ctx, `SELECT (SELECT xid::text::bigint FROM baton_outbox WHERE id = $1), (SELECT xid::text::bigint FROM baton_outbox WHERE id = $2)`,
		[16]byte(idA), [16]byte(idB)).Scan(&xa, &xb); err != nil {
		t.Fatal(err)
	}
	if xa >= xb {
		t.Fatalf("A has xid %d and B %d: the case needs A's older", xa, xb)
	}
	return idA, idB
}

func TestOutboxLog_TheWalkDeliversAFirstTheLogDeliversBFirst(t *testing.T) {
	ctx := testContext(t)
	for _, logical := range []bool{false, true} {
		t.Run(fmt.Sprintf("logical=%v", logical), func(t *testing.T) {
			e := newLogEnv(t)
			rec := &delivered{lane: "orders"}
			var log outbox.LogStore
			if logical {
				log = e.store
			}
			runDriver(t, e.store, log, nil, rec)
			if logical {
				awaitSource(t, e.store, outbox.SourceLogical)
			}
			idA, idB := invert(t, ctx, e.Pool, "orders")
			eventually(t, 20*time.Second, "both entries delivered", func() bool { return len(rec.ids()) == 2 })
			want := []outbox.ID{idA, idB} // xid order
			if logical {
				want = []outbox.ID{idB, idA} // commit order
			}
			if got := rec.ids(); !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want %v (A %s, B %s)", got, want, idA, idB)
			}
		})
	}
}

// The outcomes, the notices, the dead letters and the admin API work the
// same from either source: an entry retried until the stuck notice comes
// is delivered once the destination recovers, a parked one becomes a dead
// letter with its notice while the entry after it is delivered, and a
// requeue through the admin API is a new entry, which the log delivers as
// it delivers any insert. The four entries are one transaction, so that
// the pass that stops at the retry settles inside it, and the entry before
// the retry is not delivered again.
func TestOutboxLog_RetriesParksAndRequeuesThroughTheAdminAPIFromEitherSource(t *testing.T) {
	ctx := testContext(t)
	for _, logical := range []bool{false, true} {
		t.Run(fmt.Sprintf("logical=%v", logical), func(t *testing.T) {
			e := newLogEnv(t)
			n := &notes{}
			firstID, retryID, parkID, nextID := outbox.NewID(), outbox.NewID(), outbox.NewID(), outbox.NewID()
			rec := &delivered{lane: "a", answer: func(run []outbox.Entry) []outbox.Outcome {
				out := make([]outbox.Outcome, len(run))
				for i, en := range run {
					switch {
					case en.ID == retryID && len(n.of(outbox.NoticeStuck)) == 0:
						for j := i; j < len(run); j++ {
							out[j] = outbox.Retry("503 service unavailable")
						}
						return out
					case en.ID == parkID:
						out[i] = outbox.Park("409 conflict")
					default:
						out[i] = outbox.Delivered()
					}
				}
				return out
			}}
			var log outbox.LogStore
			if logical {
				log = e.store
			}
			runDriver(t, e.store, log, func(c *outbox.Config) {
				c.Notify = n.notify
				c.StuckAfter = 300 * time.Millisecond
			}, rec)
			if logical {
				awaitSource(t, e.store, outbox.SourceLogical)
			}
			payload := func(id outbox.ID) []byte { return []byte(`{"id":"` + id.String() + `"}`) }
			if err := pgx.BeginFunc(ctx, e.Pool, func(tx pgx.Tx) error {
				for _, id := range []outbox.ID{firstID, retryID, parkID, nextID} {
					if err := Enqueue(ctx, tx, id, "a", payload(id)); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}

			eventually(t, 30*time.Second, "the four entries were not delivered", func() bool { return len(rec.ids()) == 4 })
			if got, want := rec.ids(), []outbox.ID{firstID, retryID, parkID, nextID}; !slices.Equal(got, want) {
				t.Fatalf("delivered %v, want %v", got, want)
			}
			if stuck := n.of(outbox.NoticeStuck); len(stuck) != 1 || stuck[0].EntryID != retryID || stuck[0].LastError != "503 service unavailable" {
				t.Fatalf("stuck notices %+v, want one for the retried entry %s", stuck, retryID)
			}
			eventually(t, 20*time.Second, "no dead-letter notice", func() bool { return len(n.of(outbox.NoticeDeadLetter)) > 0 })
			if dl := n.of(outbox.NoticeDeadLetter); len(dl) != 1 || dl[0].EntryID != parkID || dl[0].Lane != "a" || dl[0].LastError != "409 conflict" || dl[0].Parked != 1 {
				t.Fatalf("dead-letter notices %+v, want one for the parked entry %s", dl, parkID)
			}

			srv := httptest.NewServer(http.StripPrefix("/outbox", outbox.AdminHandler(e.store, nil)))
			defer srv.Close()
			try := func(method, path string, out any) int {
				t.Helper()
				req, err := http.NewRequestWithContext(ctx, method, srv.URL+"/outbox"+path, nil)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode == http.StatusOK {
					if err := json.Unmarshal(body, out); err != nil {
						t.Fatalf("%s %s: %v: %s", method, path, err, body)
					}
				}
				return resp.StatusCode
			}
			call := func(method, path string, out any) {
				t.Helper()
				if code := try(method, path, out); code != http.StatusOK {
					t.Fatalf("%s %s: status %d", method, path, code)
				}
			}
			var dead struct {
				Error      string     `json:"error"`
				RequeuedAs *outbox.ID `json:"requeued_as"`
			}
			// The notice goes out just before the pass's settlement, which
			// writes the dead letter.
			eventually(t, 20*time.Second, "the parked entry is no dead letter", func() bool {
				return try("GET", "/dead/"+parkID.String(), &dead) == http.StatusOK
			})
			if dead.Error != "409 conflict" || dead.RequeuedAs != nil {
				t.Fatalf("the dead letter is %+v, want the park's reason, not requeued", dead)
			}
			var requeued struct {
				RequeuedAs outbox.ID `json:"requeued_as"`
			}
			call("POST", "/dead/"+parkID.String()+"/requeue", &requeued)
			if requeued.RequeuedAs.IsNil() {
				t.Fatal("the requeue named no new entry")
			}

			eventually(t, 30*time.Second, "the requeued entry was not delivered", func() bool { return len(rec.ids()) == 5 })
			rec.mu.Lock()
			again := rec.entries[4]
			rec.mu.Unlock()
			if again.ID != requeued.RequeuedAs || again.Lane != "a" || !samePayloadJSON(again.Payload, string(payload(parkID))) {
				t.Fatalf("delivered %s (lane %s, %s) after the requeue, want %s with the parked entry's payload", again.ID, again.Lane, again.Payload, requeued.RequeuedAs)
			}
			call("GET", "/dead/"+parkID.String(), &dead)
			if dead.RequeuedAs == nil || *dead.RequeuedAs != requeued.RequeuedAs {
				t.Fatalf("the dead letter shows requeued_as %v, want %s", dead.RequeuedAs, requeued.RequeuedAs)
			}
			if st, err := e.store.State(ctx); err != nil || (st[outbox.KeySource] == outbox.SourceLogical) != logical {
				t.Fatalf("the stored source is %q (%v): the log served %v, want %v", st[outbox.KeySource], err, !logical, logical)
			}
		})
	}
}

func TestOutboxLogStore_Conformance(t *testing.T) {
	conformance.RunOutboxLog(t, func(t *testing.T) conformance.OutboxLogHarness {
		e := newLogEnv(t)
		return conformance.OutboxLogHarness{Log: e.store, Store: e.store, Producer: pgxOutboxProducer(e.Pool, Enqueue)}
	}, conformance.OutboxLogFeatures{})
}

// A reader that is reading the log while migration 5 adds trace_context
// decodes the rows before it without one and the rows after it with theirs:
// the log maps the table's columns by name, again at every change of the
// table, so a column it does not expect, or one that comes, breaks nothing.
func TestOutboxLog_ReadsOnAcrossTheMigrationThatAddsTheTraceContext(t *testing.T) {
	env := testenv.LogicalPostgres(t)
	ctx := testContext(t)
	schemaAt(t, ctx, env, 4, true)
	e := logStoreOn(t, env, logOptions(t))
	r, err := e.store.Open(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.WithoutCancel(ctx))
	read := func(after outbox.LogPosition) outbox.LogEntry {
		t.Helper()
		for {
			b, err := r.Read(ctx, after, 10, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if len(b.Entries) > 0 {
				return b.Entries[0]
			}
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
		}
	}
	old := outbox.NewID()
	if _, err := env.Pool.Exec(ctx, oldEnqueueSQL, [16]byte(old), "lane", `{"n": 1}`); err != nil {
		t.Fatal(err)
	}
	first := read(r.Start())
	if first.ID != old || !first.TraceContext.IsZero() {
		t.Fatalf("read %s with trace context %+v, want %s with none", first.ID, first.TraceContext, old)
	}

	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	tc := outbox.TraceContext{TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", TraceState: "k=v"}
	traced := outbox.NewID()
	if err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		return Enqueue(outbox.WithTraceContext(ctx, tc), tx, traced, "lane", []byte(`{"n": 2}`))
	}); err != nil {
		t.Fatal(err)
	}
	second := read(first.Pos)
	if second.ID != traced || second.TraceContext != tc {
		t.Fatalf("read %s with trace context %+v, want %s with %+v", second.ID, second.TraceContext, traced, tc)
	}
}
