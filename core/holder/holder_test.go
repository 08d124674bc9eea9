package holder_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lease"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seed makes another instance the holder of role, at address, for ttl.
func seed(t *testing.T, store lease.Store, role, holderID, address string, ttl time.Duration) {
	t.Helper()
	recs, err := store.Heartbeat(context.Background(), lease.HeartbeatRequest{
		Holder: holderID, Address: address, LeaseDuration: ttl, Claims: []lease.Claim{{Role: role}},
	})
	if err != nil || len(recs) != 1 || !recs[0].Held {
		t.Fatalf("seed %s as holder of %s: %v %+v", holderID, role, err, recs)
	}
}

// Timings short enough for fast tests, long enough that a busy -race run
// does not drop a hold between two renewals.
const (
	testLeaseDuration = time.Second
	testRenewInterval = 100 * time.Millisecond
	testSafetyMargin  = 200 * time.Millisecond
	testDeadline      = 5 * time.Second
)

func newManager(t *testing.T, store lease.Store, id, address string) *lease.Manager {
	t.Helper()
	m, err := lease.NewManager(lease.Config{
		Store:            store,
		InstanceID:       id,
		Address:          address,
		LeaseDuration:    testLeaseDuration,
		RenewInterval:    testRenewInterval,
		HeldSafetyMargin: testSafetyMargin,
	})
	if err != nil {
		t.Fatalf("NewManager: %v", err)
	}
	return m
}

// node is one instance: an HTTP server whose handler is the proxy under
// test around an app that counts its runs.
type node struct {
	name string
	url  string
	srv  *httptest.Server
	mgr  *lease.Manager
	hits atomic.Int64
	seen atomic.Pointer[http.Header] // headers of the app's last request
}

func (n *node) reg() *lease.Registry { return n.mgr.Registry() }

// countingApp answers 201 with a custom header and echoes the request line
// and body, so a relayed answer can be compared with a direct one.
func countingApp(n *node) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.hits.Add(1)
		h := r.Header.Clone()
		n.seen.Store(&h)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Answer", "42")
		w.Header().Set("X-Served-By", n.name)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "%s %s %s\n", r.Method, r.URL.RequestURI(), body)
	})
}

type clusterSpec struct {
	size     int
	register func(t *testing.T, m *lease.Manager)
	proxy    func(n *node, tr http.RoundTripper) (func(http.Handler) http.Handler, error)
	app      func(n *node) http.Handler // default countingApp
}

// startCluster starts spec.size servers sharing one store, each with its own
// manager advertising its own server URL, and cleans all of it up.
func startCluster(t *testing.T, spec clusterSpec) []*node {
	t.Helper()
	store, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	app := spec.app
	if app == nil {
		app = countingApp
	}
	var nodes []*node
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		for _, n := range nodes {
			n.srv.Close()
		}
		for _, n := range nodes {
			if err := n.mgr.Close(context.Background()); err != nil {
				t.Errorf("%s: closing manager: %v", n.name, err)
			}
		}
	})
	for i := range spec.size {
		n := &node{name: fmt.Sprintf("node-%d", i)}
		n.srv = httptest.NewUnstartedServer(nil)
		n.url = "http://" + n.srv.Listener.Addr().String()
		n.mgr = newManager(t, store, n.name, n.url)
		nodes = append(nodes, n)
		spec.register(t, n.mgr)
		mw, err := spec.proxy(n, tr)
		if err != nil {
			t.Fatalf("%s: building proxy: %v", n.name, err)
		}
		n.srv.Config.Handler = mw(app(n))
		n.srv.Start()
	}
	for _, n := range nodes {
		run(t, n.mgr)
	}
	return nodes
}

func registerRole(role string) func(*testing.T, *lease.Manager) {
	return func(t *testing.T, m *lease.Manager) {
		if _, err := m.Register(role); err != nil {
			t.Fatalf("Register: %v", err)
		}
	}
}

// waitForHolder waits until exactly one node holds role and every node's
// snapshot points at it, and returns the holder and the others.
func waitForHolder(t *testing.T, nodes []*node, role string) (*node, []*node) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for {
		var holders, others []*node
		agreed := true
		for _, n := range nodes {
			l, ok := n.reg().Lease(role)
			if !ok {
				t.Fatalf("%s: role %q not registered", n.name, role)
			}
			if l.IsHeld() {
				holders = append(holders, n)
			} else {
				others = append(others, n)
			}
		}
		if len(holders) == 1 {
			for _, n := range nodes {
				l, _ := n.reg().Lease(role)
				agreed = agreed && l.CurrentHolderAddress() == holders[0].url
			}
			if agreed {
				return holders[0], others
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single agreed holder of %q within %v (holders: %d)", role, testDeadline, len(holders))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForSnapshot waits until l's snapshot shows address.
func waitForSnapshot(t *testing.T, l *lease.Lease, address string) {
	t.Helper()
	deadline := time.Now().Add(testDeadline)
	for l.CurrentHolderAddress() != address || l.CurrentHolder() == "" {
		if time.Now().After(deadline) {
			t.Fatalf("snapshot of %q never showed holder address %q (has %q)", l.Role(), address, l.CurrentHolderAddress())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type response struct {
	status int
	header http.Header
	body   string
}

func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: testDeadline}
}

func do(t *testing.T, c *http.Client, method, url, body string, header http.Header) response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func serve(h http.Handler, method, target string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func check503(t *testing.T, status int, header http.Header, wantRetryAfter string) {
	t.Helper()
	if status != http.StatusServiceUnavailable {
		t.Fatalf("status = %d, want 503", status)
	}
	if got := header.Get("Retry-After"); got != wantRetryAfter {
		t.Fatalf("Retry-After = %q, want %q", got, wantRetryAfter)
	}
}

// closedPortURL is an address nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// newSilentServer accepts requests and answers nothing until unblock is
// closed or the client gives up.
func newSilentServer(t *testing.T, unblock <-chan struct{}) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-unblock:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// memLeases is a fresh in-memory lease store.
func memLeases(t *testing.T) *memory.LeaseStore {
	t.Helper()
	st, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// run runs m until the test ends; the cleanup closes m and waits for Run.
func run(t *testing.T, m *lease.Manager) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.Run(context.Background()) }()
	t.Cleanup(func() {
		_ = m.Close(context.Background())
		<-done
	})
}
