package health_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/health"
)

func fixed(s health.Status) health.Reporter {
	return health.ReporterFunc(func() health.Status { return s })
}

func serve(t *testing.T, h http.Handler, method, path string) (int, health.Report, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	var rep health.Report
	if rec.Code != http.StatusMethodNotAllowed && rec.Code != http.StatusNotFound && method != http.MethodHead {
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", method, path, ct)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatalf("%s %s: %v in %q", method, path, err, rec.Body.String())
		}
	}
	return rec.Code, rep, rec.Body.String()
}

// Each state a component can be in, and what each probe answers for it.
func TestHandler_AnswersEachStateWithItsStatusCodes(t *testing.T) {
	now := time.Now()
	cases := []struct {
		state       string
		s           health.Status
		live, ready int
	}{
		{"leader", health.Status{Running: true, Roles: []health.Role{{Name: "r", State: health.Leader, Token: 3}}, Last: now, Next: now.Add(5 * time.Second)}, 200, 200},
		{"standby", health.Status{Running: true, Roles: []health.Role{{Name: "r", State: health.Standby}}, Last: now, Next: now.Add(30 * time.Second)}, 200, 200},
		{"stopped", health.Status{Running: false, Last: now, Next: now.Add(5 * time.Second)}, 503, 503},
		{"database down", health.Status{Running: true, Last: now.Add(-2 * time.Minute), Next: now.Add(-health.DefaultStaleAfter - time.Second),
			FailingStreak: 9, FailingSince: now.Add(-2 * time.Minute), LastError: "connection refused"}, 200, 503},
		{"failing streak", health.Status{Running: true, Last: now, Next: now.Add(30 * time.Second),
			FailingStreak: 7, FailingSince: now.Add(-time.Hour), LastError: "engine answered 503"}, 200, 200},
		{"overdue within the bound", health.Status{Running: true, Last: now.Add(-time.Minute), Next: now.Add(-health.DefaultStaleAfter + time.Second)}, 200, 200},
	}
	for _, c := range cases {
		h, err := health.NewHandler(health.Config{Components: map[string]health.Reporter{"outbox": fixed(c.s)}})
		if err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]int{"/live": c.live, "/ready": c.ready, "/": c.ready} {
			code, rep, _ := serve(t, h, http.MethodGet, path)
			if code != want || rep.OK != (want == 200) {
				t.Errorf("%s: GET %q = %d (ok %v), want %d", c.state, path, code, rep.OK, want)
			}
			if len(rep.Components) != 1 || rep.Components[0].Name != "outbox" || rep.Components[0].FailingStreak != c.s.FailingStreak {
				t.Errorf("%s: GET %q components %+v", c.state, path, rep.Components)
			}
		}
	}
}

func TestHandler_OneUnreadyComponentMakesTheInstanceUnready(t *testing.T) {
	now := time.Now()
	h, err := health.NewHandler(health.Config{Components: map[string]health.Reporter{
		"outbox": fixed(health.Status{Running: true, Next: now.Add(time.Second)}),
		"leases": fixed(health.Status{Running: true, Next: now.Add(-time.Hour)}),
	}})
	if err != nil {
		t.Fatal(err)
	}
	code, rep, _ := serve(t, h, http.MethodGet, "/ready")
	if code != 503 || len(rep.Components) != 2 || rep.Components[0].Name != "leases" || rep.Components[0].Ready || !rep.Components[1].Ready ||
		!strings.HasPrefix(rep.Components[0].Reason, "stale:") {
		t.Errorf("GET /ready = %d, %+v; want 503 with leases (sorted first) stale and outbox ready", code, rep.Components)
	}
	if code, _, _ := serve(t, h, http.MethodGet, "/live"); code != 200 {
		t.Errorf("GET /live = %d; staleness must not fail liveness", code)
	}
}

func TestHandler_ShowsErrorsOnlyWhenAsked(t *testing.T) {
	s := health.Status{Running: true, FailingStreak: 1, LastError: "dial tcp db.internal:5432: refused"}
	for _, show := range []bool{false, true} {
		h, err := health.NewHandler(health.Config{Components: map[string]health.Reporter{"outbox": fixed(s)}, ShowErrors: show})
		if err != nil {
			t.Fatal(err)
		}
		_, _, body := serve(t, h, http.MethodGet, "/ready")
		if strings.Contains(body, "db.internal") != show {
			t.Errorf("ShowErrors %v: body %s", show, body)
		}
	}
}

func TestHandler_MethodsAndPaths(t *testing.T) {
	h, err := health.NewHandler(health.Config{Components: map[string]health.Reporter{"outbox": fixed(health.Status{Running: true})}})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, body := serve(t, h, http.MethodHead, "/live"); code != 200 || body != "" {
		t.Errorf("HEAD /live = %d %q", code, body)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/ready", nil))
	if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
		t.Errorf("POST /ready = %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
	}
	if code, _, _ := serve(t, h, http.MethodGet, "/lively"); code != http.StatusNotFound {
		t.Errorf("GET /lively = %d, want 404", code)
	}
	rec = httptest.NewRecorder()
	mux := http.NewServeMux()
	mux.Handle("/healthz/", http.StripPrefix("/healthz", h))
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz/live", nil))
	if rec.Code != 200 || rec.Header().Get("Cache-Control") != "no-store" {
		t.Errorf("mounted GET /healthz/live = %d, Cache-Control %q", rec.Code, rec.Header().Get("Cache-Control"))
	}
}

func TestNewHandler_RefusesConfigsItCannotJudgeWith(t *testing.T) {
	ok := fixed(health.Status{})
	for _, c := range []struct {
		cfg   health.Config
		field string
	}{
		{health.Config{}, "Components"},
		{health.Config{Components: map[string]health.Reporter{"": ok}}, "Components"},
		{health.Config{Components: map[string]health.Reporter{"outbox": nil}}, `Components["outbox"]`},
		{health.Config{Components: map[string]health.Reporter{"outbox": ok}, StaleAfter: -time.Second}, "StaleAfter"},
	} {
		_, err := health.NewHandler(c.cfg)
		var fe *config.FieldError
		if !errors.Is(err, health.ErrInvalidConfig) || !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("NewHandler(%+v) = %v, want ErrInvalidConfig through a FieldError for %s", c.cfg, err, c.field)
		}
	}
}

func TestTracker_StreakAndRunning(t *testing.T) {
	var tr health.Tracker
	t0 := time.Now()
	tr.Started(t0.Add(time.Second))
	tr.Failed(t0, "one")
	tr.Failed(t0.Add(time.Second), "two")
	s := tr.Status()
	if !s.Running || s.FailingStreak != 2 || !s.FailingSince.Equal(t0) || s.LastError != "two" || !s.Next.Equal(t0.Add(time.Second)) {
		t.Errorf("after two failures: %+v", s)
	}
	tr.Reached(t0.Add(2*time.Second), t0.Add(7*time.Second))
	s = tr.Status()
	if s.FailingStreak != 0 || !s.FailingSince.IsZero() || s.LastError != "" || !s.Last.Equal(t0.Add(2*time.Second)) {
		t.Errorf("after a success: %+v", s)
	}
	tr.Stopped()
	if tr.Status().Running {
		t.Error("running after Stopped")
	}
}
