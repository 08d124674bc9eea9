package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/outbox"
)

// parkMany commits n entries of lane, each in a transaction of its own,
// and parks them all; it returns their ids in (xid, id) order.
func parkMany(t *testing.T, s *memory.OutboxStore, lane string, n int) []outbox.ID {
	t.Helper()
	var ids []outbox.ID
	for range n {
		ids = append(ids, parkLane(t, s, lane))
	}
	return ids
}

func parkLane(t *testing.T, s *memory.OutboxStore, lane string) outbox.ID {
	t.Helper()
	ctx := context.Background()
	tx, _ := s.Begin(ctx)
	id := outbox.NewID()
	if err := tx.Enqueue(ctx, id, lane, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := s.State(ctx)
	from, _ := outbox.CursorFromState(st)
	entries, err := s.Scan(ctx, from, 100)
	if err != nil || len(entries) == 0 {
		t.Fatalf("scan: %v %v", entries, err)
	}
	e := entries[len(entries)-1]
	if err := s.Settle(ctx, outbox.Settlement{From: from, To: e.Cursor(), Park: []outbox.Parked{{Entry: e, Reason: "409"}}}); err != nil {
		t.Fatal(err)
	}
	return id
}

func newMemory(t *testing.T) *memory.OutboxStore {
	t.Helper()
	s, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func requeuedIDs(rs []outbox.Requeued) []outbox.ID {
	out := make([]outbox.ID, len(rs))
	for i, r := range rs {
		out[i] = r.ID
	}
	return out
}

func TestRequeueDead_BatchesInOrderAndHonoursTheLimit(t *testing.T) {
	ctx := context.Background()
	s := newMemory(t)
	a := parkMany(t, s, "a", 7)
	parkMany(t, s, "b", 2)
	if err := s.Requeue(ctx, a[2], outbox.NewID()); err != nil {
		t.Fatal(err)
	}
	cfg := outbox.RequeueConfig{Filter: outbox.RequeueFilter{Lane: "a"}, BatchSize: 2, Limit: 5}
	res, err := outbox.RequeueDead(ctx, s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The limit counts the refused one: five taken, four requeued.
	want := []outbox.ID{a[0], a[1], a[3], a[4]}
	if !slices.Equal(requeuedIDs(res.Requeued), want) || res.AlreadyRequeued != 1 || res.Batches != 3 {
		t.Fatalf("requeued %v (%d refused, %d batches), want %v (1 refused, 3 batches)", requeuedIDs(res.Requeued), res.AlreadyRequeued, res.Batches, want)
	}
	// The replay walks in the dead letters' order.
	entries, err := s.Scan(ctx, outbox.Cursor{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var walked, as []outbox.ID
	for _, r := range res.Requeued {
		as = append(as, r.RequeuedAs)
	}
	for _, e := range entries {
		if slices.Contains(as, e.ID) {
			walked = append(walked, e.ID)
		}
	}
	if !slices.Equal(walked, as) {
		t.Fatalf("the new entries walk as %v, want %v", walked, as)
	}
	rest, err := outbox.RequeueDead(ctx, s, outbox.RequeueConfig{Filter: outbox.RequeueFilter{Lane: "a", WaitingOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(requeuedIDs(rest.Requeued), a[5:]) || rest.AlreadyRequeued != 0 {
		t.Fatalf("the rest: %v (%d refused), want %v", requeuedIDs(rest.Requeued), rest.AlreadyRequeued, a[5:])
	}
}

func TestRequeueDead_DryRunWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := newMemory(t)
	a := parkMany(t, s, "a", 3)
	before, _ := s.NextXID(ctx)
	res, err := outbox.RequeueDead(ctx, s, outbox.RequeueConfig{BatchSize: 1, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(requeuedIDs(res.Requeued), a) || !res.DryRun {
		t.Fatalf("dry run: %+v, want %v", res, a)
	}
	if after, _ := s.NextXID(ctx); after != before {
		t.Fatalf("a dry run wrote: next xid %d -> %d", before, after)
	}
	for _, id := range a {
		if d, _ := s.GetDead(ctx, id); !d.RequeuedAs.IsNil() {
			t.Fatalf("a dry run requeued %s", id)
		}
	}
}

func TestRequeueDead_RefusesABadConfig(t *testing.T) {
	s := newMemory(t)
	now := time.Now()
	for _, cfg := range []outbox.RequeueConfig{
		{Limit: -1},
		{BatchSize: -1},
		{BatchSize: outbox.MaxRequeueBatch + 1},
		{Filter: outbox.RequeueFilter{ParkedSince: now, ParkedBefore: now}},
	} {
		if _, err := outbox.RequeueDead(context.Background(), s, cfg); err == nil {
			t.Errorf("RequeueDead(%+v) succeeded", cfg)
		}
	}
}

func TestAdmin_BulkRequeue(t *testing.T) {
	s := newMemory(t)
	h := outbox.AdminHandler(s, nil)
	a := parkMany(t, s, "a", 3)
	parkMany(t, s, "b", 1)
	post := func(body string) (int, outbox.RequeueReport) {
		t.Helper()
		req := httptest.NewRequest(http.MethodPost, "/dead/requeue", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var rep outbox.RequeueReport
		_ = json.Unmarshal(rec.Body.Bytes(), &rep)
		return rec.Code, rep
	}
	code, rep := post(`{"lane":"a","waiting_only":true,"dry_run":true}`)
	if code != 200 || !rep.DryRun || rep.Requeued != 3 || rep.Entries[0].RequeuedAs != nil {
		t.Fatalf("dry run: %d %+v", code, rep)
	}
	code, rep = post(`{"lane":"a","limit":2}`)
	if code != 200 || rep.Requeued != 2 || rep.Entries[0].ID != a[0] || rep.Entries[1].ID != a[1] || rep.Entries[0].RequeuedAs == nil {
		t.Fatalf("requeue: %d %+v", code, rep)
	}
	code, rep = post(`{"lane":"a"}`)
	if code != 200 || rep.Requeued != 1 || rep.AlreadyRequeued != 2 || rep.Entries[0].ID != a[2] {
		t.Fatalf("again: %d %+v", code, rep)
	}
	if code, _ := post(`{"limit":-1}`); code != http.StatusBadRequest {
		t.Fatalf("a negative limit: %d, want 400", code)
	}
	if code, _ := post(`{"lanes":"a"}`); code != http.StatusBadRequest {
		t.Fatalf("an unknown field: %d, want 400", code)
	}
	req := httptest.NewRequest(http.MethodPost, "/dead/requeue", bytes.NewBufferString("lane=a"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnsupportedMediaType {
		t.Fatalf("a form body: %d, want 415", rec.Code)
	}
}
