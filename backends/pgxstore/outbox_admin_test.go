package pgxstore

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

func TestOutboxAdmin_LanesAnswers200WithNullStampsOnAFreshOutbox(t *testing.T) {
	env := testenv.Postgres(t)
	mustMigrate(t, testContext(t), env.Pool, MigrateOptions{})
	store, err := NewOutboxStore(env.Pool, OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.StripPrefix("/outbox", outbox.AdminHandler(store, nil)))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/outbox/lanes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d on a never-scanned outbox, want 200", resp.StatusCode)
	}
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	for _, k := range outbox.StateKeys {
		if v, ok := body[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
	// And the dead-letter routes work on an empty table.
	resp2, err := srv.Client().Get(srv.URL + "/outbox/dead")
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("GET /dead: %d", resp2.StatusCode)
	}
}
