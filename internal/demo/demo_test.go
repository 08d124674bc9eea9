package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
	lockmem "github.com/baton-go/baton/locks/memory"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// checkDemoResult asserts the structured result of a passing demo.
func checkDemoResult(t *testing.T, res *Result) {
	t.Helper()
	if !res.Passed {
		t.Errorf("the demo did not pass")
	}
	wantChecks := []string{
		"one holder", "delivered in (xid, id) order", "lost", "rolled-back delivered",
		"graph.init before metadata", "final labels", "one stuck notice",
		"parked, requeued, delivered", "permission checks", "failover within bounds",
	}
	byName := map[string]Check{}
	for _, c := range res.Checks {
		byName[c.Name] = c
		if !c.OK {
			t.Errorf("check %q failed: %s", c.Name, c.Detail)
		}
	}
	for _, name := range wantChecks {
		if _, ok := byName[name]; !ok {
			t.Errorf("check %q missing from %+v", name, res.Checks)
		}
	}
	if !res.InOrder || res.OrderViolations != 0 || res.Unexpected != 0 {
		t.Errorf("in order %v, %d violations, %d unexpected", res.InOrder, res.OrderViolations, res.Unexpected)
	}
	if res.Lost != 0 || res.RolledBackDelivered != 0 {
		t.Errorf("lost %d, rolled-back delivered %d; want 0 and 0", res.Lost, res.RolledBackDelivered)
	}
	if res.Transactions.Committed == 0 || res.Transactions.RolledBack == 0 || res.RolledBackEntries == 0 {
		t.Errorf("transactions %+v, rolled-back entries %d: want both commits and rollbacks", res.Transactions, res.RolledBackEntries)
	}
	// Every committed entry was delivered once (the parked one as its
	// requeued copy): the deliveries are the committed entries.
	if res.Delivered != res.CommittedEntries {
		t.Errorf("delivered %d entries, committed %d", res.Delivered, res.CommittedEntries)
	}
	if res.DeliveredByLane[graph.LaneInit] == 0 || res.DeliveredByLane[graph.LaneMetadata] == 0 {
		t.Errorf("deliveries by lane %v: want both standard lanes", res.DeliveredByLane)
	}
	if res.InitAfterMetadata != 0 || res.LabelMismatches != 0 || res.Profiles == 0 {
		t.Errorf("profiles %d, init after metadata %d, label mismatches %d", res.Profiles, res.InitAfterMetadata, res.LabelMismatches)
	}
	if res.StuckNotices != 1 {
		t.Errorf("%d stuck notices, want 1", res.StuckNotices)
	}
	if res.Parked != 1 || res.Requeued != 1 || res.RequeuedDelivered != 1 {
		t.Errorf("parked %d, requeued %d, requeued delivered %d; want 1, 1, 1", res.Parked, res.Requeued, res.RequeuedDelivered)
	}
	if res.PermissionChecks == 0 || res.PermissionFailures != 0 {
		t.Errorf("%d permission checks, %d failed", res.PermissionChecks, res.PermissionFailures)
	}
	whats := map[string]bool{}
	for _, f := range res.Failovers {
		whats[f.What] = true
		if f.TookMS <= 0 || f.TookMS > f.BoundMS {
			t.Errorf("failover %q took %d ms, bound %d ms", f.What, f.TookMS, f.BoundMS)
		}
		if f.By == "" || f.By == "instance-1" {
			t.Errorf("failover %q: taken by %q, want a survivor", f.What, f.By)
		}
	}
	for _, w := range []string{"outbox leader", "role " + coordinatorRole, "partitions"} {
		if !whats[w] {
			t.Errorf("failover %q not measured (got %+v)", w, res.Failovers)
		}
	}
}

// TestDemo_Terminal runs the demo as on a terminal, with another seed:
// the progress line is redrawn in place, and the run still passes.
func TestDemo_Terminal(t *testing.T) {
	if testing.Short() {
		t.Skip("a second full demo run; skipped with -short")
	}
	t.Setenv(cli.EnvColumns, "")
	var out strings.Builder
	res, err := Run(context.Background(), Config{Seed: 7, Out: &out, Terminal: cli.Terminal{Redraw: true, Color: true}})
	if err != nil {
		t.Fatal(err)
	}
	checkDemoResult(t, res)
	text := out.String()
	if !strings.Contains(text, "seed      7") || !strings.Contains(text, "\nPASS in ") {
		t.Errorf("the output lacks the seed or the PASS line:\n%s", text)
	}
	if !strings.Contains(text, "\r\x1b[K\x1b[2mdelivered ") {
		t.Errorf("no progress line redrawn in place:\n%q", text)
	}
	// Each redrawn line leaves a column spare, so it never wraps and the
	// next carriage return erases all of it.
	for _, drawn := range strings.Split(text, "\x1b[2m")[1:] {
		line, _, _ := strings.Cut(drawn, "\x1b[0m")
		if w := cli.DisplayWidth(line); w > cli.DefaultColumns-1 {
			t.Errorf("a progress line of %d columns on an %d-column terminal: %q", w, cli.DefaultColumns, line)
		}
	}
}

// TestDemo_VerificationCatchesAGhost delivers, behind the demo's back, an
// entry of a transaction that rolled back: the verification must fail on
// it, as it would if the outbox had leaked it.
func TestDemo_VerificationCatchesAGhost(t *testing.T) {
	if testing.Short() {
		t.Skip("a full demo run; skipped with -short")
	}
	ghost := func(ctx context.Context, d *demo) error {
		var rec entryRecord
		profiles := d.ledger.profileList()
		for _, tx := range d.ledger.all() {
			if tx.Outcome == txRolledBack && len(tx.Entries) > 0 && slices.Contains(profiles, tx.Profile) {
				rec = tx.Entries[len(tx.Entries)-1]
				break
			}
		}
		if rec.ID.IsNil() {
			return errors.New("no rolled-back transaction")
		}
		procs, err := graph.StandardProcessors(graph.ProcessorOptions{DeliveryURL: d.engine.URL(), Client: d.engine.Client()})
		if err != nil {
			return err
		}
		payload, _ := json.Marshal(graph.MetadataPayload{EntityType: "profile", EntityID: rec.Profile, Label: "ghost"})
		out, err := procs[1].Deliver(ctx, []outbox.Entry{{ID: rec.ID, Lane: graph.LaneMetadata, Payload: payload}})
		if err != nil || len(out) != 1 || out[0].Kind != outbox.KindDelivered {
			return fmt.Errorf("delivering the ghost: %v %+v", err, out)
		}
		return nil
	}
	res, err := Run(context.Background(), Config{Seed: 3, beforeVerify: ghost})
	if err != nil {
		t.Fatal(err)
	}
	if res.Passed || res.RolledBackDelivered != 1 || res.Unexpected != 1 || res.InOrder || res.LabelMismatches != 1 {
		t.Errorf("passed %v, rolled-back delivered %d, unexpected %d, in order %v, label mismatches %d; want false, 1, 1, false, 1",
			res.Passed, res.RolledBackDelivered, res.Unexpected, res.InOrder, res.LabelMismatches)
	}
	failed := map[string]bool{}
	for _, c := range res.Checks {
		if !c.OK {
			failed[c.Name] = true
		}
	}
	for _, name := range []string{"rolled-back delivered", "delivered in (xid, id) order", "final labels"} {
		if !failed[name] {
			t.Errorf("check %q passed; it should catch the ghost (%+v)", name, res.Checks)
		}
	}
	if failed["lost"] || failed["failover within bounds"] {
		t.Errorf("unrelated checks failed: %+v", res.Checks)
	}
}

// TestDemo_Postgres runs the scenario on PostgreSQL, with advisory locks
// and then with Redis locks; each run creates its own schema and drops it.
func TestDemo_Postgres(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole scenario against PostgreSQL; skipped with -short")
	}
	url := testenv.PostgresURL(t)
	for _, withRedis := range []bool{false, true} {
		name := "advisory locks"
		cfg := Config{Postgres: url, Seed: 1}
		if withRedis {
			name = "redis locks"
			cfg.Redis = testenv.RedisAddr(t)
		}
		t.Run(name, func(t *testing.T) {
			var out strings.Builder
			cfg.Out = &out
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkDemoResult(t, res)
			if !strings.HasPrefix(res.Schema, "baton_demo_") {
				t.Fatalf("schema %q", res.Schema)
			}
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var exists bool
			if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", res.Schema).Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if exists {
				t.Errorf("schema %s still exists after the demo", res.Schema)
				_, _ = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{res.Schema}.Sanitize()+" CASCADE")
			}
			if !strings.Contains(out.String(), "dropped schema "+res.Schema) {
				t.Errorf("the narrative does not say the schema was dropped:\n%s", out.String())
			}
		})
	}
}

// testCoordination keeps the instances' leases and locks in stores of its
// own, and counts what the demo does with them.
type testCoordination struct {
	leases *memory.LeaseStore
	locks  *lockmem.Provider

	mu         sync.Mutex
	heartbeats map[string]int // by instance
	crashed    []string
	closed     []string
	teardowns  int
}

func newTestCoordination(t *testing.T) *testCoordination {
	t.Helper()
	leases, err := memory.NewLeaseStore(memory.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	locks, err := lockmem.NewProvider(lockmem.Options{TTL: 2 * time.Second, SafetyMargin: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &testCoordination{leases: leases, locks: locks, heartbeats: map[string]int{}}
}

func (c *testCoordination) Name() string     { return "test" }
func (c *testCoordination) Describe() string { return "the test's own stores" }
func (c *testCoordination) Timings(t Timings) Timings {
	t.LeaseDuration, t.LockTTL = 3*time.Second, 2*time.Second
	return t
}
func (c *testCoordination) LockTiming(t Timings) (string, string) {
	return "test lock TTL " + t.LockTTL.String(), "7s"
}
func (c *testCoordination) KillStory() string { return "the test's sessions end" }
func (c *testCoordination) RoleFailover(t Timings) (time.Duration, string) {
	return t.LeaseDuration + t.RenewInterval, "test lease"
}
func (c *testCoordination) LockFailover(t Timings) (time.Duration, string) {
	return t.LockTTL, "test lock"
}
func (c *testCoordination) Teardown(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.teardowns++
	return nil
}

func (c *testCoordination) Instance(_ context.Context, name string, t Timings) (*CoordinatedInstance, error) {
	if t.LeaseDuration != 3*time.Second {
		return nil, fmt.Errorf("the instance got lease %v, not the coordination's timings", t.LeaseDuration)
	}
	record := func(list *[]string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		*list = append(*list, name)
	}
	return &CoordinatedInstance{
		Leases: countingLeases{Store: c.leases, c: c, name: name},
		Locks:  c.locks,
		// The locks live in this process: a crashed holder's lapses as
		// the memory backend's does.
		LockLapse: t.LockTTL,
		Crash:     func(context.Context) error { record(&c.crashed); return nil },
		Close:     func() { record(&c.closed) },
	}, nil
}

type countingLeases struct {
	lease.Store
	c    *testCoordination
	name string
}

func (s countingLeases) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	s.c.mu.Lock()
	s.c.heartbeats[s.name]++
	s.c.mu.Unlock()
	return s.Store.Heartbeat(ctx, req)
}

// TestDemo_Coordination runs the demo with its leases and locks on a
// Coordination: every instance heartbeats through it, the backend's own
// lease store is never used, the kill crashes the coordination's sessions
// of the victim alone, and everything is closed and torn down at the end.
func TestDemo_Coordination(t *testing.T) {
	if testing.Short() {
		t.Skip("a full demo run; skipped with -short")
	}
	c := newTestCoordination(t)
	var backendLeases []lease.Record
	peek := func(ctx context.Context, d *demo) error {
		var err error
		backendLeases, err = d.backend.(*memoryBackend).leases.Read(ctx, []string{coordinatorRole})
		return err
	}
	var out strings.Builder
	res, err := Run(context.Background(), Config{Seed: 1, Out: &out, Coordination: c, beforeVerify: peek})
	if err != nil {
		t.Fatal(err)
	}
	checkDemoResult(t, res)
	if res.Backend != "memory+test" {
		t.Errorf("backend %q, want memory+test", res.Backend)
	}
	text := out.String()
	for _, want := range []string{"role leases, partitions and locks on the test's own stores", "lease 3s", "test lock TTL 2s", "the test's sessions end", "test lease + 1s allowance"} {
		if !strings.Contains(text, want) {
			t.Errorf("the narrative lacks %q:\n%s", want, text)
		}
	}
	if len(backendLeases) != 0 {
		t.Errorf("the backend's own lease store holds %+v; the leases belong to the coordination", backendLeases)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range instanceCount {
		if name := fmt.Sprintf("instance-%d", i+1); c.heartbeats[name] == 0 {
			t.Errorf("%s never heartbeat through the coordination (%v)", name, c.heartbeats)
		}
	}
	if !slices.Equal(c.crashed, []string{"instance-1"}) {
		t.Errorf("crashed %v, want the killed leader, instance-1, alone", c.crashed)
	}
	slices.Sort(c.closed)
	if !slices.Equal(c.closed, []string{"instance-1", "instance-2", "instance-3"}) || c.teardowns != 1 {
		t.Errorf("closed %v, %d teardowns; want every instance closed once and one teardown", c.closed, c.teardowns)
	}
}
