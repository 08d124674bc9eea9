package service

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The tokens of the tests: the admin's and two users'.
const (
	adminToken = "test-admin-token-0123456789"
	aliceToken = "alice-token-0123456789abcdef"
	bobToken   = "bob-token-0123456789abcdefgh"
)

// testEnv is the environment the instances read their secrets from, as a
// deployment would pass them.
func testEnv(dbURL string) map[string]string {
	return map[string]string{
		envDatabaseURL: dbURL,
		envAdminToken:  adminToken,
		envUsers:       "alice=" + aliceToken + ",bob=" + bobToken,
		envPeers:       "127.0.0.1",
	}
}

// parseArgs is ParseConfig on a flag set of its own, as the command calls it.
func parseArgs(args []string, getenv func(string) string) (Config, error) {
	return ParseConfig(flag.NewFlagSet("profiles", flag.ContinueOnError), args, getenv)
}

// leaseDuration is long against the handover a release allows (a heartbeat
// of 200ms), so that a handover by expiry instead would show.
const leaseDuration = 5 * time.Second

// waitFor bounds every wait of these tests: generous, since test binaries
// share the database server.
const waitFor = 20 * time.Second

// instance is one copy of the service, run in-process by run.
type instance struct {
	name   string
	info   InstanceInfo
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// cluster is two instances over one schema and one fake engine.
type cluster struct {
	engine *graphtest.Engine
	a, b   *instance
	client *http.Client
}

// startCluster starts instance a, waits until it holds the maintenance
// role, then starts instance b, so that a is the holder.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	env := testenv.Postgres(t)
	c := &cluster{engine: graphtest.New(t), client: &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}}
	t.Cleanup(c.client.CloseIdleConnections)
	sep := "?"
	if strings.Contains(env.URL, "?") {
		sep = "&"
	}
	dbURL := env.URL + sep + "pool_max_conns=4"
	c.a = startInstance(t, "a", dbURL, c.engine.URL())
	eventually(t, "a holds the maintenance role", func() error {
		if st := c.status(t, c.a); !st.Maintenance.Held {
			return fmt.Errorf("a's status: %+v", st.Maintenance)
		}
		return nil
	})
	c.b = startInstance(t, "b", dbURL, c.engine.URL())
	eventually(t, "b knows a as the holder", func() error {
		if st := c.status(t, c.b); st.Maintenance.HolderAddress != c.a.info.Address {
			return fmt.Errorf("b sees holder %q at %q", st.Maintenance.Holder, st.Maintenance.HolderAddress)
		}
		return nil
	})
	return c
}

// startInstance starts an instance, its Config changed by configure.
func startInstance(t *testing.T, name, dbURL, engineURL string, configure ...func(*Config)) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	inst := &instance{name: name, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan InstanceInfo, 1)
	env := testEnv(dbURL)
	cfg, err := parseArgs([]string{"-listen", "127.0.0.1:0", "-instance-id", name, "-engine-url", engineURL,
		"-maintenance-every", "50ms"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.LeaseDuration = leaseDuration
	cfg.RenewInterval = 200 * time.Millisecond
	cfg.HeldSafetyMargin = 500 * time.Millisecond
	cfg.OutboxIdleDelay = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Ready = func(i InstanceInfo) { ready <- i }
	for _, c := range configure {
		c(&cfg)
	}
	go func() { inst.done <- Run(ctx, cfg) }()
	t.Cleanup(func() { inst.stop(t) })
	select {
	case inst.info = <-ready:
	case err := <-inst.done:
		inst.done <- err
		t.Fatalf("instance %s did not start: %v", name, err)
	case <-time.After(waitFor):
		t.Fatalf("instance %s not ready after %v", name, waitFor)
	}
	return inst
}

// stop ends the instance and waits for run to return, once.
func (i *instance) stop(t *testing.T) {
	t.Helper()
	i.once.Do(func() {
		i.cancel()
		select {
		case err := <-i.done:
			if err != nil {
				t.Errorf("instance %s stopped with an error: %v", i.name, err)
			}
		case <-time.After(waitFor):
			t.Errorf("instance %s did not stop within %v", i.name, waitFor)
		}
	})
}

// do sends a request to the instance and decodes a JSON answer into out
// (when not nil). It returns the status.
func (c *cluster) do(t *testing.T, inst *instance, method, path, token string, body, out any) int {
	t.Helper()
	code, raw := c.send(t, inst, method, path, token, body)
	if out != nil && code/100 == 2 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s on %s: %d answer %q is not the expected JSON: %v", method, path, inst.name, code, raw, err)
		}
	}
	return code
}

// send sends a request to the instance and returns the status and the
// answer.
func (c *cluster) send(t *testing.T, inst *instance, method, path, token string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, inst.info.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, inst.name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s on %s: reading the answer: %v", method, path, inst.name, err)
	}
	return resp.StatusCode, raw
}

func (c *cluster) status(t *testing.T, inst *instance) statusReport {
	t.Helper()
	var st statusReport
	if code := c.do(t, inst, http.MethodGet, "/status", adminToken, nil, &st); code != http.StatusOK {
		t.Fatalf("GET /status on %s: %d", inst.name, code)
	}
	return st
}

// eventually retries check until it succeeds or waitFor passes.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, waitFor, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestProfiles_CreateAndRelabelReachTheEngineInOrderAndOnce(t *testing.T) {
	c := startCluster(t)

	// Created on a, relabelled on b, then on a again: each instance writes
	// into the same outbox; the leader delivers.
	steps := []struct {
		inst          *instance
		method, path  string
		token         string
		body          any
		want          int
		lane, payload string
	}{
		{c.a, http.MethodPost, "/profiles", aliceToken, createRequest{ID: "p1"}, http.StatusCreated,
			graph.LaneInit, `"resourceId":"p1"`},
		{c.b, http.MethodPut, "/profiles/p1/label", aliceToken, map[string]string{"label": "Ada"}, http.StatusOK,
			graph.LaneMetadata, `"label":"Ada"`},
		{c.a, http.MethodPut, "/profiles/p1/label", aliceToken, map[string]string{"label": "Ada L."}, http.StatusOK,
			graph.LaneMetadata, `"label":"Ada L."`},
		{c.b, http.MethodPost, "/profiles", bobToken, createRequest{ID: "p2", Label: "Grace"}, http.StatusCreated,
			graph.LaneInit, `"resourceId":"p2"`},
		{nil, "", "", "", nil, 0, // the same transaction's second entry
			graph.LaneMetadata, `"label":"Grace"`},
	}
	for _, s := range steps {
		if s.inst == nil {
			continue
		}
		if code := c.do(t, s.inst, s.method, s.path, s.token, s.body, nil); code != s.want {
			t.Fatalf("%s %s on %s: %d, want %d", s.method, s.path, s.inst.name, code, s.want)
		}
	}

	got, err := c.engine.WaitDeliveries(len(steps), waitFor)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(steps) {
		t.Fatalf("the engine received %d deliveries, want %d: %+v", len(got), len(steps), got)
	}
	for i, s := range steps {
		if got[i].Lane != s.lane || !strings.Contains(string(got[i].Payload), s.payload) {
			t.Errorf("delivery %d is %s %s, want %s with %s", i, got[i].Lane, got[i].Payload, s.lane, s.payload)
		}
	}
	if label, _ := c.engine.Label("profile", "p1"); label != "Ada L." {
		t.Errorf("the engine's label of p1 is %q, want the last one, %q", label, "Ada L.")
	}
	// Nothing more arrives, and nothing was sent twice.
	time.Sleep(300 * time.Millisecond)
	if n := len(c.engine.Deliveries()); n != len(steps) {
		t.Errorf("the engine has %d deliveries after a pause, want %d", n, len(steps))
	}
	for _, r := range c.engine.Requests() {
		if r.Duplicate {
			t.Errorf("entry %s was delivered twice", r.IdempotencyKey)
		}
	}

	// A relabel of an unknown profile changes nothing and enqueues nothing.
	if code := c.do(t, c.b, http.MethodPut, "/profiles/nobody/label", aliceToken, map[string]string{"label": "x"}, nil); code != http.StatusNotFound {
		t.Errorf("relabel of an unknown profile: %d, want 404", code)
	}
	// A profile with a bad id is refused before anything is written.
	if code := c.do(t, c.a, http.MethodPost, "/profiles", aliceToken, createRequest{ID: strings.Repeat("x", 600)}, nil); code != http.StatusBadRequest {
		t.Errorf("create with an id of 600 bytes: %d, want 400", code)
	}
	if code := c.do(t, c.a, http.MethodPost, "/profiles", bobToken, createRequest{ID: "p1"}, nil); code != http.StatusConflict {
		t.Errorf("create of an existing id: %d, want 409", code)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(c.engine.Deliveries()); n != len(steps) {
		t.Errorf("refused requests reached the engine: %d deliveries, want %d", n, len(steps))
	}
}

func TestProfiles_MaintenanceIsServedByTheHolderThroughEitherInstance(t *testing.T) {
	c := startCluster(t)
	for _, via := range []*instance{c.a, c.b, c.b, c.a} {
		var rep maintenanceReport
		if code := c.do(t, via, http.MethodGet, "/maintenance", adminToken, nil, &rep); code != http.StatusOK {
			t.Fatalf("GET /maintenance via %s: %d", via.name, code)
		}
		if rep.ServedBy != "a" {
			t.Errorf("GET /maintenance via %s was served by %q, want the holder, a", via.name, rep.ServedBy)
		}
		var run maintenanceReport
		if code := c.do(t, via, http.MethodPost, "/maintenance/run", adminToken, nil, &run); code != http.StatusOK {
			t.Fatalf("POST /maintenance/run via %s: %d", via.name, code)
		}
		if run.ServedBy != "a" || run.Last == nil || run.Last.Instance != "a" {
			t.Errorf("POST /maintenance/run via %s: %+v, want a cycle run and recorded by a", via.name, run)
		}
	}
}

func TestProfiles_ExactlyOneInstanceRunsTheMaintenanceLoop(t *testing.T) {
	c := startCluster(t)
	start := c.status(t, c.a).Maintenance.Cycles
	eventually(t, "a runs maintenance cycles", func() error {
		if n := c.status(t, c.a).Maintenance.Cycles; n < start+10 {
			return fmt.Errorf("a ran %d cycles since the start", n-start)
		}
		return nil
	})
	b := c.status(t, c.b).Maintenance
	if b.Held || b.Cycles != 0 {
		t.Errorf("b, not the holder, ran %d maintenance cycles (held %v)", b.Cycles, b.Held)
	}
	var rep maintenanceReport
	if code := c.do(t, c.b, http.MethodGet, "/maintenance", adminToken, nil, &rep); code != http.StatusOK {
		t.Fatalf("GET /maintenance via b: %d", code)
	}
	if rep.Last == nil || rep.Last.Instance != "a" || rep.Last.Token != rep.Token {
		t.Errorf("the last maintenance record is %+v, want a's, with a's token %d", rep.Last, rep.Token)
	}
}

func TestProfiles_AdminAPIRefusesWithoutTheTokenAndAnswersLanesWithIt(t *testing.T) {
	c := startCluster(t)
	for _, token := range []string{"", "wrong-token"} {
		for _, inst := range []*instance{c.a, c.b} {
			if code := c.do(t, inst, http.MethodGet, "/admin/outbox/lanes", token, nil, nil); code != http.StatusUnauthorized {
				t.Errorf("GET /admin/outbox/lanes on %s with token %q: %d, want 401", inst.name, token, code)
			}
			if code := c.do(t, inst, http.MethodGet, "/admin/outbox/dead", token, nil, nil); code != http.StatusUnauthorized {
				t.Errorf("GET /admin/outbox/dead on %s with token %q: %d, want 401", inst.name, token, code)
			}
		}
	}
	// The outbox state is shared: either instance answers from it.
	eventually(t, "the outbox has scanned", func() error {
		var lanes map[string]any
		if code := c.do(t, c.b, http.MethodGet, "/admin/outbox/lanes", adminToken, nil, &lanes); code != http.StatusOK {
			return fmt.Errorf("GET /admin/outbox/lanes with the token: %d", code)
		}
		if _, ok := lanes["last_scan_at"]; !ok {
			return fmt.Errorf("the answer has no last_scan_at: %v", lanes)
		}
		if lanes["last_scan_at"] == nil {
			return fmt.Errorf("last_scan_at is still null")
		}
		return nil
	})
	var dead map[string][]any
	if code := c.do(t, c.a, http.MethodGet, "/admin/outbox/dead", adminToken, nil, &dead); code != http.StatusOK {
		t.Fatalf("GET /admin/outbox/dead with the token: %d", code)
	}
	if len(dead["dead_letters"]) != 0 {
		t.Errorf("dead letters on a fresh outbox: %v", dead)
	}
}

func TestProfiles_ClosingTheHolderHandsTheRoleOver(t *testing.T) {
	c := startCluster(t)
	before := c.status(t, c.a).Maintenance.Token

	stopped := time.Now()
	c.a.stop(t)
	eventually(t, "b holds the role", func() error {
		if st := c.status(t, c.b); !st.Maintenance.Held {
			return fmt.Errorf("b's status: %+v", st.Maintenance)
		}
		return nil
	})
	// A graceful close releases the row: b takes over at once, not when
	// the lease runs out.
	if took := time.Since(stopped); took > leaseDuration/2 {
		t.Errorf("b took the role %v after a stopped; a release should hand it over well within the %v lease", took, leaseDuration)
	}
	st := c.status(t, c.b)
	if st.Maintenance.Token <= before {
		t.Errorf("b's token is %d, want one above a's %d", st.Maintenance.Token, before)
	}
	var rep maintenanceReport
	if code := c.do(t, c.b, http.MethodGet, "/maintenance", adminToken, nil, &rep); code != http.StatusOK || rep.ServedBy != "b" {
		t.Errorf("GET /maintenance via b after the handover: %d, served by %q; want 200 from b", code, rep.ServedBy)
	}
	eventually(t, "b runs maintenance cycles", func() error {
		if n := c.status(t, c.b).Maintenance.Cycles; n < 3 {
			return fmt.Errorf("b ran %d cycles", n)
		}
		return nil
	})
	// The outbox's leadership moved too: b delivers what it writes now.
	if code := c.do(t, c.b, http.MethodPost, "/profiles", aliceToken, createRequest{ID: "after"}, nil); code != http.StatusCreated {
		t.Fatalf("create on b: %d", code)
	}
	got, err := c.engine.WaitDeliveries(1, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(got[0].Payload), `"resourceId":"after"`) {
		t.Errorf("the engine received %s, want the profile created after the handover", got[0].Payload)
	}
}

func TestConfig_FlagsWinOverTheEnvironmentAndBadValuesAreNamed(t *testing.T) {
	env := map[string]string{
		envListen:           "127.0.0.1:9000",
		envAdminToken:       adminToken,
		envMaintenanceEvery: "3s",
	}
	parse := func(args ...string) (Config, error) {
		return parseArgs(args, func(k string) string { return env[k] })
	}
	cfg, err := parse("-listen", "127.0.0.1:9001")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Listen != "127.0.0.1:9001" || cfg.AdminToken != adminToken || cfg.MaintenanceEvery != 3*time.Second {
		t.Errorf("config = %+v; want the -listen flag over %s, the token and interval from the environment", cfg, envListen)
	}
	if cfg.DatabaseURL != defaultDatabaseURL || cfg.EngineURL != "" {
		t.Errorf("config = %+v; want the default database URL and no engine URL", cfg)
	}

	env[envMaintenanceEvery] = "often"
	if _, err := parse(); err == nil || !strings.Contains(err.Error(), envMaintenanceEvery) {
		t.Errorf("an unparsable %s gave %v, want an error naming it", envMaintenanceEvery, err)
	}
	delete(env, envMaintenanceEvery)
	env[envEngineToken] = "engine-token-0123456789"
	if _, err := parse(); err == nil {
		t.Error("an engine token without an engine URL was accepted")
	}
	delete(env, envEngineToken)
	for value, want := range map[string]string{
		"alice":       "name=token pairs",
		"alice=short": "at least 16",
		"alice=" + aliceToken + ",alice=" + bobToken: "listed twice",
		"alice=" + aliceToken + ",bob=" + aliceToken: "the same token",
		"al ice=" + aliceToken:                       "user name",
		"alice=" + adminToken:                        "the admin token",
	} {
		env[envUsers] = value
		if _, err := parse(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%q: %v, want an error saying %q", envUsers, value, err, want)
		}
	}
	delete(env, envUsers)
	env[envAdminToken] = "short"
	if _, err := parse(); err == nil {
		t.Error("an admin token of 5 characters was accepted")
	}
	env[envAdminToken] = adminToken
	if _, err := parse("-maintenance-every", "0s"); err == nil {
		t.Error("a zero maintenance interval was accepted")
	}
}

func TestRequireBearer_WithoutAConfiguredTokenTheAdminAPIIsOff(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	for _, tc := range []struct {
		configured, sent string
		want             int
	}{
		{"", "", http.StatusNotFound},
		{"", "anything", http.StatusNotFound},
		{"s3cret", "", http.StatusUnauthorized},
		{"s3cret", "s3cre", http.StatusUnauthorized},
		{"s3cret", "s3cret", http.StatusTeapot},
	} {
		req := httptest.NewRequest(http.MethodGet, "/admin/outbox/lanes", nil)
		if tc.sent != "" {
			req.Header.Set("Authorization", "Bearer "+tc.sent)
		}
		rec := httptest.NewRecorder()
		requireBearer(tc.configured, next).ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("token %q configured, %q sent: %d, want %d", tc.configured, tc.sent, rec.Code, tc.want)
		}
	}
}
