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
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-go/baton/backends/etcd/internal/member"
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
	// is 1.5 election timeouts, rounded up to whole seconds
	// (member.Timing.MinLeaseTTL).
	MinLeaseTTL = 3 * time.Second
	// ExpiryLag is how long after its TTL an expired lease may still
	// exist: the leader looks for expired leases every 500ms, then revokes
	// them through consensus.
	ExpiryLag = 1500 * time.Millisecond
)

const memberRole = "etcd-member"

var timing = member.Timing{TickMs: TickMs, ElectionMs: ElectionMs}

// Roles adds the child role of the throwaway members to a test binary's
// roles, for testenv.RunChild.
func Roles(more map[string]func(args []string) int) map[string]func(args []string) int {
	roles := map[string]func([]string) int{memberRole: member.Main}
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

// startShared starts the throwaway cluster every test of the binary
// shares; testenv.Main stops it.
func startShared() ([]string, error) {
	dir, err := os.MkdirTemp("", "baton-etcd-")
	if err != nil {
		return nil, err
	}
	specs, initial, err := member.Plan(3, dir)
	if err != nil {
		return nil, err
	}
	token := randomHex(6)
	var eps []string
	for _, m := range specs {
		if _, err := testenv.StartSharedChild("etcd-"+m.Name, memberRole, nil, member.Args(m, initial, "test-"+token, timing)...); err != nil {
			return nil, err
		}
		eps = append(eps, m.ClientURL())
	}
	if err := waitHealthy(eps, 90*time.Second); err != nil {
		return nil, err
	}
	return eps, nil
}

// waitHealthy waits until every member answers with a leader and a
// linearizable read succeeds.
func waitHealthy(eps []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return member.WaitHealthy(ctx, eps)
}

// Cluster is a throwaway cluster that belongs to one test, which may kill,
// stop and restart its members. The members are killed, and their files
// removed, when the test ends.
type Cluster struct {
	t       *testing.T
	specs   []member.Spec
	initial string
	token   string
	members []*testenv.Child
	gen     []int
}

// StartCluster starts an n-member cluster for t and waits until it is
// healthy.
func StartCluster(t *testing.T, n int) *Cluster {
	t.Helper()
	specs, initial, err := member.Plan(n, t.TempDir())
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
	name := fmt.Sprintf("etcd-%s.%d", c.specs[i].Name, c.gen[i])
	c.members[i] = testenv.StartChild(c.t, name, memberRole, nil, member.Args(c.specs[i], c.initial, "test-"+c.token, timing)...)
}

// Endpoints are the members' client URLs.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.specs))
	for i, m := range c.specs {
		eps[i] = m.ClientURL()
	}
	return eps
}

// Endpoint is member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.specs[i].ClientURL() }

// Addr is member i's client host:port, for a fault proxy.
func (c *Cluster) Addr(i int) string { return hostPort(c.specs[i].ClientURL()) }

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
