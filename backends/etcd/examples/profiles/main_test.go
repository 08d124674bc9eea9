package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/backends/etcd"
	"github.com/baton-go/baton/backends/etcd/internal/etcdtest"
	"github.com/baton-go/baton/examples/profiles/service"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/internal/testenv"
)

func TestMain(m *testing.M) { etcdtest.Main(m) }

const (
	partitions = 4
	waitFor    = 30 * time.Second
)

// status is the part of GET /status these tests read.
type status struct {
	Instance    string `json:"instance"`
	Maintenance struct {
		Held  bool   `json:"held"`
		Token uint64 `json:"token"`
	} `json:"maintenance"`
	Partitions *struct {
		Held []int `json:"held"`
	} `json:"partitions"`
}

type instance struct {
	name   string
	url    string
	cancel context.CancelFunc
	done   chan error
}

// The tokens of the tests: the admin's and a user's.
const (
	adminToken = "test-admin-token-0123456789"
	aliceToken = "alice-token-0123456789abcdef"
)

// startInstance starts one copy of the command the way a deployment would:
// settings as flags, secrets in the environment.
func startInstance(t *testing.T, name, dbURL, engineURL string, c coordination) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	inst := &instance{name: name, cancel: cancel, done: make(chan error, 1)}
	ready := make(chan service.InstanceInfo, 1)
	env := map[string]string{
		"DATABASE_URL":         dbURL,
		"PROFILES_ADMIN_TOKEN": adminToken,
		"PROFILES_USERS":       "alice=" + aliceToken,
		"PROFILES_PEERS":       "127.0.0.1",
	}
	cfg, c, err := parseFlags([]string{"-listen", "127.0.0.1:0", "-instance-id", name, "-engine-url", engineURL,
		"-maintenance-every", "50ms", "-partitions", strconv.Itoa(partitions),
		"-etcd-endpoints", strings.Join(c.client.Endpoints, ","), "-etcd-prefix", c.prefix},
		func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	cfg.LeaseDuration = etcdtest.MinLeaseTTL
	cfg.RenewInterval = 500 * time.Millisecond
	cfg.HeldSafetyMargin = 500 * time.Millisecond
	cfg.OutboxIdleDelay = 50 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Ready = func(i service.InstanceInfo) { ready <- i }
	go func() { inst.done <- run(ctx, cfg, c) }()
	t.Cleanup(func() { inst.stop(t) })
	select {
	case info := <-ready:
		inst.url = info.URL
	case err := <-inst.done:
		inst.done <- err
		t.Fatalf("instance %s did not start: %v", name, err)
	case <-time.After(waitFor):
		t.Fatalf("instance %s not ready after %v", name, waitFor)
	}
	return inst
}

func (i *instance) stop(t *testing.T) {
	t.Helper()
	if i.cancel == nil {
		return
	}
	i.cancel()
	i.cancel = nil
	select {
	case err := <-i.done:
		if err != nil {
			t.Errorf("instance %s stopped with an error: %v", i.name, err)
		}
	case <-time.After(waitFor):
		t.Errorf("instance %s did not stop within %v", i.name, waitFor)
	}
}

func (i *instance) status(t *testing.T) status {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, i.url+"/status", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st status
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /status on %s: %d", i.name, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

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

// TestProfilesOnEtcd: two instances with their role lease, partitions and
// outbox leader lock on etcd and the outbox in PostgreSQL. One holds the
// role, the partitions are split between them with none held twice, a
// profile written through either reaches the engine, the coordination keys
// are in etcd and the PostgreSQL lease table stays empty, and stopping the
// holder hands the role over.
func TestProfilesOnEtcd(t *testing.T) {
	env := etcdtest.New(t)
	pg := testenv.Postgres(t)
	engine := graphtest.New(t)
	c := coordination{client: etcd.ClientOptions{Endpoints: env.Endpoints}, prefix: env.Prefix}
	a := startInstance(t, "a", pg.URL, engine.URL(), c)
	eventually(t, "a holds the maintenance role", func() error {
		if st := a.status(t); !st.Maintenance.Held {
			return fmt.Errorf("a: %+v", st)
		}
		return nil
	})
	b := startInstance(t, "b", pg.URL, engine.URL(), c)
	eventually(t, "every partition is held once", func() error {
		var held []int
		for _, inst := range []*instance{a, b} {
			st := inst.status(t)
			if st.Partitions == nil {
				return fmt.Errorf("%s reports no partitions", inst.name)
			}
			held = append(held, st.Partitions.Held...)
		}
		slices.Sort(held)
		if !slices.Equal(held, []int{0, 1, 2, 3}) {
			return fmt.Errorf("partitions held: %v", held)
		}
		return nil
	})
	if a.status(t).Maintenance.Held == b.status(t).Maintenance.Held {
		t.Fatal("both or neither instance hold the maintenance role")
	}

	req, err := http.NewRequest(http.MethodPost, b.url+"/profiles", bytes.NewReader([]byte(`{"id":"p1","label":"Ada"}`)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+aliceToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create on b: %d", resp.StatusCode)
	}
	got, err := engine.WaitDeliveries(1, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	if p := string(got[0].Payload); !strings.Contains(p, `"resourceId":"p1"`) || !strings.Contains(p, `"subjectId":"alice"`) {
		t.Errorf("the engine received %s", got[0].Payload)
	}

	ctx := context.Background()
	for _, what := range []string{"lease/role/" + "profiles-maintenance", "lease/role/" + service.PartitionSet + ":partition-0", "lock/"} {
		r, err := env.Client.Get(ctx, env.Prefix+what, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if r.Count == 0 {
			t.Errorf("no key under %s%s in etcd", env.Prefix, what)
		}
	}
	var rows int
	if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM baton_role_leases").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 0 {
		t.Errorf("the PostgreSQL lease table has %d rows; the leases belong in etcd", rows)
	}

	holder, other := a, b
	if !a.status(t).Maintenance.Held {
		holder, other = b, a
	}
	before := holder.status(t).Maintenance.Token
	holder.stop(t)
	eventually(t, other.name+" holds the role and every partition", func() error {
		st := other.status(t)
		if !st.Maintenance.Held || len(st.Partitions.Held) != partitions {
			return fmt.Errorf("%s: %+v", other.name, st)
		}
		return nil
	})
	if tok := other.status(t).Maintenance.Token; tok <= before {
		t.Errorf("the successor's token %d is not above %d", tok, before)
	}
}

func TestParseFlags_EtcdFlagsBesideTheServicesWithDefaultsFromTheEnvironment(t *testing.T) {
	env := map[string]string{envEndpoints: "a:2379,b:2379", envUsername: "u", envPassword: "p"}
	getenv := func(k string) string { return env[k] }
	cfg, c, err := parseFlags([]string{"-etcd-prefix", "x/", "-listen", "127.0.0.1:9001"}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.client.Endpoints, []string{"a:2379", "b:2379"}) || c.client.Username != "u" || c.client.Password != "p" || c.prefix != "x/" {
		t.Errorf("coordination = %+v; want the endpoints and credentials from the environment and the -etcd-prefix flag", c)
	}
	if cfg.Listen != "127.0.0.1:9001" || cfg.Partitions != 8 {
		t.Errorf("config = %+v; want the -listen flag and 8 partitions by default", cfg)
	}
	if cfg, _, err = parseFlags([]string{"-partitions", "3"}, getenv); err != nil || cfg.Partitions != 3 {
		t.Errorf("-partitions 3: %d, %v", cfg.Partitions, err)
	}
	if _, _, err := parseFlags([]string{"-partitions", "-1"}, getenv); err == nil {
		t.Error("a negative partition count was accepted")
	}
}
