package holder_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/holder"
	"github.com/baton-go/baton/core/lease"
)

const role = "maintenance"

// testPeers are the peers of the tests: their servers listen on 127.0.0.1,
// which must be named to be allowed, and some leases name hosts that are
// never dialed.
var testPeers = []string{"127.0.0.1", "10.0.0.0/8", "holder.invalid"}

func roleCluster(t *testing.T, opts holder.Config, app func(*node) http.Handler) []*node {
	return startCluster(t, clusterSpec{
		size:     3,
		register: registerRole(role),
		app:      app,
		proxy: func(n *node, tr http.RoundTripper) (func(http.Handler) http.Handler, error) {
			o := opts
			o.Self = n.url
			if o.Peers == nil {
				o.Peers = testPeers
			}
			if o.Transport == nil && o.DialTimeout == 0 && o.ResponseHeaderTimeout == 0 {
				o.Transport = tr
			}
			return holder.RoleProxy(n.reg(), role, o, "/maintenance", "/maintenance-streams/")
		},
	})
}

func TestRoleProxy_NonHolderForwardsToHolderAndRelaysItsResponse(t *testing.T) {
	nodes := roleCluster(t, holder.Config{Peers: testPeers}, nil)
	h, others := waitForHolder(t, nodes, role)
	c := newClient(t)

	direct := do(t, c, "POST", h.url+"/maintenance/jobs?x=1&y=2", "payload", nil)
	for _, n := range others {
		got := do(t, c, "POST", n.url+"/maintenance/jobs?x=1&y=2", "payload", http.Header{
			"Connection":        {"X-Hop"},
			"X-Hop":             {"secret"},
			"X-Forwarded-For":   {"203.0.113.7"},
			"X-Forwarded-Proto": {"https"},
		})
		if got.status != direct.status || got.body != direct.body || got.header.Get("X-Answer") != direct.header.Get("X-Answer") ||
			got.header.Get("X-Served-By") != h.name {
			t.Fatalf("via %s: got %d %q (X-Answer %q, served by %q); direct: %d %q (X-Answer %q)",
				n.name, got.status, got.body, got.header.Get("X-Answer"), got.header.Get("X-Served-By"),
				direct.status, direct.body, direct.header.Get("X-Answer"))
		}
		seen := *h.seen.Load()
		want := map[string]string{
			holder.LoopGuardHeader: n.url,
			"X-Forwarded-For":      "203.0.113.7, 127.0.0.1",
			"X-Forwarded-Proto":    "http", // this hop's: the client's own is not trusted by default
			"X-Forwarded-Host":     strings.TrimPrefix(n.url, "http://"),
			"X-Hop":                "",
		}
		for k, v := range want {
			if got := seen.Get(k); got != v {
				t.Errorf("via %s: the holder saw %s = %q, want %q", n.name, k, got, v)
			}
		}
	}
	if got, want := h.hits.Load(), int64(1+len(others)); got != want {
		t.Errorf("holder ran the handler %d times, want %d", got, want)
	}
	for _, n := range others {
		if got := n.hits.Load(); got != 0 {
			t.Errorf("non-holder %s ran the handler %d times", n.name, got)
		}
	}
}

func TestRoleProxy_StreamsSSEEventsBeforeTheHandlerEnds(t *testing.T) {
	release := make(chan struct{})
	var ended atomic.Bool
	sse := func(n *node) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n.hits.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: one\n\n")
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Errorf("flush: %v", err)
			}
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "data: two\n\n")
			ended.Store(true)
		})
	}
	nodes := roleCluster(t, holder.Config{Peers: testPeers}, sse)
	h, others := waitForHolder(t, nodes, role)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	resp, err := newClient(t).Get(others[0].url + "/maintenance-streams/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var lines []string
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("reading event: %v (so far %q)", err, lines)
			}
			if line == "\n" {
				return strings.Join(lines, "")
			}
			lines = append(lines, line)
		}
	}
	if ev := readEvent(); ev != "data: one\n" {
		t.Fatalf("first event = %q", ev)
	}
	if ended.Load() {
		t.Fatal("the handler ended before the first event arrived: the stream was buffered")
	}
	close(release)
	if ev := readEvent(); ev != "data: two\n" {
		t.Fatalf("second event = %q", ev)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) != 0 {
		t.Fatalf("after the last event: %q, %v", rest, err)
	}
	if h.hits.Load() != 1 || others[0].hits.Load() != 0 {
		t.Fatalf("handler runs: holder %d, forwarding node %d; want 1 and 0", h.hits.Load(), others[0].hits.Load())
	}
}

func TestRoleProxy_ForwardedRequestOnNonHolderIs503AndNeverRunsLocally(t *testing.T) {
	nodes := roleCluster(t, holder.Config{Peers: testPeers}, nil)
	h, others := waitForHolder(t, nodes, role)
	c := newClient(t)
	guard := http.Header{holder.LoopGuardHeader: {"http://elsewhere:1"}}

	for _, n := range others {
		got := do(t, c, "GET", n.url+"/maintenance/x", "", guard)
		check503(t, got.status, got.header, "1")
	}
	for _, n := range nodes {
		if got := n.hits.Load(); got != 0 {
			t.Fatalf("%s ran the handler %d times for a looped request", n.name, got)
		}
	}

	// On the holder, a forwarded request is what the guard is for: it runs.
	if got := do(t, c, "GET", h.url+"/maintenance/x", "", guard); got.status != http.StatusCreated || h.hits.Load() != 1 {
		t.Fatalf("on the holder: status %d, runs %d; want 201 and 1", got.status, h.hits.Load())
	}
}

func TestProxy_PathsOutsideThePrefixesPassThroughOnEveryInstance(t *testing.T) {
	nodes := roleCluster(t, holder.Config{Peers: testPeers}, nil)
	waitForHolder(t, nodes, role)
	c := newClient(t)
	paths := []string{"/", "/public", "/maintenancex", "/maintenance-streamsx/a", "/api/maintenance"}
	for _, n := range nodes {
		for _, p := range paths {
			got := do(t, c, "GET", n.url+p, "", nil)
			if got.status != http.StatusCreated || got.header.Get("X-Served-By") != n.name {
				t.Errorf("%s %s: status %d served by %q; want local 201", n.name, p, got.status, got.header.Get("X-Served-By"))
			}
		}
		if got, want := n.hits.Load(), int64(len(paths)); got != want {
			t.Errorf("%s ran the handler %d times, want %d", n.name, got, want)
		}
	}
}

func TestProxy_PrefixesMatchWholePathSegments(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	if _, err := m.Register(role); err != nil { // not started: never held, holder unknown
		t.Fatal(err)
	}
	mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers}, "/maintenance", "/ops/streams/")
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for path, covered := range map[string]bool{
		"/maintenance":             true,
		"/maintenance/":            true,
		"/maintenance/a/b":         true,
		"/ops/streams":             true,
		"/ops/streams/1":           true,
		"/x/../maintenance/a":      true, // a router that cleans paths would route it there
		"//maintenance":            true,
		"/maintenancex":            false,
		"/ops/streamsx":            false,
		"/ops":                     false,
		"/public/maintenance":      false,
		"/maintenance/../public/x": true, // as sent, it is under the prefix
	} {
		rec := serve(h, "GET", path, nil)
		want := http.StatusTeapot
		if covered {
			want = http.StatusServiceUnavailable
		}
		if rec.Code != want {
			t.Errorf("%s: status %d, want %d (covered: %v)", path, rec.Code, want, covered)
		}
	}
}

func TestRoleProxy_UnknownHolderIs503WithRetryAfter(t *testing.T) {
	t.Run("no holder yet", func(t *testing.T) {
		m := newManager(t, memLeases(t), "solo", "")
		t.Cleanup(func() { m.Close(context.Background()) })
		if _, err := m.Register(role); err != nil {
			t.Fatal(err)
		}
		var ran atomic.Bool
		mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers, RetryAfter: 1500 * time.Millisecond}, "/maintenance")
		if err != nil {
			t.Fatal(err)
		}
		rec := serve(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) })), "GET", "/maintenance", nil)
		check503(t, rec.Code, rec.Header(), "2") // rounded up to whole seconds
		if ran.Load() {
			t.Fatal("the local handler ran")
		}
	})
	t.Run("holder advertised no address", func(t *testing.T) {
		store, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		seed(t, store, role, "other", "", time.Minute)
		m := newManager(t, store, "solo", "")
		t.Cleanup(func() { m.Close(context.Background()) })
		l, err := m.Register(role)
		if err != nil {
			t.Fatal(err)
		}
		run(t, m)
		deadline := time.Now().Add(testDeadline)
		for l.CurrentHolder() != "other" {
			if time.Now().After(deadline) {
				t.Fatal("snapshot never showed the seeded holder")
			}
			time.Sleep(10 * time.Millisecond)
		}
		mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers}, "/maintenance")
		if err != nil {
			t.Fatal(err)
		}
		rec := serve(mw(http.NotFoundHandler()), "GET", "/maintenance/x", nil)
		check503(t, rec.Code, rec.Header(), "1")
	})
}

// seededLease starts a manager that sees role held by another instance at
// address.
func seededLease(t *testing.T, address string) *lease.Manager {
	t.Helper()
	store, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seed(t, store, role, "other", address, time.Minute)
	m := newManager(t, store, "solo", "http://127.0.0.1:9")
	t.Cleanup(func() { m.Close(context.Background()) })
	l, err := m.Register(role)
	if err != nil {
		t.Fatal(err)
	}
	run(t, m)
	waitForSnapshot(t, l, address)
	return m
}

func TestRoleProxy_UnreachableHolderIs503WithRetryAfter(t *testing.T) {
	m := seededLease(t, closedPortURL(t))
	// The default transport, with its dial timeout.
	mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers, DialTimeout: time.Second}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Bool
	start := time.Now()
	rec := serve(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) })), "GET", "/maintenance", nil)
	check503(t, rec.Code, rec.Header(), "1")
	if ran.Load() {
		t.Fatal("the local handler ran")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("answering took %v: the proxy must not retry", d)
	}
}

func TestRoleProxy_HolderSilentPastResponseHeaderTimeoutIs503(t *testing.T) {
	unblock := make(chan struct{})
	slow := newSilentServer(t, unblock)
	m := seededLease(t, slow)
	mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers, ResponseHeaderTimeout: 150 * time.Millisecond}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	rec := serve(mw(http.NotFoundHandler()), "GET", "/maintenance", nil)
	close(unblock)
	check503(t, rec.Code, rec.Header(), "1")
}

func TestRoleProxy_SnapshotNamingThisInstanceIs503WithoutForwarding(t *testing.T) {
	self := "http://10.0.0.5:8080"
	m := seededLease(t, "10.0.0.5:8080") // same instance, other accepted form
	var trips atomic.Int64
	tr := roundTripFunc(func(*http.Request) (*http.Response, error) {
		trips.Add(1)
		return nil, errors.New("must not be called")
	})
	mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers, Self: self, Transport: tr}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	rec := serve(mw(http.NotFoundHandler()), "GET", "/maintenance", nil)
	check503(t, rec.Code, rec.Header(), "1")
	if trips.Load() != 0 {
		t.Fatalf("the request was forwarded %d times to ourselves", trips.Load())
	}
}

func TestRoleProxy_TransportErrorIs503(t *testing.T) {
	m := seededLease(t, "https://holder.invalid:8443")
	var got *http.Request
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return nil, errors.New("tls: handshake failure")
	})
	mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers, Transport: tr}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	rec := serve(mw(http.NotFoundHandler()), "GET", "/maintenance/a?b=c", nil)
	check503(t, rec.Code, rec.Header(), "1")
	if got == nil || got.URL.String() != "https://holder.invalid:8443/maintenance/a?b=c" {
		t.Fatalf("forwarded to %v, want https://holder.invalid:8443/maintenance/a?b=c", got.URL)
	}
}

func TestRoleProxy_UnregisteredLeasePassesThroughWhenAskedTo(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	logs := &recordingHandler{}
	mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers, PassThroughUnregistered: true,
		Logger: slog.New(logs)}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := logs.find(slog.LevelWarn, "not registered"); !ok {
		t.Errorf("the pass-through of an unregistered role was not logged at startup")
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	if rec := serve(h, "GET", "/maintenance/x", nil); rec.Code != http.StatusTeapot {
		t.Fatalf("status %d, want the local handler's 418", rec.Code)
	}
	// Looked up per request: a role registered later is honoured.
	if _, err := m.Register(role); err != nil {
		t.Fatal(err)
	}
	rec := serve(h, "GET", "/maintenance/x", nil)
	check503(t, rec.Code, rec.Header(), "1")
}

func TestRoleProxy_ClosedLeaseIs503NotLocal(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	l, err := m.Register(role)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: testPeers}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := serve(mw(http.NotFoundHandler()), "GET", "/maintenance", nil)
	check503(t, rec.Code, rec.Header(), "1")
}

// Partitions.

const partition = "devices"

func deviceKey(r *http.Request) (string, bool) {
	k := r.Header.Get("X-Device-Id")
	return k, k != ""
}

func lastSegment(r *http.Request) (string, bool) {
	i := strings.LastIndexByte(r.URL.Path, '/')
	return r.URL.Path[i+1:], true
}

func partitionCluster(t *testing.T) []*node {
	return startCluster(t, clusterSpec{
		size: 3,
		register: func(t *testing.T, m *lease.Manager) {
			if _, err := m.RegisterPartition(partition, 4); err != nil {
				t.Fatal(err)
			}
		},
		proxy: func(n *node, tr http.RoundTripper) (func(http.Handler) http.Handler, error) {
			o := holder.Config{Peers: testPeers, Self: n.url, Transport: tr}
			byDevice, err := holder.PartitionProxy(n.reg(), partition, deviceKey, o, "/device-api")
			if err != nil {
				return nil, err
			}
			orders, err := holder.PartitionProxyScoped(n.reg(), partition, "Order", lastSegment, o, "/orders")
			if err != nil {
				return nil, err
			}
			return func(h http.Handler) http.Handler { return byDevice(orders(h)) }, nil
		},
	})
}

// waitForPartitionHolders waits until each partition has one holder that
// every node agrees on.
func waitForPartitionHolders(t *testing.T, nodes []*node) {
	t.Helper()
	p, _ := nodes[0].reg().Partition(partition)
	for i := range p.Count() {
		waitForHolder(t, nodes, lease.PartitionRole(partition, i))
	}
}

// holderOf is the node holding target's partition and a node that does not.
func holderOf(t *testing.T, nodes []*node, tg lease.Target) (h, other *node) {
	t.Helper()
	for _, n := range nodes {
		if n.url == tg.HolderAddress {
			h = n
		} else {
			other = n
		}
	}
	if h == nil {
		t.Fatalf("no node at %q", tg.HolderAddress)
	}
	return h, other
}

func TestPartitionProxy_MissingKeyIs400AndNeverForwarded(t *testing.T) {
	nodes := partitionCluster(t)
	waitForPartitionHolders(t, nodes)
	c := newClient(t)
	for _, n := range nodes {
		got := do(t, c, "GET", n.url+"/device-api/state", "", nil)
		if got.status != http.StatusBadRequest || !strings.Contains(got.body, "partition key") {
			t.Errorf("%s: %d %q; want 400 naming the missing key", n.name, got.status, got.body)
		}
		if got := do(t, c, "GET", n.url+"/orders/", "", nil); got.status != http.StatusBadRequest {
			t.Errorf("%s: empty scoped key: status %d, want 400", n.name, got.status)
		}
	}
	for _, n := range nodes {
		if n.hits.Load() != 0 {
			t.Errorf("%s ran the handler %d times", n.name, n.hits.Load())
		}
	}
}

func TestPartitionProxy_ForwardsToThePartitionsHolder(t *testing.T) {
	nodes := partitionCluster(t)
	waitForPartitionHolders(t, nodes)
	p, _ := nodes[0].reg().Partition(partition)
	c := newClient(t)
	for _, key := range []string{"dev-1", "dev-2", "dev-3", "dev-4", "dev-5", "dev-6"} {
		h, other := holderOf(t, nodes, p.Resolve(key))
		got := do(t, c, "GET", other.url+"/device-api/state", "", http.Header{"X-Device-Id": {key}})
		if got.status != http.StatusCreated || got.header.Get("X-Served-By") != h.name {
			t.Errorf("key %s via %s: %d served by %q; want 201 from %s", key, other.name, got.status, got.header.Get("X-Served-By"), h.name)
		}

		h, other = holderOf(t, nodes, p.ResolveScoped("Order", key))
		got = do(t, c, "GET", other.url+"/orders/"+key, "", nil)
		if got.status != http.StatusCreated || got.header.Get("X-Served-By") != h.name {
			t.Errorf("scoped key %s via %s: %d served by %q; want 201 from %s", key, other.name, got.status, got.header.Get("X-Served-By"), h.name)
		}
	}
}

func TestPartitionProxy_UnregisteredPartitionPassesThroughWhenAskedTo(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	mw, err := holder.PartitionProxy(m.Registry(), partition, deviceKey, holder.Config{Peers: testPeers, PassThroughUnregistered: true}, "/device-api")
	if err != nil {
		t.Fatal(err)
	}
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	// Even without a key: with no partition set there is nothing to select.
	if rec := serve(h, "GET", "/device-api/x", nil); rec.Code != http.StatusTeapot {
		t.Fatalf("status %d, want the local handler's 418", rec.Code)
	}
}

func TestPartitionProxy_ClosedPartitionIs503NotLocal(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	p, err := m.RegisterPartition(partition, 2)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := holder.PartitionProxy(m.Registry(), partition, deviceKey, holder.Config{Peers: testPeers}, "/device-api")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rec := serve(mw(http.NotFoundHandler()), "GET", "/device-api/x", http.Header{"X-Device-Id": {"d"}})
	check503(t, rec.Code, rec.Header(), "1")
}

func TestConstructors_RejectInvalidArgumentsNamingTheField(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	reg := m.Registry()
	tr := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("unused") })
	role := func(reg *lease.Registry, name string, o holder.Config, prefixes ...string) error {
		_, err := holder.RoleProxy(reg, name, o, prefixes...)
		return err
	}
	part := func(reg *lease.Registry, name string, key func(*http.Request) (string, bool)) error {
		_, err := holder.PartitionProxy(reg, name, key, holder.Config{Peers: testPeers}, "/x")
		return err
	}
	for _, tc := range []struct {
		name  string
		err   error
		field string
	}{
		{"nil registry", role(nil, "r", holder.Config{Peers: testPeers}, "/x"), "reg"},
		{"empty role", role(reg, "", holder.Config{Peers: testPeers}, "/x"), "role"},
		{"role with NUL", role(reg, "a\x00b", holder.Config{Peers: testPeers}, "/x"), "role"},
		{"no prefixes", role(reg, "r", holder.Config{Peers: testPeers}), "prefixes"},
		{"relative prefix", role(reg, "r", holder.Config{Peers: testPeers}, "maintenance"), "prefixes"},
		{"unclean prefix", role(reg, "r", holder.Config{Peers: testPeers}, "/a/../b"), "prefixes"},
		{"negative RetryAfter", role(reg, "r", holder.Config{Peers: testPeers, RetryAfter: -time.Second}, "/x"), "RetryAfter"},
		{"negative DialTimeout", role(reg, "r", holder.Config{Peers: testPeers, DialTimeout: -1}, "/x"), "DialTimeout"},
		{"negative ResponseHeaderTimeout", role(reg, "r", holder.Config{Peers: testPeers, ResponseHeaderTimeout: -1}, "/x"), "ResponseHeaderTimeout"},
		{"timeouts with a Transport", role(reg, "r", holder.Config{Peers: testPeers, Transport: tr, DialTimeout: time.Second}, "/x"), "Transport"},
		{"bad Self", role(reg, "r", holder.Config{Peers: testPeers, Self: "ftp://x"}, "/x"), "Self"},
		{"partition: nil registry", part(nil, "p", deviceKey), "reg"},
		{"partition: empty name", part(reg, "", deviceKey), "partition"},
		{"partition: nil key", part(reg, "p", nil), "key"},
	} {
		switch {
		case tc.err == nil:
			t.Errorf("%s: no error", tc.name)
		case !errors.Is(tc.err, holder.ErrInvalidConfig):
			t.Errorf("%s: %v does not wrap ErrInvalidConfig", tc.name, tc.err)
		case !strings.Contains(tc.err.Error(), tc.field):
			t.Errorf("%s: %q does not name %s", tc.name, tc.err, tc.field)
		}
	}
	if _, err := holder.PartitionProxyScoped(reg, partition, "Order", nil, holder.Config{Peers: testPeers}, "/x"); !errors.Is(err, holder.ErrInvalidConfig) {
		t.Errorf("scoped, nil key: %v", err)
	}
	if _, err := holder.RoleProxy(reg, "r", holder.Config{Peers: testPeers, Self: "10.0.0.5:8080"}, "/", "/a/"); err != nil {
		t.Errorf("valid arguments rejected: %v", err)
	}
}
