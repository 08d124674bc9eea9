package outbox_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/outbox"
)

func get(t *testing.T, h http.Handler, method, path string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	body, _ := io.ReadAll(rec.Body)
	var out map[string]any
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%s %s: not JSON: %s", method, path, body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q", method, path, ct)
	}
	return rec.Code, out
}

func TestAdmin_LanesAnswers200WithNullsOnAFreshOutbox(t *testing.T) {
	memOutbox, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := outbox.AdminHandler(memOutbox, nil)
	code, body := get(t, h, "GET", "/lanes")
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	for _, k := range outbox.StateKeys {
		v, ok := body[k]
		if !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
}

// parkOne commits an entry and parks it through a settlement, as a pass would.
func parkOne(t *testing.T, s *memory.OutboxStore, reason string) outbox.ID {
	t.Helper()
	ctx := context.Background()
	tx, _ := s.Begin(ctx)
	id := outbox.NewID()
	if err := tx.Enqueue(ctx, id, "graph.init", []byte(`{"resourceId":"p1"}`)); err != nil {
		t.Fatal(err)
	}
	tx.Commit(ctx)
	st, _ := s.State(ctx)
	from, _ := outbox.CursorFromState(st)
	entries, err := s.Scan(ctx, from, 100)
	if err != nil || len(entries) == 0 {
		t.Fatalf("scan: %v %v", entries, err)
	}
	e := entries[len(entries)-1]
	if err := s.Settle(ctx, outbox.Settlement{From: from, To: e.Cursor(), Park: []outbox.Parked{{Entry: e, Reason: reason}}}); err != nil {
		t.Fatal(err)
	}
	return id
}

func TestAdmin_ListsShowsAndRequeuesDeadLetters(t *testing.T) {
	s, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := outbox.AdminHandler(s, nil)
	first := parkOne(t, s, "409 conflict")
	second := parkOne(t, s, "400 bad request")

	code, body := get(t, h, "GET", "/dead")
	list, _ := body["dead_letters"].([]any)
	if code != 200 || len(list) != 2 {
		t.Fatalf("list: %d %v", code, body)
	}
	newest := list[0].(map[string]any)
	if newest["id"] != second.String() || newest["error"] != "400 bad request" {
		t.Fatalf("newest first: %v", newest)
	}
	if _, ok := newest["payload"]; ok {
		t.Fatal("the listing carries payloads")
	}
	code, body = get(t, h, "GET", "/dead?limit=1&before="+second.String())
	if list, _ := body["dead_letters"].([]any); code != 200 || len(list) != 1 || list[0].(map[string]any)["id"] != first.String() {
		t.Fatalf("second page: %d %v", code, body)
	}

	code, body = get(t, h, "GET", "/dead/"+first.String())
	if code != 200 || body["lane"] != "graph.init" || body["payload"].(map[string]any)["resourceId"] != "p1" || body["requeued_as"] != nil {
		t.Fatalf("show: %d %v", code, body)
	}

	code, body = get(t, h, "POST", "/dead/"+first.String()+"/requeue")
	if code != 200 || body["requeued_as"] == nil {
		t.Fatalf("requeue: %d %v", code, body)
	}
	newID, err := outbox.ParseID(body["requeued_as"].(string))
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := s.Scan(context.Background(), outbox.Cursor{}, 100)
	if last := entries[len(entries)-1]; last.ID != newID || string(last.Payload) != `{"resourceId":"p1"}` {
		t.Fatalf("the requeued entry is not at the end of the order: %+v", entries)
	}
	code, _ = get(t, h, "POST", "/dead/"+first.String()+"/requeue")
	if code != http.StatusConflict {
		t.Fatalf("second requeue: %d, want 409", code)
	}
	_, body = get(t, h, "GET", "/dead/"+first.String())
	if body["requeued_as"] != newID.String() {
		t.Fatalf("requeued_as not shown: %v", body)
	}
}

func TestAdmin_RejectsBadIDsAndReportsUnknownOnes(t *testing.T) {
	memOutbox, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := outbox.AdminHandler(memOutbox, nil)
	for _, c := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/dead/not-a-uuid", 400},
		{"POST", "/dead/not-a-uuid/requeue", 400},
		{"GET", "/dead/" + outbox.NewID().String(), 404},
		{"POST", "/dead/" + outbox.NewID().String() + "/requeue", 404},
		{"GET", "/dead?limit=0", 400},
		{"GET", "/dead?limit=abc", 400},
		{"GET", "/dead?before=nope", 400},
	} {
		code, body := get(t, h, c.method, c.path)
		if msg, _ := body["error"].(string); code != c.want || msg == "" {
			t.Errorf("%s %s: %d %v, want %d", c.method, c.path, code, body, c.want)
		}
	}
}
