package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/outboxtest"
)

// ---- step 1 ----

func (d *demo) stepHolders(ctx context.Context) error {
	d.ui.logf("1. one holder; partitions spread over the instances")
	first := d.insts[0]
	if err := first.start(ctx); err != nil {
		return err
	}
	if err := waitFor(ctx, d.t.Deadline, "instance-1 to hold the coordinator role and the outbox leader lock", func() bool {
		return first.coord.IsHeld() && d.board.holderOf(d.backend.LeaderLockName()) == first.name
	}); err != nil {
		return err
	}
	d.ui.logf("   %s started: holds role %s (token %d) and the outbox leader lock",
		first.name, coordinatorRole, first.coord.Token())
	for _, in := range d.insts[1:] {
		if err := in.start(ctx); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, d.t.Deadline, "every instance to hold its share of the partitions", func() bool {
		for i := range partitionCount {
			if !d.insts[i%instanceCount].part.Lease(i).IsHeld() {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	d.placed.Store(true)
	if err := d.waitRouting(ctx); err != nil {
		return err
	}
	d.ui.logf("   instance-2, instance-3 started and stand by for the role and the outbox")
	d.ui.logf("   partitions %s:0-%d: %s", partitionName, partitionCount-1, d.partitionSpread())
	d.ui.logf("   (each instance claimed its own share first; baton itself does not balance partitions)")
	d.oneHolderBefore = d.holderCheck()
	d.proxyProbe(ctx, "   ")
	return nil
}

// waitRouting waits until every live instance's holder snapshot names, for
// every partition, the live instance that holds it: the snapshots are
// refreshed at heartbeat cadence, so they lag a change by up to one renew
// interval.
func (d *demo) waitRouting(ctx context.Context) error {
	return waitFor(ctx, d.t.Deadline, "every instance to know every partition's holder", func() bool {
		alive := d.alive()
		for i := range partitionCount {
			holder := ""
			for _, in := range alive {
				if in.part.Lease(i).IsHeld() {
					holder = in.addr
				}
			}
			if holder == "" {
				return false
			}
			for _, in := range alive {
				if in.part.Lease(i).CurrentHolderAddress() != holder {
					return false
				}
			}
		}
		return true
	})
}

// partitionSpread lists which live instance holds which partitions.
func (d *demo) partitionSpread() string {
	var parts []string
	for _, in := range d.alive() {
		var held []string
		for i := range partitionCount {
			if in.part.Lease(i).IsHeld() {
				held = append(held, fmt.Sprint(i))
			}
		}
		parts = append(parts, fmt.Sprintf("%s ×%d [%s]", in.name, len(held), strings.Join(held, " ")))
	}
	return strings.Join(parts, " · ")
}

// holderCheck returns "" when exactly one live instance holds the
// coordinator role and each partition, or what is wrong.
func (d *demo) holderCheck() string {
	var problems []string
	count := func(held func(*instance) bool) int {
		n := 0
		for _, in := range d.alive() {
			if held(in) {
				n++
			}
		}
		return n
	}
	if n := count(func(in *instance) bool { return in.coord.IsHeld() }); n != 1 {
		problems = append(problems, fmt.Sprintf("%s held by %d instances", coordinatorRole, n))
	}
	for i := range partitionCount {
		if n := count(func(in *instance) bool { return in.part.Lease(i).IsHeld() }); n != 1 {
			problems = append(problems, fmt.Sprintf("partition %d held by %d instances", i, n))
		}
	}
	return strings.Join(problems, "; ")
}

// proxyProbe sends profile requests to one instance and counts which were
// served there and which the holder proxy forwarded to their partition's
// holder.
func (d *demo) proxyProbe(ctx context.Context, indent string) {
	alive := d.alive()
	if len(alive) == 0 {
		return
	}
	// Ask the instance holding the fewest partitions, so that forwarding
	// shows.
	entry, fewest := alive[len(alive)-1], partitionCount+1
	for _, in := range alive {
		n := 0
		for i := range partitionCount {
			if in.part.Lease(i).IsHeld() {
				n++
			}
		}
		if n < fewest {
			entry, fewest = in, n
		}
	}
	local, forwarded, unavailable := 0, 0, 0
	for i := range 8 {
		id := fmt.Sprintf("p-%02d", i)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, entry.srv.URL+"/profiles/"+id, nil)
		if err != nil {
			return
		}
		resp, err := d.client.Do(req)
		if err != nil {
			unavailable++
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch by := resp.Header.Get(instanceHeader); {
		case resp.StatusCode != http.StatusOK:
			unavailable++
		case by == entry.name:
			local++
		default:
			forwarded++
		}
	}
	msg := fmt.Sprintf("%sholder proxy: 8 requests for /profiles/{id} sent to %s: %d served there, %d forwarded one hop to their partition's holder",
		indent, entry.name, local, forwarded)
	if unavailable > 0 {
		msg += fmt.Sprintf(", %d answered 503 (holder unknown for now)", unavailable)
	}
	d.ui.logf("%s", msg)
}

// ---- traffic ----

// traffic runs one producer per instance until each has made its
// transactions, seeded per step and instance.
func (d *demo) traffic(insts []*instance, step, creates, updates int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, in := range insts {
		rnd := rand.New(rand.NewPCG(d.opts.Seed, uint64(step*16+in.idx)))
		wg.Go(func() { in.produce(in.ctx, rnd, creates, updates, d.scale.Spacing) })
	}
	return &wg
}

// expectedIDs are the entries that must have been delivered by now: the
// committed ones, minus those parked, plus their requeued copies.
func (d *demo) expectedIDs() []outbox.ID {
	var ids []outbox.ID
	for _, tx := range d.ledger.all() {
		if tx.Outcome != txCommitted {
			continue
		}
		for _, e := range tx.Entries {
			if !d.parkedIDs[e.ID] {
				ids = append(ids, e.ID)
			}
		}
	}
	for id := range d.requeuedIDs {
		ids = append(ids, id)
	}
	return ids
}

// drain waits until the engine received every expected entry. It does not
// fail: what is missing after the deadline shows in the verification.
func (d *demo) drain(ctx context.Context, timeout time.Duration) error {
	if err := d.resolveInDoubt(ctx); err != nil {
		return err
	}
	want := d.expectedIDs()
	missing := len(want)
	err := waitFor(ctx, timeout, "delivery", func() bool {
		got := map[outbox.ID]bool{}
		for _, dl := range d.engine.Deliveries() {
			got[dl.EntryID] = true
		}
		missing = 0
		for _, id := range want {
			if !got[id] {
				missing++
			}
		}
		return missing == 0
	})
	if err != nil && ctx.Err() == nil {
		d.ui.logf("   still %d entries undelivered after %s; the verification will say which", missing, cli.FormatDuration(timeout))
		return nil
	}
	return err
}

// resolveInDoubt decides the transactions whose commit was cut off by the
// kill: committed if their entries are in the store (in the outbox or
// parked), rolled back otherwise.
func (d *demo) resolveInDoubt(ctx context.Context) error {
	var doubt []*txRecord
	for _, tx := range d.ledger.all() {
		if tx.Outcome == txInDoubt {
			doubt = append(doubt, tx)
		}
	}
	if len(doubt) == 0 {
		return nil
	}
	entries, err := scanAll(ctx, d.backend.Outbox())
	if err != nil {
		return err
	}
	dead, err := listAllDead(ctx, d.backend.Outbox())
	if err != nil {
		return err
	}
	present := map[outbox.ID]bool{}
	for id := range entries {
		present[id] = true
	}
	for _, dl := range dead {
		present[dl.ID] = true
	}
	d.ledger.mu.Lock()
	defer d.ledger.mu.Unlock()
	for _, tx := range doubt {
		d.res.Transactions.InDoubt++
		if len(tx.Entries) > 0 && present[tx.Entries[0].ID] {
			tx.Outcome = txCommitted
		} else {
			tx.Outcome = txRolledBack
		}
	}
	return nil
}

// ---- step 2 ----

func (d *demo) stepTraffic(ctx context.Context) error {
	d.ui.logf("2. producers: a profile change and its outbox entries in one transaction, some rolled back")
	base := len(d.engine.Deliveries())
	d.traffic(d.insts, 2, d.scale.Creates, d.scale.Updates).Wait()
	if err := d.drain(ctx, d.t.Deadline); err != nil {
		return err
	}
	committed, rolledBack, _ := d.ledger.counts()
	lanes := map[string]int{}
	delivered := d.engine.Deliveries()[base:]
	for _, dl := range delivered {
		lanes[dl.Lane]++
	}
	order := "in (xid, id) order"
	if n := d.inversions(delivered); n > 0 {
		order = fmt.Sprintf("NOT in (xid, id) order (%d inversions)", n)
	}
	d.ui.logf("   %d transactions committed, %d rolled back; %d entries delivered one at a time, %s:",
		committed, rolledBack, len(delivered), order)
	d.ui.logf("   %s %d (a profile created), %s %d (a label set); nothing of the rolled-back ones",
		graph.LaneInit, lanes[graph.LaneInit], graph.LaneMetadata, lanes[graph.LaneMetadata])
	return nil
}

// inversions counts the deliveries that came after one with a larger
// (xid, id), by the xids the producers recorded.
func (d *demo) inversions(delivered []graphtest.Delivery) int {
	var written []outboxtest.Committed
	for _, tx := range d.ledger.all() {
		for _, e := range tx.Entries {
			written = append(written, outboxtest.Committed{XID: tx.XID, ID: e.ID})
		}
	}
	ids := make([]outbox.ID, len(delivered))
	for i, dl := range delivered {
		ids[i] = dl.EntryID
	}
	return outboxtest.CheckOrder(written, ids).OutOfOrder
}

// ---- step 3 ----

func (d *demo) stepKill(ctx context.Context) error {
	d.ui.logf("3. the leader is killed mid-run")
	base := len(d.engine.Deliveries())
	traffic := d.traffic(d.insts, 3, 1, d.scale.KillUpdates)
	if err := waitFor(ctx, d.t.Deadline, "deliveries before the kill", func() bool {
		return len(d.engine.Deliveries()) >= base+d.scale.KillAfter
	}); err != nil {
		traffic.Wait()
		return err
	}
	victim := d.insts[0]
	for _, in := range d.insts {
		if d.board.holderOf(d.backend.LeaderLockName()) == in.name {
			victim = in
		}
	}
	var held []string
	if victim.coord.IsHeld() {
		held = append(held, "role "+coordinatorRole)
	}
	held = append(held, "the outbox leader lock")
	parts := 0
	for i := range partitionCount {
		if victim.part.Lease(i).IsHeld() {
			parts++
		}
	}
	held = append(held, fmt.Sprintf("%d partitions", parts))
	wasCoordinator := victim.coord.IsHeld()

	killAt := time.Now()
	delivered := len(d.engine.Deliveries())
	if err := victim.kill(ctx); err != nil {
		d.logger.Warn("demo: crashing the instance's sessions failed", "err", err)
	}
	d.ui.logf("   killed %s at delivery %d, mid-traffic: it held %s", victim.name, delivered, strings.Join(held, ", "))
	d.ui.logf("   nothing is released: its leases expire by the store's clock; %s", d.killStory())

	lockBound, lockWhy, roleBound, roleWhy := d.failoverBounds()
	lockBound += d.t.Allowance
	roleBound += d.t.Allowance
	allow := " + " + d.t.Allowance.String() + " allowance"

	var coordAt, partsAt time.Time
	var coordBy string
	deadline := 2*max(lockBound, roleBound) + d.t.Deadline
	err := waitFor(ctx, deadline, "the survivors to take over", func() bool {
		now := time.Now()
		if coordAt.IsZero() {
			for _, in := range d.alive() {
				if in.coord.IsHeld() {
					coordAt, coordBy = now, in.name
				}
			}
		}
		if partsAt.IsZero() {
			all := true
			for i := range partitionCount {
				held := false
				for _, in := range d.alive() {
					held = held || in.part.Lease(i).IsHeld()
				}
				all = all && held
			}
			if all {
				partsAt = now
			}
		}
		_, leader := d.board.firstAfter(d.backend.LeaderLockName(), killAt, victim.name)
		return leader && !coordAt.IsZero() && !partsAt.IsZero()
	})
	traffic.Wait()
	if err != nil {
		return err
	}
	ev, _ := d.board.firstAfter(d.backend.LeaderLockName(), killAt, victim.name)
	resumed := time.Duration(0)
	for _, dl := range d.engine.Deliveries() {
		if dl.At.After(ev.At) {
			resumed = dl.At.Sub(killAt)
			break
		}
	}
	fo := Failover{What: "outbox leader", By: ev.Instance, Took: ev.At.Sub(killAt), Bound: lockBound, Why: lockWhy + allow}
	d.addFailover(fo)
	msg := fmt.Sprintf("   outbox leader         %s took the lock after %s (bound %s: %s)",
		fo.By, cli.FormatDuration(fo.Took), cli.FormatDuration(fo.Bound), fo.Why)
	if resumed > 0 {
		msg += fmt.Sprintf("; delivery resumed after %s", cli.FormatDuration(resumed))
	}
	d.ui.logf("%s", msg)
	if wasCoordinator {
		fo := Failover{What: "role " + coordinatorRole, By: coordBy, Took: coordAt.Sub(killAt), Bound: roleBound, Why: roleWhy + allow}
		d.addFailover(fo)
		d.ui.logf("   %-21s %s holds it after %s (bound %s: %s)", coordinatorRole, fo.By, cli.FormatDuration(fo.Took), cli.FormatDuration(fo.Bound), fo.Why)
	}
	fo = Failover{What: "partitions", By: "survivors", Took: partsAt.Sub(killAt), Bound: roleBound, Why: roleWhy + allow}
	d.addFailover(fo)
	d.ui.logf("   %-21s all %d held again after %s: %s", "partitions", partitionCount, cli.FormatDuration(fo.Took), d.partitionSpread())

	if err := d.drain(ctx, d.t.Deadline); err != nil {
		return err
	}
	d.oneHolderAfter = d.holderCheck()
	committed, rolledBack, _ := d.ledger.counts()
	doubt := ""
	if n := d.res.Transactions.InDoubt; n > 0 {
		doubt = fmt.Sprintf(" (%d cut off by the kill during their commit, settled by reading the store)", n)
	}
	d.ui.logf("   traffic done: %d transactions committed, %d rolled back so far%s", committed, rolledBack, doubt)
	if err := d.waitRouting(ctx); err != nil {
		return err
	}
	d.proxyProbe(ctx, "   after the failover, ")
	return nil
}

func (d *demo) addFailover(f Failover) {
	f.TookMS, f.BoundMS = f.Took.Milliseconds(), f.Bound.Milliseconds()
	d.res.Failovers = append(d.res.Failovers, f)
}

// ---- step 4 ----

func (d *demo) stepBurst(ctx context.Context) error {
	d.ui.logf("4. the engine answers 503 for a while")
	unavailable := func(*http.Request) (graphtest.Fault, bool) {
		return graphtest.Fault{Status: http.StatusServiceUnavailable, Body: `{"error":"overloaded"}`}, true
	}
	d.engine.FaultFunc(graphtest.PathInit, unavailable)
	d.engine.FaultFunc(graphtest.PathMetadata, unavailable)
	burstAt := time.Now()
	traffic := d.traffic(d.alive(), 4, 0, d.scale.BurstUpdates)
	err := waitFor(ctx, d.t.StuckAfter+d.t.Deadline, "the stuck notice", func() bool {
		return len(d.receiver.of(outbox.NoticeStuck)) > 0
	})
	traffic.Wait()
	if err != nil {
		d.engine.ClearFaults()
		return err
	}
	n := d.receiver.of(outbox.NoticeStuck)[0]
	d.ui.logf("   the walk stops at the first refused entry and retries every %s; every lane waits behind it",
		d.t.ErrorDelay.String())
	d.ui.logf("   stuck notice (webhook) %s after the burst began (StuckAfter %s): lane %s, entry %s",
		cli.FormatDuration(time.Since(burstAt)), d.t.StuckAfter.String(), n.Lane, n.EntryID)
	d.ui.logf("   last error: %s", cli.Cut(n.LastError, 100))
	d.engine.ClearFaults()
	recoverAt := time.Now()
	if err := d.drain(ctx, d.t.Deadline); err != nil {
		return err
	}
	took := time.Since(recoverAt)
	cleared := waitFor(ctx, d.t.Deadline, "first_stuck_at to clear", func() bool {
		h, err := outbox.ReadHealth(ctx, d.backend.Outbox())
		return err == nil && h.FirstStuckAt == nil
	}) == nil
	state := "first_stuck_at cleared"
	if !cleared {
		state = "first_stuck_at NOT cleared"
	}
	d.ui.logf("   the engine recovered: the backlog was delivered %s later, in order; %s", cli.FormatDuration(took), state)
	return nil
}

// ---- step 5 ----

func (d *demo) stepPark(ctx context.Context) error {
	d.ui.logf("5. a 409 parks an entry; an operator requeues it through the admin API")
	alive := d.alive()
	if len(alive) == 0 || len(d.ledger.profileList()) == 0 {
		return errors.New("no instance or profile left for step 5")
	}
	producer, admin := alive[0], alive[len(alive)-1]
	profile := d.ledger.profileList()[0]
	d.engine.Fail(graphtest.PathMetadata, http.StatusConflict)
	before := len(d.ledger.all())
	if err := producer.do(ctx, op{profile: profile, label: "Parked then requeued"}); err != nil {
		return fmt.Errorf("step 5 transaction: %w", err)
	}
	var parked outbox.ID
	if txs := d.ledger.all(); len(txs) > before && len(txs[before].Entries) > 0 {
		parked = txs[before].Entries[0].ID
	}
	var dead deadLetterJSON
	err := waitFor(ctx, d.t.Deadline, "the dead letter", func() bool {
		var list struct {
			DeadLetters []deadLetterJSON `json:"dead_letters"`
		}
		if d.adminCall(ctx, admin, http.MethodGet, "/dead", &list) != nil {
			return false
		}
		for _, dl := range list.DeadLetters {
			if dl.ID == parked && dl.RequeuedAs == nil {
				dead = dl
				return true
			}
		}
		return false
	})
	if err != nil {
		return err
	}
	d.parkedIDs[parked] = true
	d.ui.logf("   GET  %s/admin/outbox/dead -> %s (%s): %s", admin.name, dead.ID, dead.Lane, cli.Cut(dead.Error, 70))
	d.ui.logf("   the walk went on past it; a dead-letter notice went to the webhook")
	d.engine.ClearFaults()
	var requeued struct {
		ID         outbox.ID `json:"id"`
		RequeuedAs outbox.ID `json:"requeued_as"`
	}
	if err := d.adminCall(ctx, admin, http.MethodPost, "/dead/"+parked.String()+"/requeue", &requeued); err != nil {
		return err
	}
	d.requeuedIDs[requeued.RequeuedAs] = true
	at := time.Now()
	if err := waitFor(ctx, d.t.Deadline, "the requeued entry's delivery", func() bool {
		for _, dl := range d.engine.Deliveries() {
			if dl.EntryID == requeued.RequeuedAs {
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	d.ui.logf("   POST %s/admin/outbox/dead/{id}/requeue -> new entry %s, at the end of the order", admin.name, requeued.RequeuedAs)
	d.ui.logf("   (after the engine stopped refusing) delivered %s later", cli.FormatDuration(time.Since(at)))
	return nil
}

// deadLetterJSON is what the step reads of a dead letter the outbox admin
// API lists.
type deadLetterJSON struct {
	ID         outbox.ID  `json:"id"`
	Lane       string     `json:"lane"`
	Error      string     `json:"error"`
	RequeuedAs *outbox.ID `json:"requeued_as"`
}

// adminCall calls an instance's outbox admin API and decodes the answer.
func (d *demo) adminCall(ctx context.Context, in *instance, method, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, method, in.srv.URL+"/admin/outbox"+path, nil)
	if err != nil {
		return err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.NewDecoder(resp.Body).Decode(into)
}

// ---- step 6 ----

func (d *demo) stepProjections(ctx context.Context) error {
	d.ui.logf("6. projections: the coordinator refreshes them from the engine; every instance answers locally")
	profiles := d.ledger.profileList()
	if len(profiles) < 2 {
		return errors.New("step 6 needs two profiles")
	}
	p1, p2 := profiles[0], profiles[1]
	d.engine.SetDefinitions(graph.Definitions{EntityTypes: []graph.EntityType{{
		Name:        "profile",
		Relations:   []graph.RelationDefinition{{Name: "owner", SubjectTypes: []string{"user"}}},
		Permissions: []graph.Permission{{Name: "read", Bit: 0}, {Name: "write", Bit: 1}, {Name: "delete", Bit: 63}},
	}}})
	defsClient, err := graph.NewDefinitionsClient(graph.ClientOptions{BaseURL: d.engine.URL(), Client: d.engine.Client()})
	if err != nil {
		return err
	}
	defs, err := defsClient.Definitions(ctx)
	if err != nil {
		return err
	}
	bitsMap, err := defs.PermissionBits("profile")
	if err != nil {
		return err
	}
	bits := projection.Bits(bitsMap)
	mask := func(names ...string) uint64 {
		m, _ := defs.Mask("profile", names...)
		return m
	}
	d.engine.SetGrants("user", "alice", []graph.Grant{
		{ResourceType: "profile", ResourceID: p1, Mask: mask("read", "write", "delete")},
		{ResourceType: "profile", ResourceID: p2, Mask: mask("read")},
	})
	d.engine.SetGrants("user", "bob", []graph.Grant{{ResourceType: "profile", ResourceID: p1, Mask: mask("read")}})

	alice, bob := demoSubjects[0], demoSubjects[1]
	alive := d.alive()
	check := func(in *instance, s projection.Subject, resource, perm string, want bool) {
		d.res.PermissionChecks++
		got, err := in.local.HasPermission(ctx, s, "profile", resource, bits, perm)
		if err != nil || got != want {
			d.res.PermissionFailures++
			d.ui.logf("   FAIL %s: %s %s %s = %v, %v; want %v", in.name, s, perm, resource, got, err, want)
		}
	}
	// Before any refresh, a local read knows nothing, and says so.
	d.res.PermissionChecks++
	if _, err := alive[0].local.HasPermission(ctx, alice, "profile", p1, bits, "read"); errors.Is(err, projection.ErrNoProjection) {
		d.ui.logf("   before any refresh, LocalReader on %s answers ErrNoProjection (\"refresh it\"), never \"no access\"", alive[0].name)
	} else {
		d.res.PermissionFailures++
		d.ui.logf("   FAIL: before any refresh LocalReader answered %v, want ErrNoProjection", err)
	}

	refreshAt := time.Now()
	d.subjectsOn.Store(true)
	if err := waitFor(ctx, d.t.Deadline, "the projections", func() bool {
		for _, in := range alive {
			for _, s := range demoSubjects {
				if _, err := in.local.Snapshot(ctx, s); err != nil {
					return false
				}
			}
		}
		return true
	}); err != nil {
		return err
	}
	coordinator := "the coordinator"
	for _, in := range alive {
		if in.coord.IsHeld() {
			coordinator = in.name
		}
	}
	snap, err := alive[0].local.Snapshot(ctx, alice)
	if err != nil {
		return err
	}
	d.ui.logf("   %s (coordinator) refreshed alice and bob after %s: alice's generation %d has %d grants",
		coordinator, cli.FormatDuration(time.Since(refreshAt)), snap.Generation, len(snap.Grants))
	for _, in := range alive {
		check(in, alice, p1, "write", true)
		check(in, alice, p1, "delete", true) // bit 63
		check(in, alice, p2, "read", true)
		check(in, alice, p2, "write", false)
		check(in, bob, p1, "read", true)
		check(in, bob, p1, "write", false)
		check(in, bob, p2, "read", false) // no grant there: no access
	}
	d.ui.logf("   LocalReader on %d instances: alice may write %s and only read %s; bob may only read %s",
		len(alive), p1, p2, p1)

	// A revoke reaches every instance with the next refresh.
	d.engine.SetGrants("user", "bob", nil)
	revokeAt := time.Now()
	if err := waitFor(ctx, d.t.Deadline, "the revoke", func() bool {
		for _, in := range alive {
			ok, err := in.local.HasPermission(ctx, bob, "profile", p1, bits, "read")
			if err != nil || ok {
				return false
			}
		}
		return true
	}); err != nil {
		return err
	}
	for _, in := range alive {
		check(in, bob, p1, "read", false)
	}
	d.ui.logf("   bob's grant revoked in the engine: every instance answers \"no\" %s later (an empty generation: no access, no error)",
		cli.FormatDuration(time.Since(revokeAt)))
	return nil
}
