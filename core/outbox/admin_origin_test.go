package outbox_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/outbox"
)

// requeueWith posts a requeue of id with the given headers and body, as a
// browser or a client would send it, and returns the status.
func requeueWith(t *testing.T, srv *httptest.Server, id outbox.ID, header http.Header, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/dead/"+id.String()+"/requeue", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestAdmin_CrossSiteRequestsCannotRequeue(t *testing.T) {
	s, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(outbox.AdminHandler(s, nil))
	t.Cleanup(srv.Close)
	id := parkOne(t, s, "409 conflict")
	form := "application/x-www-form-urlencoded"
	for name, h := range map[string]http.Header{
		// What a page on another site submits: a form posts with one of
		// the content types a browser sends without asking the server.
		"cross-site form": {"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}, "Content-Type": {form}},
		"cross-site text/plain fetch": {
			"Origin": {"https://evil.example"}, "Sec-Fetch-Site": {"cross-site"}, "Content-Type": {"text/plain"},
		},
		"same-site, other origin":            {"Origin": {"https://other.example.com"}, "Sec-Fetch-Site": {"same-site"}, "Content-Type": {form}},
		"other origin, no Sec-Fetch-Site":    {"Origin": {"https://evil.example"}, "Content-Type": {"multipart/form-data; boundary=x"}},
		"form without Origin or fetch hints": {"Content-Type": {form}},
		"text/plain without hints":           {"Content-Type": {"text/plain; charset=utf-8"}},
		"unparsable text/plain":              {"Content-Type": {"Text/Plain; ;"}},
	} {
		if code := requeueWith(t, srv, id, h, "x=1"); code != http.StatusForbidden && code != http.StatusUnsupportedMediaType {
			t.Errorf("%s: status %d, want 403 or 415", name, code)
		}
	}
	if d, err := s.GetDead(context.Background(), id); err != nil || !d.RequeuedAs.IsNil() {
		t.Fatalf("a cross-site request requeued the dead letter: %+v %v", d, err)
	}
}

func TestAdmin_JSONClientsAndSameOriginPagesStillRequeue(t *testing.T) {
	s, err := memory.NewOutboxStore(memory.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(outbox.AdminHandler(s, nil))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	for name, tc := range map[string]struct {
		h    http.Header
		body string
	}{
		"a client with no body (curl -X POST)": {nil, ""},
		"a JSON client":                        {http.Header{"Content-Type": {"application/json"}}, "{}"},
		"a page of the same origin": {http.Header{
			"Origin": {"http://" + host}, "Sec-Fetch-Site": {"same-origin"}, "Content-Type": {"application/json"},
		}, "{}"},
		"an older browser on the same origin": {http.Header{"Origin": {"http://" + host}}, ""},
		"typed into the address bar":          {http.Header{"Sec-Fetch-Site": {"none"}}, ""},
	} {
		id := parkOne(t, s, "409 conflict")
		if code := requeueWith(t, srv, id, tc.h, tc.body); code != http.StatusOK {
			t.Errorf("%s: status %d, want 200", name, code)
		}
	}
	// Reading stays open to every origin's requests: a browser does not
	// let another site read the answer.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/lanes", nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Origin", "https://evil.example")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("cross-site GET /lanes: %d, want 200", resp.StatusCode)
	}
}
