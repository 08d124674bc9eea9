package faults

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/internal/testenv"
)

const faultSchema = "faults"

// holderMain is the holder child on PostgreSQL: -target is the URL.
func holderMain(args []string) int { return HolderMain(args, openPostgresLeases) }

func openPostgresLeases(ctx context.Context, url string) (lease.Store, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	store, err := pgxstore.NewLeaseStore(pool, pgxstore.LeaseStoreOptions{Schema: faultSchema, Channel: "faults_leases"})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return store, pool.Close, nil
}

// newHolders prepares the schema on pg and returns holders for it.
func newHolders(t *testing.T, pg *testenv.PostgresServer) *Holders {
	migrateSchema(t, pg.URL(), faultSchema)
	return NewHolders(t, DefaultLeaseTimings, *negative)
}

// TestLeases_HoldersUnderProcessAndConnectionFaults: RunHolderFaults on
// PostgreSQL, each holder reaching the database through a fault proxy.
func TestLeases_HoldersUnderProcessAndConnectionFaults(t *testing.T) {
	scenario(t)
	pg := testenv.StartPostgresServer(t)
	migrateSchema(t, pg.URL(), faultSchema)
	RunHolderFaults(t, HolderTarget{Addr: pg.Addr(), Via: pg.URLVia, Timings: DefaultLeaseTimings, Negative: *negative, Seed: *seed})
}

// TestLeases_NobodyHoldsWhileTheDatabaseIsDown: two holders run while their
// database is stopped (-m immediate) and started again. Once LeaseDuration −
// HeldSafetyMargin has passed since the stop, nobody may believe it holds
// anything until the database is back.
func TestLeases_NobodyHoldsWhileTheDatabaseIsDown(t *testing.T) {
	scenario(t)
	pg := testenv.StartPostgresServer(t)
	h := newHolders(t, pg)
	a, b := h.Start("a", pg.URL()), h.Start("b", pg.URL())
	if h.AwaitHolder(leaderRole, 10*time.Second) == "" {
		t.Fatal("nobody holds the leader role")
	}
	time.Sleep(faultRenew)
	down := time.Now().UnixNano()
	pg.Stop(true)
	time.Sleep(3 * faultLease)
	up := time.Now().UnixNano()
	pg.Start()
	took, ok := h.TakenOver(leaderRole, "", up, 4*faultLease)
	if !ok {
		t.Fatal("nobody holds the leader role after the database came back")
	}
	h.Kill(a)
	h.Kill(b)

	lastHeld := h.LastHeldAfter(down)
	t.Logf("figure lease fail-closed after database stop %v (bound %v)", time.Duration(lastHeld-down).Round(time.Millisecond), faultLease-faultMargin)
	t.Logf("figure lease recovered after database start %v", time.Duration(took-up).Round(time.Millisecond))
	h.Check(NoneHeldWithin(down+int64(faultLease-faultMargin), up, "while the database was down"))
}

// migrateSchema creates baton's tables in schema.
func migrateSchema(t *testing.T, url, schema string) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pgxstore.Migrate(ctx, pool, pgxstore.MigrateOptions{Schema: schema}); err != nil {
		t.Fatal(err)
	}
}

// TestLeases_OneLostHeartbeatKeepsTheTerm: the holder's connection is
// blackholed for one RenewInterval, five times, so that each time exactly
// one heartbeat is lost. The timings leave room for that: the holder must
// keep believing it holds, with the same token, and nobody else may take
// the role. The negative control blackholes for four heartbeats instead,
// more than the timings promise to survive. The timings are those of the
// other scenarios doubled (4 s, 1 s, 500 ms), so that the heartbeat after
// the lost one, which must open a new connection through the proxy, has a
// whole second even on a loaded machine.
func TestLeases_OneLostHeartbeatKeepsTheTerm(t *testing.T) {
	scenario(t)
	pg := testenv.StartPostgresServer(t)
	h := newHolders(t, pg)
	proxies := map[string]*testenv.FaultProxy{}
	var children []*testenv.Child
	for _, name := range []string{"a", "b"} {
		proxies[name] = testenv.NewFaultProxy(t, pg.Addr())
		children = append(children, h.Start(name, pg.URLVia(proxies[name].Addr()), "-lease", "4s", "-renew", "1s", "-margin", "500ms"))
	}
	holder := h.AwaitHolder(leaderRole, 10*time.Second)
	if holder == "" {
		t.Fatal("nobody holds the leader role")
	}
	const renew = time.Second
	cut := renew
	if *negative {
		cut = 4 * renew
	}
	from := time.Now().UnixNano()
	for range 5 {
		proxies[holder].SetMode(testenv.Blackhole)
		time.Sleep(cut)
		proxies[holder].SetMode(testenv.Pass)
		time.Sleep(3 * renew)
	}
	to := time.Now().UnixNano()
	for _, c := range children {
		h.Kill(c)
	}
	h.Check(func(held map[string][]interval) violations {
		var v violations
		var kept []interval
		for _, iv := range held[leaderRole] {
			if iv.from < to && iv.to > from {
				kept = append(kept, iv)
			}
		}
		if len(kept) != 1 || kept[0].child != holder || kept[0].from > from || kept[0].to < to {
			v.add("role %s across five lost heartbeats of %s in [%s, %s]: held as %v; want one unbroken term of %s",
				leaderRole, holder, clock(from), clock(to), kept, holder)
		}
		return v
	})
}
