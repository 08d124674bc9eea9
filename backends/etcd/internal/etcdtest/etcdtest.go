//go:build unix

// Package etcdtest finds (or starts) the etcd cluster that the etcd
// module's tests run against, and gives each test a key prefix of its own
// that is deleted when the test ends.
//
// The cluster is looked for in this order, as for PostgreSQL and Redis in
// internal/testenv:
//
//  1. env: the members listed in BATON_TEST_ETCD_ENDPOINTS (comma
//     separated); when it is set but they do not answer, the search stops
//     there with an error;
//  2. local: a server already listening on 127.0.0.1:2379;
//  3. throwaway: a three-member cluster on free loopback ports, each member
//     an embedded etcd server in a re-executed child of the test binary,
//     with its data in a temporary directory.
//
// BATON_TEST_SERVERS restricts the search to the listed tiers (env, local,
// throwaway); unset or "auto" means all three. When nothing is found the
// test is skipped, or failed when the CI environment variable is set.
//
// The members run with settings for a loaded two-core machine: a 200ms
// heartbeat, a 2s election timeout, and no fsync. Tests that kill members
// start a cluster of their own with StartCluster.
package etcdtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/baton-go/baton/internal/testenv"
)

// Environment variables.
const (
	// EnvEndpoints lists the members of a cluster of your own.
	EnvEndpoints = "BATON_TEST_ETCD_ENDPOINTS"
	envServers   = testenv.EnvServers
)

const localEndpoint = "127.0.0.1:2379"

// Member timings of the throwaway clusters.
const (
	TickMs     = 200
	ElectionMs = 2000
	// MinLeaseTTL is the shortest lease such a member grants: etcd's floor
	// is 1.5 election timeouts, rounded up to whole seconds.
	MinLeaseTTL = 3 * time.Second
	// ExpiryLag is how long after its TTL an expired lease may still
	// exist: the leader looks for expired leases every 500ms, then revokes
	// them through consensus.
	ExpiryLag = 1500 * time.Millisecond
)

const memberRole = "etcd-member"

// Roles adds the child role of the throwaway members to a test binary's
// roles, for testenv.RunChild.
func Roles(more map[string]func(args []string) int) map[string]func(args []string) int {
	roles := map[string]func([]string) int{memberRole: memberMain}
	for k, v := range more {
		roles[k] = v
	}
	return roles
}

// Main is the TestMain of a package that uses this one and has no child
// roles of its own.
func Main(m *testing.M) {
	testenv.RunChild(Roles(nil))
	testenv.Main(m)
}

var lookup struct {
	once      sync.Once
	endpoints []string
	tier      string
	err       error
}

// Endpoints returns the members of a reachable cluster, or skips the test
// (fails it when CI is set) when none can be found.
func Endpoints(t testing.TB) []string {
	t.Helper()
	lookup.once.Do(func() { lookup.endpoints, lookup.tier, lookup.err = find() })
	if lookup.err != nil {
		unavailable(t, lookup.err)
	}
	return lookup.endpoints
}

// Tier says where Endpoints found the cluster: env, local or throwaway.
func Tier() string { return lookup.tier }

func unavailable(t testing.TB, err error) {
	t.Helper()
	msg := fmt.Sprintf("no etcd cluster for this test: %v\nSet %s, or run one on %s (see docs/testing.md).", err, EnvEndpoints, localEndpoint)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func tiers() ([]string, error) {
	v := strings.TrimSpace(os.Getenv(envServers))
	if v == "" || v == "auto" {
		return []string{"env", "local", "throwaway"}, nil
	}
	var out []string
	for _, tier := range strings.Split(v, ",") {
		switch tier = strings.TrimSpace(tier); tier {
		case "env", "local", "throwaway":
			out = append(out, tier)
		case "docker":
			// etcd has no docker tier; the throwaway members need nothing
			// but the test binary.
		default:
			return nil, fmt.Errorf("%s: unknown tier %q (use env, local, throwaway or auto)", envServers, tier)
		}
	}
	return out, nil
}

func find() ([]string, string, error) {
	order, err := tiers()
	if err != nil {
		return nil, "", err
	}
	var tried []string
	for _, tier := range order {
		switch tier {
		case "env":
			v := os.Getenv(EnvEndpoints)
			if v == "" {
				tried = append(tried, "env: "+EnvEndpoints+" is not set")
				continue
			}
			eps := strings.Split(v, ",")
			if err := ping(eps); err != nil {
				return nil, "", fmt.Errorf("%s=%s: %w", EnvEndpoints, v, err)
			}
			return eps, tier, nil
		case "local":
			if err := ping([]string{localEndpoint}); err != nil {
				tried = append(tried, "local: "+err.Error())
				continue
			}
			return []string{localEndpoint}, tier, nil
		case "throwaway":
			c, err := startShared()
			if err != nil {
				tried = append(tried, "throwaway: "+err.Error())
				continue
			}
			return c, tier, nil
		}
	}
	return nil, "", errors.New(strings.Join(tried, "; "))
}

// ping checks that a linearizable read succeeds on the cluster.
func ping(endpoints []string) error {
	for _, ep := range endpoints {
		conn, err := net.DialTimeout("tcp", hostPort(ep), 2*time.Second)
		if err != nil {
			return err
		}
		conn.Close()
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = cli.Get(ctx, "baton-test-ping")
	return err
}

func hostPort(ep string) string {
	if _, rest, ok := strings.Cut(ep, "://"); ok {
		return strings.TrimSuffix(rest, "/")
	}
	return ep
}

// NewClient returns a client of the cluster, closed when the test ends.
func NewClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcdtest: client of %v: %v", endpoints, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Env is one test's slice of the cluster: a key prefix of its own.
type Env struct {
	Endpoints []string
	// Prefix starts every key the test may use (it ends with '/'); keys
	// under it are deleted when the test ends.
	Prefix string
	Client *clientv3.Client
}

// New returns the test's Env on the cluster Endpoints finds.
func New(t testing.TB) *Env {
	t.Helper()
	eps := Endpoints(t)
	cli := NewClient(t, eps)
	prefix := "baton-test/" + randomHex(6) + "/"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
			t.Errorf("etcdtest: delete the keys under %q: %v", prefix, err)
		}
	})
	return &Env{Endpoints: eps, Prefix: prefix, Client: cli}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// memberSpec is one member's place in a cluster.
type memberSpec struct {
	name       string
	dir        string
	clientPort int
	peerPort   int
}

func (m memberSpec) clientURL() string { return "http://127.0.0.1:" + strconv.Itoa(m.clientPort) }
func (m memberSpec) peerURL() string   { return "http://127.0.0.1:" + strconv.Itoa(m.peerPort) }

// planCluster chooses ports and directories for n members under dir.
func planCluster(n int, dir string) ([]memberSpec, string, error) {
	specs := make([]memberSpec, n)
	var initial []string
	for i := range specs {
		cp, err := freePort()
		if err != nil {
			return nil, "", err
		}
		pp, err := freePort()
		if err != nil {
			return nil, "", err
		}
		name := "m" + strconv.Itoa(i)
		specs[i] = memberSpec{name: name, dir: dir + "/" + name, clientPort: cp, peerPort: pp}
		initial = append(initial, name+"="+specs[i].peerURL())
	}
	return specs, strings.Join(initial, ","), nil
}

func (m memberSpec) args(initial, token string) []string {
	return []string{"-name", m.name, "-dir", m.dir,
		"-client", m.clientURL(), "-peer", m.peerURL(), "-cluster", initial, "-token", token}
}

// startShared starts the throwaway cluster every test of the binary
// shares; testenv.Main stops it.
func startShared() ([]string, error) {
	dir, err := os.MkdirTemp("", "baton-etcd-")
	if err != nil {
		return nil, err
	}
	specs, initial, err := planCluster(3, dir)
	if err != nil {
		return nil, err
	}
	token := randomHex(6)
	var eps []string
	for _, m := range specs {
		c, err := testenv.StartSharedChild("etcd-"+m.name, memberRole, nil, m.args(initial, token)...)
		if err != nil {
			return nil, err
		}
		_ = c
		eps = append(eps, m.clientURL())
	}
	if err := waitHealthy(eps, 90*time.Second); err != nil {
		return nil, err
	}
	return eps, nil
}

// waitHealthy waits until every member answers with a leader and a
// linearizable read succeeds.
func waitHealthy(eps []string, timeout time.Duration) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(timeout)
	for {
		err := healthy(cli, eps)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster %v is not healthy after %v: %w", eps, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func healthy(cli *clientv3.Client, eps []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, ep := range eps {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			return err
		}
		if st.Leader == 0 {
			return fmt.Errorf("%s has no leader", ep)
		}
	}
	_, err := cli.Get(ctx, "baton-test-ping")
	return err
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Cluster is a throwaway cluster that belongs to one test, which may kill,
// stop and restart its members. The members are killed, and their files
// removed, when the test ends.
type Cluster struct {
	t       *testing.T
	specs   []memberSpec
	initial string
	token   string
	members []*testenv.Child
	gen     []int
}

// StartCluster starts an n-member cluster for t and waits until it is
// healthy.
func StartCluster(t *testing.T, n int) *Cluster {
	t.Helper()
	specs, initial, err := planCluster(n, t.TempDir())
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	c := &Cluster{t: t, specs: specs, initial: initial, token: randomHex(6), members: make([]*testenv.Child, n), gen: make([]int, n)}
	for i := range specs {
		c.launch(i)
	}
	if err := waitHealthy(c.Endpoints(), 90*time.Second); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return c
}

func (c *Cluster) launch(i int) {
	c.gen[i]++
	name := fmt.Sprintf("etcd-%s.%d", c.specs[i].name, c.gen[i])
	c.members[i] = testenv.StartChild(c.t, name, memberRole, nil, c.specs[i].args(c.initial, c.token)...)
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.specs))
	for i, m := range c.specs {
		eps[i] = m.clientURL()
	}
	return eps
}

// Endpoint is member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.specs[i].clientURL() }

// Addr is member i's client host:port, for a fault proxy.
func (c *Cluster) Addr(i int) string { return hostPort(c.specs[i].clientURL()) }

// Kill is kill -9 of member i; it returns once the process is gone.
func (c *Cluster) Kill(i int) {
	c.members[i].Kill()
	<-c.members[i].Exited()
}

// Start restarts member i on its data directory and ports.
func (c *Cluster) Start(i int) {
	c.launch(i)
}

// Leader returns the index of the member that leads the cluster now, as
// the members that answer see it; -1 when none does.
func (c *Cluster) Leader(cli *clientv3.Client) int {
	ids := map[uint64]int{}
	var leader uint64
	for i, ep := range c.Endpoints() {
		// A short wait per member: a dead one must not hold up the answer.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		st, err := cli.Status(ctx, ep)
		cancel()
		if err != nil {
			continue
		}
		ids[st.Header.MemberId] = i
		if st.Leader != 0 {
			leader = st.Leader
		}
	}
	if i, ok := ids[leader]; ok && leader != 0 {
		return i
	}
	return -1
}

// WaitHealthy waits until every member answers with a leader.
func (c *Cluster) WaitHealthy(timeout time.Duration) {
	c.t.Helper()
	if err := waitHealthy(c.Endpoints(), timeout); err != nil {
		c.t.Fatalf("etcdtest: %v", err)
	}
}

// memberMain is one embedded etcd member, until SIGTERM or a failure.
func memberMain(args []string) int {
	fs := flag.NewFlagSet(memberRole, flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data directory")
	clientURL := fs.String("client", "", "client URL")
	peerURL := fs.String("peer", "", "peer URL")
	initial := fs.String("cluster", "", "initial cluster")
	token := fs.String("token", "", "initial cluster token")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cu, err := url.Parse(*clientURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg := embed.NewConfig()
	cfg.Name = *name
	cfg.Dir = *dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = *initial
	cfg.InitialClusterToken = "baton-test-" + *token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.TickMs, cfg.ElectionMs = TickMs, ElectionMs
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "start etcd:", err)
		return 1
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-ctx.Done():
		return 0
	}
	select {
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "etcd:", err)
		return 1
	case <-ctx.Done():
		return 0
	}
}
