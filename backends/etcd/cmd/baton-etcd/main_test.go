package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/backends/etcd/internal/etcdtest"
	"github.com/baton-go/baton/backends/etcd/internal/member"
	"github.com/baton-go/baton/internal/demo"
	"github.com/baton-go/baton/internal/testenv"
)

func TestMain(m *testing.M) {
	member.RunIfChild() // the demo's throwaway members
	etcdtest.Main(m)
}

// cliResult is one run of the command line.
type cliResult struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, env map[string]string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, func(k string) string { return env[k] }, &out, &errb)
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// passedDemo checks that a run printed a passing JSON result on stdout,
// with every check, and returns it.
func passedDemo(t *testing.T, r cliResult) *demo.Result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit status %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	var res demo.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, r.stdout)
	}
	if !res.Passed || len(res.Checks) < 10 {
		t.Errorf("passed %v with %d checks, want a pass with 10", res.Passed, len(res.Checks))
	}
	for _, c := range res.Checks {
		if !c.OK {
			t.Errorf("check %q failed: %s", c.Name, c.Detail)
		}
	}
	// The kill frees the leader's role and lock by etcd's expiry alone.
	for _, f := range res.Failovers {
		if !strings.HasPrefix(f.Why, "etcd ") {
			t.Errorf("failover %q bounded by %q; want etcd's lease or lock TTL", f.What, f.Why)
		}
	}
	return &res
}

var prefixRE = regexp.MustCompile(`keys under (baton-demo-[0-9a-f]+/)`)

// TestDemo_ThrowawayCluster runs "baton-etcd demo" with no cluster given:
// it starts three member processes, runs the scenario with the leases and
// locks on them, and passes.
func TestDemo_ThrowawayCluster(t *testing.T) {
	r := runCLI(t, nil, "demo", "--json")
	res := passedDemo(t, r)
	if res.Backend != "memory+etcd" {
		t.Errorf("backend %q, want memory+etcd", res.Backend)
	}
	// The cluster's shortest lease, as its grant showed it, is the one
	// its raft timing makes; the demo's leases and locks are no shorter.
	min := throwawayTiming.MinLeaseTTL()
	for _, want := range []string{
		"a throwaway three-member cluster (child processes)",
		"no lease shorter than " + min.String(),
		"lease " + min.String() + " (renew 400ms), etcd lock TTL " + min.String(),
		"its etcd client is closed with nothing revoked",
		"PASS in",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the narrative lacks %q:\n%s", want, r.stderr)
		}
	}
}

// TestDemo_GivenClusterAndPostgres runs the demo on the test cluster, with
// the outbox in PostgreSQL: it passes, and leaves neither keys nor schema.
func TestDemo_GivenClusterAndPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("a second demo run, on PostgreSQL; skipped with -short")
	}
	eps := etcdtest.Endpoints(t)
	url := testenv.PostgresURL(t)
	r := runCLI(t, map[string]string{envEndpoints: strings.Join(eps, ",")}, "demo", "--json", "--postgres", url)
	res := passedDemo(t, r)
	if res.Backend != "postgres+etcd" || !strings.HasPrefix(res.Schema, "baton_demo_") {
		t.Errorf("backend %q, schema %q; want postgres+etcd in a baton_demo_ schema", res.Backend, res.Schema)
	}
	if !strings.Contains(r.stderr, "the cluster at "+strings.Join(eps, ", ")) || !strings.Contains(r.stderr, "dropped schema "+res.Schema) {
		t.Errorf("the narrative names neither the cluster nor the dropped schema:\n%s", r.stderr)
	}
	m := prefixRE.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("the narrative names no key prefix:\n%s", r.stderr)
	}
	cli := etcdtest.NewClient(t, eps)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left, err := cli.Get(ctx, m[1], clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if left.Count != 0 {
		t.Errorf("%d keys left under %s after the demo", left.Count, m[1])
	}
}

func TestDemo_FlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--etcd-endpoints", "nonsense"}, "--etcd-endpoints"},
		{[]string{"demo", "--etcd-endpoints", "unix://x:1"}, "--etcd-endpoints"},
		{[]string{"demo", "--redis", "127.0.0.1:6379"}, "unknown flag: --redis"},
		{[]string{"demo", "--keep"}, "--keep needs --postgres"},
		{[]string{"demo", "extra"}, "takes no arguments"},
		{[]string{"nope"}, "unknown command"},
	} {
		r := runCLI(t, nil, tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit status %d, stderr %q; want 2 and one line about %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
