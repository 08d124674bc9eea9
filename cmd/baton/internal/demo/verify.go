package demo

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/baton-go/baton/cmd/baton/internal/cli"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
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

// verify computes the result from the engine's deliveries and requests,
// the store's entries and dead letters, and the producers' ledger.
func (d *demo) verify(ctx context.Context) error {
	if err := d.resolveInDoubt(ctx); err != nil {
		return err
	}
	r := d.res
	store := d.backend.Outbox()
	stored, err := scanAll(ctx, store)
	if err != nil {
		return err
	}
	dead, err := listAllDead(ctx, store)
	if err != nil {
		return err
	}
	deliveries := d.engine.Deliveries()
	requests := d.engine.Requests()

	// What the producers committed and rolled back.
	type item struct {
		cur   outbox.Cursor
		entry entryRecord
	}
	var committed []item
	rolledBack := map[outbox.ID]bool{}
	byID := map[outbox.ID]entryRecord{}
	xidMismatch := 0
	for _, tx := range d.ledger.all() {
		switch tx.Outcome {
		case txCommitted:
			r.Transactions.Committed++
			for _, e := range tx.Entries {
				committed = append(committed, item{outbox.Cursor{XID: tx.XID, ID: e.ID}, e})
				byID[e.ID] = e
				if s, ok := stored[e.ID]; ok && s.XID != tx.XID {
					xidMismatch++
				}
			}
		case txRolledBack:
			r.Transactions.RolledBack++
			for _, e := range tx.Entries {
				rolledBack[e.ID] = true
			}
		}
	}
	r.CommittedEntries, r.RolledBackEntries = len(committed), len(rolledBack)

	// Parked entries are replaced by their requeued copies, which are
	// new entries (their xid is the requeue's) with the same payload.
	deadByID := map[outbox.ID]outbox.DeadLetter{}
	for _, dl := range dead {
		deadByID[dl.ID] = dl
	}
	var expected []item
	for _, it := range committed {
		dl, parked := deadByID[it.entry.ID]
		if !parked {
			expected = append(expected, it)
			continue
		}
		r.Parked++
		if dl.RequeuedAs.IsNil() {
			continue // waiting for an operator: counted as lost below
		}
		r.Requeued++
		copyEntry, ok := stored[dl.RequeuedAs]
		if !ok {
			continue
		}
		e := it.entry
		e.ID = dl.RequeuedAs
		byID[e.ID] = e
		expected = append(expected, item{copyEntry.Cursor(), e})
	}
	slices.SortFunc(expected, func(a, b item) int { return a.cur.Compare(b.cur) })

	// What the engine applied: first effect per idempotency key, in arrival
	// order.
	cursorOf := map[outbox.ID]outbox.Cursor{}
	for _, it := range expected {
		cursorOf[it.entry.ID] = it.cur
	}
	r.DeliveredByLane = map[string]int{}
	deliveredIdx := map[outbox.ID]int{}
	var prev *outbox.Cursor
	for i, dl := range deliveries {
		deliveredIdx[dl.EntryID] = i
		r.DeliveredByLane[dl.Lane]++
		c, known := cursorOf[dl.EntryID]
		if !known {
			r.Unexpected++
			continue
		}
		if prev != nil && c.Compare(*prev) < 0 {
			r.OrderViolations++
		}
		prev = &c
	}
	r.Delivered = len(deliveries)
	for _, it := range expected {
		if _, ok := deliveredIdx[it.entry.ID]; !ok {
			r.Lost++
		}
	}
	for _, dl := range dead {
		if dl.RequeuedAs.IsNil() {
			r.Lost++ // parked and never replayed: not delivered
		} else if _, ok := deliveredIdx[dl.RequeuedAs]; ok {
			r.RequeuedDelivered++
		}
	}
	r.InOrder = len(expected) == len(deliveries) && r.OrderViolations == 0 && r.Unexpected == 0 && r.Lost == 0
	if r.InOrder {
		for i, it := range expected {
			if deliveries[i].EntryID != it.entry.ID {
				r.InOrder = false
				break
			}
		}
	}
	for _, req := range requests {
		if req.Duplicate {
			r.Duplicates++
		}
		if id, err := outbox.ParseID(req.IdempotencyKey); err == nil && rolledBack[id] {
			r.RolledBackDelivered++
		}
	}

	// Per profile: graph.init before any graph.metadata, and the label the
	// engine ends with is the one of the profile's last entry in the order.
	firstInit := map[string]int{}
	lastLabel := map[string]string{}
	for _, it := range expected {
		switch it.entry.Lane {
		case graph.LaneInit:
			firstInit[it.entry.Profile] = -1
		case graph.LaneMetadata:
			lastLabel[it.entry.Profile] = it.entry.Label
		}
	}
	early := map[string]bool{}
	for i, dl := range deliveries {
		e, ok := byID[dl.EntryID]
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
	r.InitAfterMetadata = len(early)
	r.Profiles = len(lastLabel)
	for profile, want := range lastLabel {
		if got, _ := d.engine.Label("profile", profile); got != want {
			r.LabelMismatches++
		}
	}
	r.StuckNotices = len(d.receiver.of(outbox.NoticeStuck))
	r.DeadLetterNotices = len(d.receiver.of(outbox.NoticeDeadLetter))
	health, err := outbox.ReadHealth(ctx, store)
	if err != nil {
		return err
	}

	var maxFailover time.Duration
	failoverOK := len(d.res.Failovers) > 0
	var parts []string
	for _, f := range r.Failovers {
		maxFailover = max(maxFailover, f.Took)
		failoverOK = failoverOK && f.Took <= f.Bound
		parts = append(parts, fmt.Sprintf("%s %s ≤ %s", f.What, cli.FormatDuration(f.Took), cli.FormatDuration(f.Bound)))
	}
	r.MaxFailover = cli.FormatDuration(maxFailover)

	add := func(name string, ok bool, format string, args ...any) {
		r.Checks = append(r.Checks, Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	holders := "exactly one live holder of " + coordinatorRole + " and of each partition, before and after the failover"
	if d.oneHolderBefore != "" || d.oneHolderAfter != "" {
		holders = strings.Trim(d.oneHolderBefore+"; "+d.oneHolderAfter, "; ")
	}
	add("one holder", d.oneHolderBefore == "" && d.oneHolderAfter == "", "%s", holders)
	lanes := make([]string, 0, len(r.DeliveredByLane))
	for _, l := range sortedKeys(r.DeliveredByLane) {
		lanes = append(lanes, fmt.Sprintf("%s %d", l, r.DeliveredByLane[l]))
	}
	add("delivered in (xid, id) order", r.InOrder && xidMismatch == 0,
		"%d entries, exactly the committed ones sorted by (xid, id) (%s); %d out of order, %d unexpected",
		r.Delivered, strings.Join(lanes, ", "), r.OrderViolations, r.Unexpected)
	add("lost", r.Lost == 0, "%d of %d committed entries", r.Lost, r.CommittedEntries)
	add("rolled-back delivered", r.RolledBackDelivered == 0, "%d requests for the %d entries of %d rolled-back transactions",
		r.RolledBackDelivered, r.RolledBackEntries, r.Transactions.RolledBack)
	add("graph.init before metadata", r.InitAfterMetadata == 0, "%d of %d profiles had a label delivered before their creation",
		r.InitAfterMetadata, r.Profiles)
	add("final labels", r.LabelMismatches == 0, "%d of %d profiles show the label of their last committed change",
		r.Profiles-r.LabelMismatches, r.Profiles)
	add("one stuck notice", r.StuckNotices == 1 && health.FirstStuckAt == nil,
		"%d during the 503 burst; first_stuck_at cleared after recovery: %v", r.StuckNotices, health.FirstStuckAt == nil)
	add("parked, requeued, delivered", r.Parked == 1 && r.Requeued == 1 && r.RequeuedDelivered == 1,
		"%d → %d → %d (dead-letter notices: %d)", r.Parked, r.Requeued, r.RequeuedDelivered, r.DeadLetterNotices)
	add("permission checks", r.PermissionChecks > 0 && r.PermissionFailures == 0, "%d of %d answered as the engine's grants say, via LocalReader",
		r.PermissionChecks-r.PermissionFailures, r.PermissionChecks)
	add("failover within bounds", failoverOK, "max %s (%s)", r.MaxFailover, strings.Join(parts, "; "))
	if xidMismatch > 0 {
		add("xids", false, "%d entries stored under another xid than their transaction's", xidMismatch)
	}
	r.Passed = true
	for _, c := range r.Checks {
		r.Passed = r.Passed && c.OK
	}
	return nil
}
