package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
)

func TestWebhookNotifier_PostsTheNoticeAsJSON(t *testing.T) {
	got := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
		w.WriteHeader(http.StatusAccepted)
	}))
	defer srv.Close()

	notify, err := graph.WebhookNotifier(srv.URL+"/hooks/outbox?token=abc", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	n := outbox.Notice{
		Kind: outbox.NoticeStuck, Lane: graph.LaneInit, EntryID: outbox.NewID(),
		Since: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), LastError: "503", At: time.Date(2026, 3, 1, 12, 2, 0, 0, time.UTC),
	}
	if err := notify(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.Method != http.MethodPost || r.URL.Path != "/hooks/outbox" || r.URL.Query().Get("token") != "abc" {
		t.Errorf("request %s %s; want POST /hooks/outbox?token=abc", r.Method, r.URL)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var back outbox.Notice
	if err := json.Unmarshal(<-bodies, &back); err != nil {
		t.Fatal(err)
	}
	if back.Kind != n.Kind || back.Lane != n.Lane || back.EntryID != n.EntryID || !back.Since.Equal(n.Since) || back.LastError != "503" {
		t.Errorf("received %+v; want %+v", back, n)
	}
}

func TestWebhookNotifier_FailsOnNon2xx(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no such hook", http.StatusNotFound)
	}))
	defer srv.Close()
	notify, err := graph.WebhookNotifier(srv.URL, srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	err = notify(context.Background(), outbox.Notice{Kind: outbox.NoticeDeadLetter})
	var se *graph.StatusError
	if !errors.As(err, &se) || se.StatusCode != 404 || !strings.Contains(se.Body, "no such hook") {
		t.Errorf("err = %v; want a *StatusError 404 with the body", err)
	}
}

func TestWebhookNotifier_FailsWhenUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	notify, err := graph.WebhookNotifier(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := notify(context.Background(), outbox.Notice{}); err == nil {
		t.Error("a notice to a closed server succeeded")
	}
}

func TestWebhookNotifier_ValidatesURL(t *testing.T) {
	for u, want := range map[string]string{
		"":                       "url is empty",
		"hooks.internal/x":       "scheme http or https",
		"https://h/x#frag":       "has a fragment",
		"https://user:pw@h/x":    "user information",
		"mailto:ops@example.com": "scheme http or https",
		"https:///path-only":     "has no host",
	} {
		if _, err := graph.WebhookNotifier(u, nil); !errors.Is(err, graph.ErrInvalidOptions) || !strings.Contains(err.Error(), want) {
			t.Errorf("WebhookNotifier(%q) = %v; want ErrInvalidOptions with %q", u, err, want)
		}
	}
}
