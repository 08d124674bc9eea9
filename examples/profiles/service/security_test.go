package service

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestProfiles_TheOwnerIsTheAuthenticatedUserNotTheBody(t *testing.T) {
	c := startCluster(t)
	// No token, or a wrong one: nothing is created.
	for _, token := range []string{"", "not-a-token-of-anyone-here"} {
		if code := c.do(t, c.a, http.MethodPost, "/profiles", token, map[string]string{"id": "p0", "label": "x"}, nil); code != http.StatusUnauthorized {
			t.Errorf("create with token %q: %d, want 401", token, code)
		}
	}
	// A body naming another owner is refused: the owner is whoever the token says.
	if code := c.do(t, c.a, http.MethodPost, "/profiles", aliceToken, map[string]string{"id": "p1", "owner": "bob"}, nil); code != http.StatusBadRequest {
		t.Errorf("create naming another owner: %d, want 400", code)
	}
	if code := c.do(t, c.b, http.MethodPost, "/profiles", aliceToken, map[string]string{"id": "p1", "label": "Ada"}, nil); code != http.StatusCreated {
		t.Fatalf("create as alice: %d", code)
	}
	var p profile
	if code := c.do(t, c.a, http.MethodGet, "/profiles/p1", aliceToken, nil, &p); code != http.StatusOK || p.Owner != "alice" {
		t.Errorf("GET as alice: %d %+v, want the profile owned by alice", code, p)
	}
	if code := c.do(t, c.a, http.MethodGet, "/profiles/p1", bobToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("GET of alice's profile as bob: %d, want 404", code)
	}
	got, err := c.engine.WaitDeliveries(2, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got[0].Payload), `"subjectId":"alice"`) {
		t.Errorf("the engine was told %s, want alice as the owner", got[0].Payload)
	}
}

func TestProfiles_OnlyTheOwnerRelabels(t *testing.T) {
	c := startCluster(t)
	if code := c.do(t, c.a, http.MethodPost, "/profiles", aliceToken, map[string]string{"id": "p1", "label": "Ada"}, nil); code != http.StatusCreated {
		t.Fatalf("create as alice: %d", code)
	}
	if _, err := c.engine.WaitDeliveries(2, waitFor); err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{bobToken, ""} {
		code := c.do(t, c.b, http.MethodPut, "/profiles/p1/label", token, map[string]string{"label": "Mallory was here"}, nil)
		if code != http.StatusNotFound && code != http.StatusUnauthorized {
			t.Errorf("relabel of alice's profile with token %q: %d, want 404 or 401", token, code)
		}
	}
	var p profile
	c.do(t, c.a, http.MethodGet, "/profiles/p1", aliceToken, nil, &p)
	if p.Label != "Ada" {
		t.Errorf("the label is %q after refused relabels, want %q", p.Label, "Ada")
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(c.engine.Deliveries()); n != 2 {
		t.Errorf("refused relabels reached the engine: %d deliveries, want 2", n)
	}
	if code := c.do(t, c.b, http.MethodPut, "/profiles/p1/label", aliceToken, map[string]string{"label": "Ada L."}, nil); code != http.StatusOK {
		t.Errorf("relabel as the owner: %d, want 200", code)
	}
}

func TestProfiles_OperatorRoutesNeedTheAdminToken(t *testing.T) {
	c := startCluster(t)
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/status"},
		{http.MethodGet, "/maintenance"},
		{http.MethodPost, "/maintenance/run"},
		{http.MethodGet, "/admin/outbox/lanes"},
		{http.MethodGet, "/metrics"},
	} {
		for _, inst := range []*instance{c.a, c.b} {
			for _, token := range []string{"", aliceToken} {
				if code := c.do(t, inst, r.method, r.path, token, nil, nil); code != http.StatusUnauthorized {
					t.Errorf("%s %s on %s with token %q: %d, want 401", r.method, r.path, inst.name, token, code)
				}
			}
			if code := c.do(t, inst, r.method, r.path, adminToken, nil, nil); code != http.StatusOK {
				t.Errorf("%s %s on %s with the admin token: %d, want 200", r.method, r.path, inst.name, code)
			}
		}
	}
}

func TestConfig_TokensAreReadFromTheEnvironmentOnly(t *testing.T) {
	env := map[string]string{envAdminToken: adminToken, envUsers: "alice=" + aliceToken}
	getenv := func(k string) string { return env[k] }
	for _, flag := range []string{"-admin-token", "-engine-token", "-users"} {
		if _, err := parseArgs([]string{flag, "s3cret-s3cret-s3cret"}, getenv); err == nil {
			t.Errorf("%s was accepted on the command line, where every process listing shows it", flag)
		}
	}
	cfg, err := parseArgs(nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AdminToken != adminToken {
		t.Errorf("the admin token is %q, want the one from %s", cfg.AdminToken, envAdminToken)
	}
}

func TestServer_HasEveryTimeout(t *testing.T) {
	srv := newHTTPServer(http.NotFoundHandler(), nil)
	for name, d := range map[string]time.Duration{
		"ReadHeaderTimeout": srv.ReadHeaderTimeout,
		"ReadTimeout":       srv.ReadTimeout,
		"WriteTimeout":      srv.WriteTimeout,
		"IdleTimeout":       srv.IdleTimeout,
	} {
		if d <= 0 {
			t.Errorf("%s is %v; a client could hold a connection open for ever", name, d)
		}
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 1<<20 {
		t.Errorf("MaxHeaderBytes is %d, want a bound of at most 1 MiB", srv.MaxHeaderBytes)
	}
}

func TestRun_ABadDatabaseURLIsNotQuoted(t *testing.T) {
	cfg := Config{Listen: "127.0.0.1:0", DatabaseURL: "host=db port = x password = hunter2-s3cret", MaintenanceEvery: time.Second}
	err := Run(t.Context(), cfg)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Run with a bad database URL: %v; want an error that does not quote it", err)
	}
}
