package holder_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/holder"
	"github.com/baton-go/baton/core/lease"
)

// attacker is a server that someone who can write baton_role_leases points
// a holder address at. It records every request that reaches it.
type attacker struct {
	url  string
	hits atomic.Int64
	auth atomic.Value // Authorization of the last request
}

func newAttacker(t *testing.T, ip string) *attacker {
	t.Helper()
	a := &attacker{}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.hits.Add(1)
		a.auth.Store(r.Header.Get("Authorization"))
		http.SetCookie(w, &http.Cookie{Name: "session", Value: "attacker"})
		w.WriteHeader(http.StatusOK)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	a.url = srv.URL
	return a
}

// credentials are what a client sends and an attacker wants.
var credentials = http.Header{
	"Authorization": {"Bearer user-secret"},
	"Cookie":        {"session=user-session"},
}

func TestRoleProxy_ARowPointingAtAnAttackerReceivesNothing(t *testing.T) {
	// The instances run on 127.0.0.1 and say so; the attacker's server is
	// on another loopback address, as a host outside the list would be.
	evil := newAttacker(t, "127.0.0.2")
	m := seededLease(t, evil.url)
	for name, opts := range map[string]holder.Config{
		"default transport": {Peers: []string{"127.0.0.1"}},
		"custom transport":  {Peers: []string{"127.0.0.1"}, Transport: &http.Transport{}},
		"AllowPeer says no": {AllowPeer: func(u *url.URL) bool { return u.Hostname() == "127.0.0.1" }},
	} {
		t.Run(name, func(t *testing.T) {
			mw, err := holder.RoleProxy(m.Registry(), role, opts, "/maintenance")
			if err != nil {
				t.Fatal(err)
			}
			var ran atomic.Bool
			rec := serve(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran.Store(true) })),
				"POST", "/maintenance/x", credentials)
			if n := evil.hits.Load(); n != 0 {
				t.Fatalf("the attacker's server received %d requests (Authorization %q)", n, evil.auth.Load())
			}
			check503(t, rec.Code, rec.Header(), "1")
			if c := rec.Header().Get("Set-Cookie"); c != "" {
				t.Fatalf("the attacker's Set-Cookie %q reached the client", c)
			}
			if ran.Load() {
				t.Fatal("the local handler ran")
			}
		})
	}
}

func TestRoleProxy_PeersAreCheckedOnEveryForwardBeforeAnythingIsSent(t *testing.T) {
	var sent []string
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent = append(sent, r.URL.Host)
		return nil, errors.New("recorded, not sent")
	})
	peers := []string{"10.0.0.0/8", "app-03.internal", ".pods.internal", "fd00::/8"}
	for _, tc := range []struct {
		addr    string
		allowed bool
	}{
		{"http://10.1.2.3:8080", true},
		{"http://APP-03.internal:8080", true},
		{"https://a.b.pods.internal:8443", true},
		{"http://[fd00::5]:80", true},
		{"http://11.0.0.1:8080", false},
		{"http://attacker.example:80", false},
		{"http://pods.internal:80", false}, // the suffix needs a label before it
		{"http://app-03.internal.attacker.example:80", false},
		{"http://169.254.169.254:80", false}, // link-local: a cloud metadata service
		{"http://[fe80::1]:80", false},
		{"http://127.0.0.1:8080", false},
		{"http://[::1]:8080", false},
		{"http://[::ffff:127.0.0.1]:8080", false},
		{"http://0.0.0.0:8080", false},
		{"http://224.0.0.1:8080", false},
	} {
		m := seededLease(t, tc.addr)
		mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: peers, Transport: tr}, "/maintenance")
		if err != nil {
			t.Fatal(err)
		}
		sent = nil
		rec := serve(mw(http.NotFoundHandler()), "GET", "/maintenance", nil)
		check503(t, rec.Code, rec.Header(), "1") // the transport fails even when allowed
		if got := len(sent) == 1; got != tc.allowed {
			t.Errorf("%s: forwarded %v (to %v), want %v", tc.addr, got, sent, tc.allowed)
		}
		if !tc.allowed && !strings.Contains(rec.Body.String(), "not an allowed peer") {
			t.Errorf("%s: the 503 says %q, want it to name the refused peer", tc.addr, rec.Body.String())
		}
	}
}

func TestRoleProxy_LoopbackAndLinkLocalNeedAnEntryOfTheirOwn(t *testing.T) {
	var sent int
	tr := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent++
		return nil, errors.New("recorded, not sent")
	})
	for _, tc := range []struct {
		peers   []string
		addr    string
		allowed bool
	}{
		{[]string{"0.0.0.0/0"}, "http://127.0.0.1:80", false},
		{[]string{"0.0.0.0/0"}, "http://169.254.169.254:80", false},
		{[]string{"0.0.0.0/0"}, "http://8.8.8.8:80", true},
		{[]string{"::/0"}, "http://[::1]:80", false},
		{[]string{"127.0.0.0/8"}, "http://127.0.0.2:80", true},
		{[]string{"127.0.0.1"}, "http://127.0.0.2:80", false},
		{[]string{"::1"}, "http://[::1]:80", true},
		{[]string{"169.254.0.0/16"}, "http://169.254.169.254:80", true},
	} {
		m := seededLease(t, tc.addr)
		allowAll := func(*url.URL) bool { return true }
		mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: tc.peers, AllowPeer: allowAll, Transport: tr}, "/maintenance")
		if err != nil {
			t.Fatal(err)
		}
		sent = 0
		serve(mw(http.NotFoundHandler()), "GET", "/maintenance", nil)
		if got := sent == 1; got != tc.allowed {
			t.Errorf("peers %v, holder %s: forwarded %v, want %v", tc.peers, tc.addr, got, tc.allowed)
		}
	}
}

func TestRoleProxy_AHostNameResolvingToLoopbackIsRefusedWhenDialing(t *testing.T) {
	// "localhost" is allowed by name, but it resolves to a loopback address
	// that Peers does not name: the default transport refuses to connect.
	target := newAttacker(t, "127.0.0.1")
	u, _ := url.Parse(target.url)
	m := seededLease(t, "http://localhost:"+u.Port())

	mw, err := holder.RoleProxy(m.Registry(), role, holder.Config{Peers: []string{"localhost"}}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	rec := serve(mw(http.NotFoundHandler()), "GET", "/maintenance", credentials)
	check503(t, rec.Code, rec.Header(), "1")
	if n := target.hits.Load(); n != 0 {
		t.Fatalf("a name resolving to an unlisted loopback address received %d requests", n)
	}
	if !strings.Contains(rec.Body.String(), "not an allowed peer") {
		t.Errorf("the 503 says %q, want it to name the refused peer", rec.Body.String())
	}

	// Naming the loopback address too allows it.
	mw, err = holder.RoleProxy(m.Registry(), role, holder.Config{Peers: []string{"localhost", "127.0.0.1", "::1"}}, "/maintenance")
	if err != nil {
		t.Fatal(err)
	}
	if rec := serve(mw(http.NotFoundHandler()), "GET", "/maintenance", nil); rec.Code != http.StatusOK || target.hits.Load() != 1 {
		t.Fatalf("with 127.0.0.1 named: status %d, %d requests arrived; want 200 and 1", rec.Code, target.hits.Load())
	}
}

func TestConstructors_RequirePeersAndRejectMalformedEntries(t *testing.T) {
	m := newManager(t, memLeases(t), "solo", "")
	t.Cleanup(func() { m.Close(context.Background()) })
	reg := m.Registry()
	build := map[string]func(holder.Config) error{
		"RoleProxy": func(o holder.Config) error { _, err := holder.RoleProxy(reg, role, o, "/x"); return err },
		"PartitionProxy": func(o holder.Config) error {
			_, err := holder.PartitionProxy(reg, partition, deviceKey, o, "/x")
			return err
		},
	}
	for name, b := range build {
		if err := b(holder.Config{}); !errors.Is(err, holder.ErrInvalidConfig) || !strings.Contains(err.Error(), "Config.Peers") {
			t.Errorf("%s without peers: %v; want ErrInvalidConfig naming Config.Peers", name, err)
		}
		for _, bad := range []string{"http://10.0.0.1", "10.0.0.1:8080", "10.0.0.0/33", "a..b", "", ".", "fe80::1%eth0", "host name"} {
			err := b(holder.Config{Peers: []string{"10.0.0.0/8", bad}})
			if !errors.Is(err, holder.ErrInvalidConfig) || !strings.Contains(err.Error(), "Config.Peers[1]") {
				t.Errorf("%s with peer %q: %v; want ErrInvalidConfig naming Config.Peers[1]", name, bad, err)
			}
		}
		if err := b(holder.Config{AllowPeer: func(*url.URL) bool { return false }}); err != nil {
			t.Errorf("%s with AllowPeer only: %v", name, err)
		}
	}
}

func TestRoleProxy_StripCredentialsRemovesAuthorizationAndCookie(t *testing.T) {
	for _, strip := range []bool{false, true} {
		nodes := roleCluster(t, holder.Config{StripCredentials: strip}, nil)
		h, others := waitForHolder(t, nodes, role)
		do(t, newClient(t), "GET", others[0].url+"/maintenance/x", "", credentials)
		seen := *h.seen.Load()
		for k, v := range credentials {
			want := v[0]
			if strip {
				want = ""
			}
			if got := seen.Get(k); got != want {
				t.Errorf("StripCredentials %v: the holder saw %s = %q, want %q", strip, k, got, want)
			}
		}
		if seen.Get(holder.LoopGuardHeader) == "" {
			t.Errorf("StripCredentials %v: the request did not arrive forwarded", strip)
		}
	}
}

var clientForwarded = http.Header{
	"X-Forwarded-Host":  {"evil.example"},
	"X-Forwarded-Proto": {"https"},
	"Forwarded":         {"for=1.2.3.4;host=evil.example;proto=https"},
}

func TestRoleProxy_ClientForwardedHeadersAreReplacedByTheProxysOwn(t *testing.T) {
	nodes := roleCluster(t, holder.Config{}, nil)
	h, others := waitForHolder(t, nodes, role)
	n := others[0]
	do(t, newClient(t), "GET", n.url+"/maintenance/x", "", clientForwarded)
	seen := *h.seen.Load()
	for k, want := range map[string]string{
		"X-Forwarded-Host":  strings.TrimPrefix(n.url, "http://"),
		"X-Forwarded-Proto": "http",
		"Forwarded":         "",
	} {
		if got := seen.Get(k); got != want {
			t.Errorf("the holder saw %s = %q, want %q (set by the forwarding instance, not the client)", k, got, want)
		}
	}
}

func TestRoleProxy_TrustForwardedHeadersRelaysThemAsReceived(t *testing.T) {
	nodes := roleCluster(t, holder.Config{TrustForwardedHeaders: true}, nil)
	h, others := waitForHolder(t, nodes, role)
	do(t, newClient(t), "GET", others[0].url+"/maintenance/x", "", clientForwarded)
	seen := *h.seen.Load()
	for k, v := range clientForwarded {
		if got := seen.Get(k); got != v[0] {
			t.Errorf("the holder saw %s = %q, want the ingress's %q", k, got, v[0])
		}
	}
}

// Partition proxies share the forwarder: one check that the peer rule
// applies to them too.
func TestPartitionProxy_RefusesAHolderOutsideThePeers(t *testing.T) {
	evil := newAttacker(t, "127.0.0.2")
	store, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t, store, "solo", "http://127.0.0.1:9")
	t.Cleanup(func() { m.Close(context.Background()) })
	p, err := m.RegisterPartition(partition, 1)
	if err != nil {
		t.Fatal(err)
	}
	seed(t, store, lease.PartitionRole(partition, 0), "other", evil.url, testLeaseDuration*60)
	run(t, m)
	waitForSnapshot(t, p.Lease(0), evil.url)
	mw, err := holder.PartitionProxy(m.Registry(), partition, deviceKey, holder.Config{Peers: []string{"127.0.0.1"}}, "/device-api")
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"X-Device-Id": {"d-1"}}
	for k, v := range credentials {
		h[k] = v
	}
	rec := serve(mw(http.NotFoundHandler()), "GET", "/device-api/x", h)
	check503(t, rec.Code, rec.Header(), "1")
	if n := evil.hits.Load(); n != 0 {
		t.Fatalf("the attacker's server received %d requests", n)
	}
}
