package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/outboxtest"
)

// scanAll reads every entry still in the outbox (retention is off in the
// demo, so that is every committed one) with its xid.
func scanAll(ctx context.Context, s outbox.Store) (map[outbox.ID]outbox.Entry, error) {
	const page = 1000
	out := map[outbox.ID]outbox.Entry{}
	var cur outbox.Cursor
	for {
		batch, err := s.Scan(ctx, cur, page)
		if err != nil {
			return nil, fmt.Errorf("read the outbox back: %w", err)
		}
		for _, e := range batch {
			out[e.ID] = e
		}
		if len(batch) < page {
			return out, nil
		}
		cur = batch[len(batch)-1].Cursor()
	}
}

// listAllDead reads every dead letter.
func listAllDead(ctx context.Context, s outbox.Store) ([]outbox.DeadLetter, error) {
	var out []outbox.DeadLetter
	opts := outbox.ListOptions{Limit: outbox.MaxListLimit}
	for {
		page, err := s.ListDead(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list dead letters: %w", err)
		}
		out = append(out, page...)
		if len(page) < opts.Limit {
			return out, nil
		}
		opts.Before = page[len(page)-1].ID
	}
}

// facts is what the verification reads once, after the scenario: the
// engine's deliveries and requests, the store's entries and dead letters,
// and the producers' ledger, joined.
type facts struct {
	stored     map[outbox.ID]outbox.Entry
	dead       []outbox.DeadLetter
	deliveries []graphtest.Delivery
	requests   []graphtest.Request
	health     outbox.Health

	// committed are the committed entries, with the xid their transaction
	// recorded; rolledBack the ids of the rolled-back ones.
	committed  []expectedEntry
	rolledBack map[outbox.ID]bool
	// expected are what the engine must have received, in order: the
	// committed entries, each parked one replaced by its requeued copy (a
	// new entry, with the requeue's xid), sorted by (xid, id).
	expected []expectedEntry
	// byID finds an expected or committed entry's record.
	byID map[outbox.ID]entryRecord
	// xidMismatch counts entries stored under another xid than the one
	// their transaction recorded.
	xidMismatch int
}

// expectedEntry is one entry and where it stands in the walk's order.
type expectedEntry struct {
	cur   outbox.Cursor
	entry entryRecord
}

// verify computes the result: it reads the facts, then runs each check,
// which fills in its fields of the result and returns its summary line.
func (d *demo) verify(ctx context.Context) error {
	if err := d.resolveInDoubt(ctx); err != nil {
		return err
	}
	f, err := d.readFacts(ctx)
	if err != nil {
		return err
	}
	r := d.res
	r.Checks = append(r.Checks,
		d.checkOneHolder(),
		d.checkOrder(f),
		d.checkLost(f),
		d.checkRolledBack(f),
		d.checkInitBeforeMetadata(f),
		d.checkFinalLabels(f),
		d.checkStuckNotice(f),
		d.checkParkedRequeued(f),
		d.checkPermissions(),
		d.checkFailover(),
	)
	if f.xidMismatch > 0 {
		r.Checks = append(r.Checks, Check{Name: "xids", Detail: fmt.Sprintf("%d entries stored under another xid than their transaction's", f.xidMismatch)})
	}
	r.Passed = true
	for _, c := range r.Checks {
		r.Passed = r.Passed && c.OK
	}
	return nil
}

// readFacts reads the store and the engine and joins them with the ledger.
func (d *demo) readFacts(ctx context.Context) (*facts, error) {
	store := d.backend.Outbox()
	stored, err := scanAll(ctx, store)
	if err != nil {
		return nil, err
	}
	dead, err := listAllDead(ctx, store)
	if err != nil {
		return nil, err
	}
	health, err := outbox.ReadHealth(ctx, store)
	if err != nil {
		return nil, err
	}
	f := &facts{
		stored: stored, dead: dead, deliveries: d.engine.Deliveries(), requests: d.engine.Requests(), health: health,
		rolledBack: map[outbox.ID]bool{}, byID: map[outbox.ID]entryRecord{},
	}
	r := d.res
	for _, tx := range d.ledger.all() {
		switch tx.Outcome {
		case txCommitted:
			r.Transactions.Committed++
			for _, e := range tx.Entries {
				f.committed = append(f.committed, expectedEntry{outbox.Cursor{XID: tx.XID, ID: e.ID}, e})
				f.byID[e.ID] = e
				if s, ok := stored[e.ID]; ok && s.XID != tx.XID {
					f.xidMismatch++
				}
			}
		case txRolledBack:
			r.Transactions.RolledBack++
			for _, e := range tx.Entries {
				f.rolledBack[e.ID] = true
			}
		}
	}
	r.CommittedEntries, r.RolledBackEntries = len(f.committed), len(f.rolledBack)

	deadByID := map[outbox.ID]outbox.DeadLetter{}
	for _, dl := range dead {
		deadByID[dl.ID] = dl
	}
	for _, it := range f.committed {
		dl, parked := deadByID[it.entry.ID]
		if !parked {
			f.expected = append(f.expected, it)
			continue
		}
		if dl.RequeuedAs.IsNil() {
			continue // waiting for an operator: counted as lost
		}
		copyEntry, ok := stored[dl.RequeuedAs]
		if !ok {
			continue
		}
		e := it.entry
		e.ID = dl.RequeuedAs
		f.byID[e.ID] = e
		f.expected = append(f.expected, expectedEntry{copyEntry.Cursor(), e})
	}
	slices.SortFunc(f.expected, func(a, b expectedEntry) int { return a.cur.Compare(b.cur) })
	return f, nil
}

// delivered reports, by id, whether the engine applied an entry.
func (f *facts) delivered() map[outbox.ID]bool {
	out := make(map[outbox.ID]bool, len(f.deliveries))
	for _, dl := range f.deliveries {
		out[dl.EntryID] = true
	}
	return out
}

// unreplayed counts the dead letters nobody requeued.
func (f *facts) unreplayed() int {
	n := 0
	for _, dl := range f.dead {
		if dl.RequeuedAs.IsNil() {
			n++
		}
	}
	return n
}

func (d *demo) checkOneHolder() Check {
	holders := "exactly one live holder of " + coordinatorRole + " and of each partition, before and after the failover"
	if d.oneHolderBefore != "" || d.oneHolderAfter != "" {
		holders = strings.Trim(d.oneHolderBefore+"; "+d.oneHolderAfter, "; ")
	}
	return Check{Name: "one holder", OK: d.oneHolderBefore == "" && d.oneHolderAfter == "", Detail: holders}
}

// checkOrder: what the engine applied (its first effect per idempotency
// key, in arrival order) is exactly the expected entries in (xid, id)
// order: the committed-order check of the end-to-end outbox tests.
func (d *demo) checkOrder(f *facts) Check {
	r := d.res
	expected := make([]outboxtest.Committed, len(f.expected))
	for i, it := range f.expected {
		expected[i] = outboxtest.Committed{XID: it.cur.XID, ID: it.cur.ID}
	}
	delivered := make([]outbox.ID, len(f.deliveries))
	r.DeliveredByLane = map[string]int{}
	for i, dl := range f.deliveries {
		delivered[i] = dl.EntryID
		r.DeliveredByLane[dl.Lane]++
	}
	order := outboxtest.CheckOrder(expected, delivered)
	r.Delivered = len(delivered)
	r.OrderViolations, r.Unexpected = order.OutOfOrder, order.Unexpected
	// A parked entry nobody requeued is lost too, so not in order.
	r.InOrder = order.Exact && f.unreplayed() == 0
	lanes := make([]string, 0, len(r.DeliveredByLane))
	for _, l := range sortedKeys(r.DeliveredByLane) {
		lanes = append(lanes, fmt.Sprintf("%s %d", l, r.DeliveredByLane[l]))
	}
	return Check{Name: "delivered in (xid, id) order", OK: r.InOrder && f.xidMismatch == 0,
		Detail: fmt.Sprintf("%d entries, exactly the committed ones sorted by (xid, id) (%s); %d out of order, %d unexpected",
			r.Delivered, strings.Join(lanes, ", "), r.OrderViolations, r.Unexpected)}
}

// checkLost: every expected entry was delivered, and no parked entry waits
// for an operator.
func (d *demo) checkLost(f *facts) Check {
	r := d.res
	got := f.delivered()
	r.Lost = f.unreplayed()
	for _, it := range f.expected {
		if !got[it.entry.ID] {
			r.Lost++
		}
	}
	return Check{Name: "lost", OK: r.Lost == 0, Detail: fmt.Sprintf("%d of %d committed entries", r.Lost, r.CommittedEntries)}
}

// checkRolledBack: no request carried the idempotency key of a rolled-back
// entry. It also counts the repeated requests, which at-least-once
// delivery allows.
func (d *demo) checkRolledBack(f *facts) Check {
	r := d.res
	for _, req := range f.requests {
		if req.Duplicate {
			r.Duplicates++
		}
		if id, err := outbox.ParseID(req.IdempotencyKey); err == nil && f.rolledBack[id] {
			r.RolledBackDelivered++
		}
	}
	return Check{Name: "rolled-back delivered", OK: r.RolledBackDelivered == 0,
		Detail: fmt.Sprintf("%d requests for the %d entries of %d rolled-back transactions",
			r.RolledBackDelivered, r.RolledBackEntries, r.Transactions.RolledBack)}
}

// checkInitBeforeMetadata: per profile, graph.init reached the engine
// before any graph.metadata.
func (d *demo) checkInitBeforeMetadata(f *facts) Check {
	r := d.res
	firstInit := map[string]int{}
	profiles := map[string]bool{}
	for _, it := range f.expected {
		switch it.entry.Lane {
		case graph.LaneInit:
			firstInit[it.entry.Profile] = -1
		case graph.LaneMetadata:
			profiles[it.entry.Profile] = true
		}
	}
	early := map[string]bool{}
	for i, dl := range f.deliveries {
		e, ok := f.byID[dl.EntryID]
		if !ok {
			continue
		}
		switch dl.Lane {
		case graph.LaneInit:
			firstInit[e.Profile] = i
		case graph.LaneMetadata:
			if at, created := firstInit[e.Profile]; !created || at < 0 {
				early[e.Profile] = true
			}
		}
	}
	r.InitAfterMetadata, r.Profiles = len(early), len(profiles)
	return Check{Name: "graph.init before metadata", OK: r.InitAfterMetadata == 0,
		Detail: fmt.Sprintf("%d of %d profiles had a label delivered before their creation", r.InitAfterMetadata, r.Profiles)}
}

// checkFinalLabels: the label the engine ends with is the one of the
// profile's last entry in the order.
func (d *demo) checkFinalLabels(f *facts) Check {
	r := d.res
	lastLabel := map[string]string{}
	for _, it := range f.expected {
		if it.entry.Lane == graph.LaneMetadata {
			lastLabel[it.entry.Profile] = it.entry.Label
		}
	}
	for profile, want := range lastLabel {
		if got, _ := d.engine.Label("profile", profile); got != want {
			r.LabelMismatches++
		}
	}
	return Check{Name: "final labels", OK: r.LabelMismatches == 0,
		Detail: fmt.Sprintf("%d of %d profiles show the label of their last committed change", len(lastLabel)-r.LabelMismatches, len(lastLabel))}
}

// checkStuckNotice: the 503 burst raised exactly one stuck notice, and the
// recovery cleared first_stuck_at.
func (d *demo) checkStuckNotice(f *facts) Check {
	r := d.res
	r.StuckNotices = len(d.receiver.of(outbox.NoticeStuck))
	return Check{Name: "one stuck notice", OK: r.StuckNotices == 1 && f.health.FirstStuckAt == nil,
		Detail: fmt.Sprintf("%d during the 503 burst; first_stuck_at cleared after recovery: %v", r.StuckNotices, f.health.FirstStuckAt == nil)}
}

// checkParkedRequeued: the 409 parked one entry, the operator requeued it,
// and the copy was delivered.
func (d *demo) checkParkedRequeued(f *facts) Check {
	r := d.res
	r.DeadLetterNotices = len(d.receiver.of(outbox.NoticeDeadLetter))
	committed := map[outbox.ID]bool{}
	for _, it := range f.committed {
		committed[it.entry.ID] = true
	}
	got := f.delivered()
	for _, dl := range f.dead {
		if committed[dl.ID] {
			r.Parked++
			if !dl.RequeuedAs.IsNil() {
				r.Requeued++
			}
		}
		if !dl.RequeuedAs.IsNil() && got[dl.RequeuedAs] {
			r.RequeuedDelivered++
		}
	}
	return Check{Name: "parked, requeued, delivered", OK: r.Parked == 1 && r.Requeued == 1 && r.RequeuedDelivered == 1,
		Detail: fmt.Sprintf("%d → %d → %d (dead-letter notices: %d)", r.Parked, r.Requeued, r.RequeuedDelivered, r.DeadLetterNotices)}
}

// checkPermissions: every local permission check of step 6 answered what
// the engine's grants say.
func (d *demo) checkPermissions() Check {
	r := d.res
	return Check{Name: "permission checks", OK: r.PermissionChecks > 0 && r.PermissionFailures == 0,
		Detail: fmt.Sprintf("%d of %d answered as the engine's grants say, via LocalReader", r.PermissionChecks-r.PermissionFailures, r.PermissionChecks)}
}

// checkFailover: every takeover of step 3 came within its bound.
func (d *demo) checkFailover() Check {
	r := d.res
	var maxFailover time.Duration
	ok := len(r.Failovers) > 0
	var parts []string
	for _, f := range r.Failovers {
		maxFailover = max(maxFailover, f.Took)
		ok = ok && f.Took <= f.Bound
		parts = append(parts, fmt.Sprintf("%s %s ≤ %s", f.What, cli.FormatDuration(f.Took), cli.FormatDuration(f.Bound)))
	}
	r.MaxFailover = cli.FormatDuration(maxFailover)
	return Check{Name: "failover within bounds", OK: ok, Detail: fmt.Sprintf("max %s (%s)", r.MaxFailover, strings.Join(parts, "; "))}
}
