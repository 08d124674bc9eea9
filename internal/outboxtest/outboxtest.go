// Package outboxtest holds what the end-to-end outbox tests of both
// PostgreSQL adapters, and the demo's verification, share: a delivery log
// that processors of several drivers write to, and the check that what was
// delivered is exactly what was committed, in (xid, id) order (CheckOrder),
// with duplicates only at a takeover (Verify).
package outboxtest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// Delivery is one entry as a processor saw it, with when, and the fencing
// token of the leader that delivered it (outbox.FencingToken; 0 when its
// lock cannot fence).
type Delivery struct {
	ID    outbox.ID
	At    time.Time
	Token uint64
}

// Log records, across every driver of a test, the order in which the
// destination saw the entries.
type Log struct {
	mu   sync.Mutex
	seen []Delivery
	by   map[string]int
}

// Processor returns a no-op processor for lane that records into the log
// under the driver's name. When its ctx ends (the lock was lost) it stops,
// as a real request would, and leaves the rest not attempted.
func (l *Log) Processor(driver, lane string) outbox.Processor {
	return outbox.ProcessorFunc{LaneName: lane, Func: func(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
		out := make([]outbox.Outcome, len(run))
		for i, e := range run {
			if ctx.Err() != nil {
				for j := i; j < len(run); j++ {
					out[j] = outbox.Retry("not attempted")
				}
				return out, nil
			}
			token, _ := outbox.FencingToken(ctx)
			l.mu.Lock()
			l.seen = append(l.seen, Delivery{ID: e.ID, At: time.Now(), Token: token})
			if l.by == nil {
				l.by = map[string]int{}
			}
			l.by[driver]++
			l.mu.Unlock()
			out[i] = outbox.Delivered()
		}
		return out, nil
	}}
}

// Snapshot returns the deliveries so far and their count per driver.
func (l *Log) Snapshot() ([]Delivery, map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	by := map[string]int{}
	for k, v := range l.by {
		by[k] = v
	}
	return slices.Clone(l.seen), by
}

// Committed is one entry a producer committed.
type Committed struct {
	XID uint64
	ID  outbox.ID
}

// Dedup keeps the first delivery of each entry, in order.
func Dedup(seen []Delivery) []outbox.ID {
	done := make(map[outbox.ID]bool, len(seen))
	out := make([]outbox.ID, 0, len(seen))
	for _, d := range seen {
		if !done[d.ID] {
			done[d.ID] = true
			out = append(out, d.ID)
		}
	}
	return out
}

// Order is how what a destination received compares with what was
// committed, by CheckOrder.
type Order struct {
	// Exact: the deliveries are the committed entries sorted by (xid, id),
	// each once, none missing, nothing else.
	Exact bool
	// OutOfOrder counts deliveries of a committed entry whose (xid, id) is
	// below that of the committed entry delivered before it.
	OutOfOrder int
	// Unexpected counts deliveries of an entry nobody committed.
	Unexpected int
	// Missing counts committed entries never delivered.
	Missing int
	// FirstDifference is the first position at which the deliveries and the
	// sorted committed entries differ; -1 when Exact.
	FirstDifference int
}

// CheckOrder compares delivered, the entries a destination received in the
// order it received them (each once: see Dedup), with the committed
// entries, in any order: the walk's rule is that the first are the second
// sorted by (xid, id).
func CheckOrder(committed []Committed, delivered []outbox.ID) Order {
	committed = slices.Clone(committed)
	slices.SortFunc(committed, func(a, b Committed) int {
		return cmp.Or(cmp.Compare(a.XID, b.XID), a.ID.Compare(b.ID))
	})
	cursor := make(map[outbox.ID]outbox.Cursor, len(committed))
	for _, c := range committed {
		cursor[c.ID] = outbox.Cursor{XID: c.XID, ID: c.ID}
	}
	o := Order{FirstDifference: -1}
	seen := make(map[outbox.ID]bool, len(delivered))
	var prev *outbox.Cursor
	for i, id := range delivered {
		if o.FirstDifference < 0 && (i >= len(committed) || committed[i].ID != id) {
			o.FirstDifference = i
		}
		seen[id] = true
		c, ok := cursor[id]
		if !ok {
			o.Unexpected++
			continue
		}
		if prev != nil && c.Compare(*prev) < 0 {
			o.OutOfOrder++
		}
		prev = &c
	}
	for _, c := range committed {
		if !seen[c.ID] {
			o.Missing++
		}
	}
	if o.FirstDifference < 0 && len(delivered) < len(committed) {
		o.FirstDifference = len(delivered)
	}
	o.Exact = o.FirstDifference < 0
	return o
}

// Result is what Verify found.
type Result struct {
	Distinct   int
	Duplicates int
	ByDriver   map[string]int
}

// Verify waits (up to timeout) until every committed entry was delivered,
// then fails t unless the deduplicated deliveries are exactly the committed
// entries sorted by (xid, id), no rolled-back entry was delivered, and every
// duplicate was first delivered before killedAt and again after it, at most
// maxDuplicates of them (the batch in flight at the takeover).
func Verify(t *testing.T, l *Log, committed []Committed, rolledBack map[outbox.ID]bool,
	killedAt time.Time, maxDuplicates int, timeout time.Duration) Result {
	t.Helper()
	committed = slices.Clone(committed)
	slices.SortFunc(committed, func(a, b Committed) int {
		return cmp.Or(cmp.Compare(a.XID, b.XID), a.ID.Compare(b.ID))
	})
	var seen []Delivery
	var by map[string]int
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		seen, by = l.Snapshot()
		if len(Dedup(seen)) >= len(committed) || time.Now().After(deadline) {
			break
		}
	}
	got := Dedup(seen)
	if len(got) != len(committed) {
		t.Fatalf("delivered %d distinct entries, committed %d", len(got), len(committed))
	}
	if o := CheckOrder(committed, got); !o.Exact {
		i := o.FirstDifference
		t.Fatalf("delivery %d is %s, want %s: the walk is not in (xid, id) order (%d out of order, %d unexpected, %d missing)",
			i, got[i], committed[i].ID, o.OutOfOrder, o.Unexpected, o.Missing)
	}
	for _, d := range seen {
		if rolledBack[d.ID] {
			t.Fatalf("rolled-back entry %s was delivered", d.ID)
		}
	}
	first := map[outbox.ID]time.Time{}
	dups := 0
	for _, d := range seen {
		at, ok := first[d.ID]
		if !ok {
			first[d.ID] = d.At
			continue
		}
		dups++
		if at.After(killedAt) || d.At.Before(killedAt) {
			t.Errorf("entry %s delivered twice away from the takeover (%v then %v, leader killed at %v)", d.ID, at, d.At, killedAt)
		}
	}
	if dups > maxDuplicates {
		t.Errorf("%d duplicate deliveries; want at most one batch (%d)", dups, maxDuplicates)
	}
	return Result{Distinct: len(got), Duplicates: dups, ByDriver: by}
}
