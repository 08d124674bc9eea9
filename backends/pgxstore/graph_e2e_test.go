package pgxstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/internal/outboxtest"
	"github.com/baton-go/baton/internal/testenv"
	lockmem "github.com/baton-go/baton/locks/memory"
)

// noticeReceiver is an HTTP endpoint that collects the notices the webhook
// notifier posts.
type noticeReceiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	list []outbox.Notice
}

func newNoticeReceiver(t *testing.T) *noticeReceiver {
	r := &noticeReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var n outbox.Notice
		if req.Method != http.MethodPost || json.Unmarshal(body, &n) != nil {
			http.Error(w, "bad notice", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.list = append(r.list, n)
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *noticeReceiver) of(kind outbox.NoticeKind) []outbox.Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []outbox.Notice
	for _, n := range r.list {
		if n.Kind == kind {
			out = append(out, n)
		}
	}
	return out
}

// TestOutboxToGraphEngine_EndToEnd runs the standard lanes from PostgreSQL
// to the fake engine through the real driver: both lanes arrive in
// (xid, id) order, a 409 parks one entry while the walk goes on, a 401
// streak stalls the whole outbox and raises exactly one stuck notice
// (posted by the webhook notifier) within StuckAfter plus one pass, and
// delivery resumes when the engine recovers.
func TestOutboxToGraphEngine_EndToEnd(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	mustMigrate(t, ctx, env.Pool, MigrateOptions{})
	engine := graphtest.New(t)
	receiver := newNoticeReceiver(t)

	procs, err := graph.StandardProcessors(graph.ProcessorOptions{DeliveryURL: engine.URL(), Client: engine.Client()})
	if err != nil {
		t.Fatal(err)
	}
	notify, err := graph.WebhookNotifier(receiver.srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	store, err := NewOutboxStore(env.Pool, OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	locks, err := lockmem.NewProvider(lockmem.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const (
		stuckAfter = time.Second
		errorDelay = 200 * time.Millisecond
	)
	d, err := outbox.NewDriver(outbox.Config{
		Store: store, Locks: locks, Processors: procs, Notify: notify,
		IdleDelay: 50 * time.Millisecond, ErrorDelay: errorDelay,
		StuckAfter: stuckAfter, StuckNoticeEvery: time.Hour, RetentionDisabled: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(dctx) }()
	t.Cleanup(func() { cancel(); <-done })

	var committed []outboxtest.Committed
	// produce commits one business transaction holding the given entries.
	produce := func(entries ...func(ctx context.Context, enqueue graph.EnqueueFunc, id outbox.ID) error) []outbox.ID {
		t.Helper()
		tx, err := env.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		enqueue := func(ctx context.Context, id outbox.ID, lane string, payload []byte) error {
			return Enqueue(ctx, tx, id, lane, payload)
		}
		var ids []outbox.ID
		for _, e := range entries {
			id := outbox.NewID()
			if err := e(ctx, enqueue, id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		var xid uint64
		if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text::numeric::bigint").Scan(&xid); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			committed = append(committed, outboxtest.Committed{XID: xid, ID: id})
		}
		return ids
	}
	initOf := func(n int) func(context.Context, graph.EnqueueFunc, outbox.ID) error {
		return func(ctx context.Context, enqueue graph.EnqueueFunc, id outbox.ID) error {
			return graph.EnqueueInit(ctx, enqueue, id, graph.InitPayload{
				ResourceType: "profile", ResourceID: fmt.Sprintf("p%d", n), RequestedBy: "user-1",
				Relations: []graph.Relation{{Relation: "owner", SubjectType: "user", SubjectID: "user-1"}},
			})
		}
	}
	labelOf := func(n int, label string) func(context.Context, graph.EnqueueFunc, outbox.ID) error {
		return func(ctx context.Context, enqueue graph.EnqueueFunc, id outbox.ID) error {
			return graph.EnqueueMetadata(ctx, enqueue, id, graph.MetadataPayload{
				EntityType: "profile", EntityID: fmt.Sprintf("p%d", n), Label: label,
			})
		}
	}

	// 1. Both lanes, interleaved within and across transactions.
	for i := range 10 {
		produce(initOf(i), labelOf(i, "first"), labelOf(i, "second"))
	}
	// A transaction that takes its xid first but commits after later ones.
	late, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lateID := outbox.NewID()
	if err := graph.EnqueueMetadata(ctx, func(ctx context.Context, id outbox.ID, lane string, p []byte) error {
		return Enqueue(ctx, late, id, lane, p)
	}, lateID, graph.MetadataPayload{EntityType: "profile", EntityID: "p0", Label: "late"}); err != nil {
		t.Fatal(err)
	}
	var lateXID uint64
	late.QueryRow(ctx, "SELECT pg_current_xact_id()::text::numeric::bigint").Scan(&lateXID)
	produce(initOf(10))
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed = append(committed, outboxtest.Committed{XID: lateXID, ID: lateID})
	slices.SortFunc(committed, func(a, b outboxtest.Committed) int {
		return cmp.Or(cmp.Compare(a.XID, b.XID), a.ID.Compare(b.ID))
	})
	got, err := engine.WaitDeliveries(len(committed), 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range committed {
		if got[i].EntryID != c.ID {
			t.Fatalf("delivery %d is %s (%s), want %s: not in (xid, id) order", i, got[i].EntryID, got[i].Lane, c.ID)
		}
	}
	if label, _ := engine.Label("profile", "p0"); label != "late" {
		t.Fatalf("p0's label is %q, want the last change in walk order, %q", label, "late")
	}

	// 2. A 409 parks its entry, and the walk goes on past it.
	engine.Fail(graph.PathInit, http.StatusConflict)
	parked := produce(initOf(20))
	after := produce(labelOf(0, "after the park"))
	// Everything committed but the parked entry.
	if _, err := engine.WaitDeliveries(len(committed)-1, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The pass settles (and parks) right after its deliveries.
	var dead outbox.DeadLetter
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if dead, err = store.GetDead(ctx, parked[0]); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the 409 entry is not a dead letter: %v", err)
	}
	if dead.Lane != graph.LaneInit || !strings.Contains(dead.Error, "409") {
		t.Fatalf("dead letter %+v: want lane %s and the status in its error", dead, graph.LaneInit)
	}
	if all := engine.Deliveries(); all[len(all)-1].EntryID != after[0] {
		t.Fatalf("the entry after the parked one was not delivered")
	}
	for deadline := time.Now().Add(5 * time.Second); len(receiver.of(outbox.NoticeDeadLetter)) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if n := receiver.of(outbox.NoticeDeadLetter); len(n) != 1 || n[0].EntryID != parked[0] {
		t.Fatalf("dead-letter notices %+v", n)
	}

	// 3. A 401 streak stalls the whole outbox and raises one stuck notice.
	delivered := len(engine.Deliveries())
	engine.FaultFunc(graph.PathInit, func(*http.Request) (graphtest.Fault, bool) {
		return graphtest.Fault{Status: http.StatusUnauthorized, Body: "token expired"}, true
	})
	stalled := produce(initOf(30))
	behind := produce(labelOf(30, "behind the stall"))
	start := time.Now()
	for len(receiver.of(outbox.NoticeStuck)) == 0 {
		if time.Since(start) > stuckAfter+errorDelay+2*time.Second {
			t.Fatalf("no stuck notice %v after the streak began", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	if took > stuckAfter+errorDelay+time.Second {
		t.Fatalf("stuck notice after %v, want within StuckAfter + one pass (%v) plus slack", took, stuckAfter+errorDelay)
	}
	time.Sleep(3 * stuckAfter) // more failing passes
	stuck := receiver.of(outbox.NoticeStuck)
	if len(stuck) != 1 {
		t.Fatalf("%d stuck notices during one streak, want exactly one", len(stuck))
	}
	if stuck[0].Lane != graph.LaneInit || stuck[0].EntryID != stalled[0] || !strings.Contains(stuck[0].LastError, "401") {
		t.Fatalf("stuck notice %+v: want the init lane, the stalled entry and the 401", stuck[0])
	}
	if n := len(engine.Deliveries()); n != delivered {
		t.Fatalf("%d deliveries during the stall; the entry behind the failing one must wait", n-delivered)
	}

	// 4. The engine recovers; delivery resumes in order.
	engine.ClearFaults()
	rest, err := engine.WaitDeliveries(delivered+2, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if rest[delivered].EntryID != stalled[0] || rest[delivered+1].EntryID != behind[0] {
		t.Fatalf("after recovery delivered %s then %s, want %s then %s", rest[delivered].EntryID, rest[delivered+1].EntryID, stalled[0], behind[0])
	}
	h, err := outbox.ReadHealth(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); h.FirstStuckAt != nil && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		h, _ = outbox.ReadHealth(ctx, store)
	}
	if h.FirstStuckAt != nil {
		t.Fatal("first_stuck_at still set after delivery resumed")
	}
}
