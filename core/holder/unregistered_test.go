package holder_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/baton-go/baton/core/holder"
)

// recordingHandler keeps the records a slog.Logger writes.
type recordingHandler struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// find returns the first record at level whose message contains text.
func (h *recordingHandler) find(level slog.Level, text string) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.records {
		if r.Level == level && strings.Contains(r.Message, text) {
			return r, true
		}
	}
	return slog.Record{}, false
}

func TestRoleProxy_AnUnregisteredRoleIs503AndLoggedAtStartupUnlessPassThroughIsSet(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	if _, err := m.Register("maintenance"); err != nil {
		t.Fatal(err)
	}
	// A misspelled role: registered as "maintenance", proxied as "maintenanse".
	logs := &recordingHandler{}
	mw, err := holder.RoleProxy(m.Registry(), "maintenanse", holder.Config{Peers: testPeers, Logger: slog.New(logs)}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := logs.find(slog.LevelError, "not registered"); !ok {
		t.Errorf("no error was logged at startup for the unregistered role; records: %v", logs.records)
	}
	var ran atomic.Bool
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) }))
	rec := serve(h, "GET", "/maintenance/x", nil)
	check503(t, rec.Code, rec.Header(), "1")
	if ran.Load() {
		t.Fatal("the leader-only handler ran on an instance that does not hold the role")
	}
	if !strings.Contains(rec.Body.String(), "not registered") {
		t.Errorf("the 503 says %q, want it to say the role is not registered", rec.Body.String())
	}
}

func TestPartitionProxy_AnUnregisteredPartitionSetIs503UnlessPassThroughIsSet(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	logs := &recordingHandler{}
	mw, err := holder.PartitionProxy(m.Registry(), partition, deviceKey, holder.Config{Peers: testPeers, Logger: slog.New(logs)}, "/device-api")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := logs.find(slog.LevelError, "not registered"); !ok {
		t.Errorf("no error was logged at startup for the unregistered partition set")
	}
	var ran atomic.Bool
	rec := serve(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) })),
		"GET", "/device-api/x", http.Header{"X-Device-Id": {"d"}})
	check503(t, rec.Code, rec.Header(), "1")
	if ran.Load() {
		t.Fatal("the handler ran locally for an unregistered partition set")
	}
}
