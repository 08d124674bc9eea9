package outbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/core/outbox"
)

// scanLog is a memory store that records every scan's cursor, and can hold
// a settlement until a scan from the cursor it settles at has begun, or
// fail settlements on demand.
type scanLog struct {
	*memory.OutboxStore
	mu     sync.Mutex
	afters []outbox.Cursor
	begun  chan outbox.Cursor // if set, receives each scan's cursor as it begins
	// hold is the count of settlements still to hold until a scan from
	// their To has begun (begun must then be buffered).
	hold     int
	failNext int // settlements still to fail
	// onScan, if set, runs first in every Scan; an error it returns is
	// the scan's.
	onScan func(after outbox.Cursor) error
	// settleTakes is how long each Settle takes (virtual time); overlaps
	// counts the scans that began while one was in flight.
	settleTakes time.Duration
	settling    int
	overlaps    int
}

func (s *scanLog) Scan(ctx context.Context, after outbox.Cursor, limit int) ([]outbox.Entry, error) {
	s.mu.Lock()
	s.afters = append(s.afters, after)
	if s.settling > 0 {
		s.overlaps++
	}
	begun, onScan := s.begun, s.onScan
	s.mu.Unlock()
	if onScan != nil {
		if err := onScan(after); err != nil {
			return nil, err
		}
	}
	if begun != nil {
		select {
		case begun <- after:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.OutboxStore.Scan(ctx, after, limit)
}

var errSettleFailed = errors.New("could not write the outbox state: connection reset by peer")

func (s *scanLog) Settle(ctx context.Context, st outbox.Settlement) error {
	s.mu.Lock()
	hold, fail, takes := s.hold > 0, s.failNext > 0, s.settleTakes
	if hold {
		s.hold--
	}
	if fail {
		s.failNext--
	}
	s.settling++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.settling--
		s.mu.Unlock()
	}()
	time.Sleep(takes)
	if hold {
		// Virtual time: the minute passes at once when nothing else can
		// run, that is when no scan from st.To was started beside this.
		deadline := time.After(time.Minute)
		for {
			select {
			case after := <-s.begun:
				if after == st.To {
					return s.OutboxStore.Settle(ctx, st)
				}
			case <-deadline:
				return errors.New("settled with no scan from its cursor in flight")
			}
		}
	}
	if fail {
		return errSettleFailed
	}
	return s.OutboxStore.Settle(ctx, st)
}

func (s *scanLog) scans() []outbox.Cursor {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.afters)
}

// walkFor commits n one-entry transactions in lane "a", runs a driver over
// s (which must wrap r.store) with a recorder for d of virtual time, then
// stops it and returns what it delivered, in order.
func walkFor(r *rig, s *scanLog, n int, d time.Duration, answer func([]outbox.Entry) ([]outbox.Outcome, error)) []outbox.Entry {
	for range n {
		r.commit("a")
	}
	rec := &recorder{lane: "a", answer: answer}
	cfg := r.config(rec)
	cfg.Store = s
	stop := r.run(cfg)
	time.Sleep(d)
	synctest.Wait()
	stop()
	return rec.delivered()
}

// A busy walk reads its next batch while the last one is delivered and
// settled: the scan from a full batch's end is in flight by the time the
// batch settles.
func TestDriver_ReadsTheNextBatchWhileAFullOneSettles(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		s := &scanLog{OutboxStore: r.store, begun: make(chan outbox.Cursor, 100), hold: 2}
		d := walkFor(r, s, 25, time.Second, nil)
		// BatchSize 10: the settlements of the two full batches waited
		// for the scan of the next. Had one given up, its batch would have
		// been delivered again.
		if len(d) != 25 {
			t.Fatalf("delivered %d entries, want each of the 25 once", len(d))
		}
		if got, want := r.cursor(), d[24].Cursor(); got != want {
			t.Fatalf("cursor %v, want the last entry's %v", got, want)
		}
	})
}

// The batch read ahead is the next pass's scan: each cursor is scanned
// once while the walk is busy, and none ahead of a batch that was not
// full.
func TestDriver_ScansEachCursorOnceWhileBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		s := &scanLog{OutboxStore: r.store}
		d := walkFor(r, s, 35, time.Second, nil) // less than IdleDelay: no idle poll yet
		if len(d) != 35 {
			t.Fatalf("delivered %d of 35 entries", len(d))
		}
		want := []outbox.Cursor{{}, d[9].Cursor(), d[19].Cursor(), d[29].Cursor()}
		if got := s.scans(); !slices.Equal(got, want) {
			t.Fatalf("scans from %v, want %v", got, want)
		}
	})
}

// A settlement that fails leaves the cursor where it was: the batch read
// ahead from the cursor it would have moved to is dropped, and the pass
// after is a scan of the stored cursor, delivering the same entries again.
func TestDriver_DropsTheBatchReadAheadWhenTheSettlementFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		s := &scanLog{OutboxStore: r.store, failNext: 1}
		d := walkFor(r, s, 20, r.config().ErrorDelay+time.Second, nil)
		if len(d) != 30 {
			t.Fatalf("delivered %d entries, want the first batch twice and the second once (30)", len(d))
		}
		if !slices.Equal(ids(d[:10]), ids(d[10:20])) {
			t.Fatal("after the failed settlement the first batch was not delivered again")
		}
		if got := r.cursor(); got != d[29].Cursor() {
			t.Fatalf("cursor %v, want the last entry's %v", got, d[29].Cursor())
		}
	})
}

// A term that ends while a batch is being read ahead waits for that scan:
// the driver's Run returns with no goroutine left (goleak, TestMain).
func TestDriver_EndsTheReadAheadWithTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		for range 15 {
			r.commit("a")
		}
		begun := make(chan outbox.Cursor)
		s := &scanLog{OutboxStore: r.store, begun: begun}
		rec := &recorder{lane: "a"}
		cfg := r.config(rec)
		cfg.Store = s
		stop := r.run(cfg)
		<-begun // the first scan
		synctest.Wait()
		// The second scan, read ahead beside the first settlement, is
		// blocked on begun: end the term under it.
		stop()
		if got := len(rec.delivered()); got != 10 {
			t.Fatalf("delivered %d entries, want the first batch (10)", got)
		}
	})
}

// A pass that settles only part of a full batch (here it stops at a
// retry) leaves the cursor short of where the batch read ahead begins:
// that batch is dropped, and the next pass starts at the retried entry.
func TestDriver_DropsTheBatchReadAheadWhenAPassSettlesPartOfIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		s := &scanLog{OutboxStore: r.store}
		var once sync.Once
		d := walkFor(r, s, 20, 2*time.Second, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			out := all(len(run), outbox.Delivered())
			once.Do(func() { out[5] = outbox.RetryAfter("the destination is busy", time.Second) })
			return out, nil
		})
		committed, err := r.store.Scan(context.Background(), outbox.Cursor{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		want := ids(committed)
		// The first run up to its retry, then from the retried entry on.
		got := append(ids(d[:5]), ids(d[10:])...)
		if !slices.Equal(got, want) {
			t.Fatalf("delivered %v,\nwant each of %v once after the retry", got, want)
		}
		if c := r.cursor(); c != d[len(d)-1].Cursor() {
			t.Fatalf("cursor %v, want the last entry's", c)
		}
	})
}

// serialStore is a store that cannot scan while it settles: it hides the
// memory store's ScansConcurrently, as a store over one connection does.
type serialStore struct{ outbox.Store }

// Over a store that is not a ConcurrentScanner the walk never reads ahead:
// no scan begins while a settlement is in flight.
func TestDriver_ReadsNoBatchAheadFromAStoreThatCannotScanWhileItSettles(t *testing.T) {
	for _, serial := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			r := newRig(t)
			s := &scanLog{OutboxStore: r.store, settleTakes: 10 * time.Millisecond}
			for range 35 {
				r.commit("a")
			}
			rec := &recorder{lane: "a"}
			cfg := r.config(rec)
			cfg.Store = s
			if serial {
				cfg.Store = serialStore{s}
			}
			stop := r.run(cfg)
			time.Sleep(time.Second)
			synctest.Wait()
			stop()
			if n := len(rec.delivered()); n != 35 {
				t.Fatalf("delivered %d of 35 entries", n)
			}
			switch {
			case serial && s.overlaps > 0:
				t.Fatalf("%d scans began while a settlement was in flight", s.overlaps)
			case !serial && s.overlaps == 0:
				t.Fatal("over a ConcurrentScanner no scan began beside a settlement: the check sees nothing")
			}
		})
	}
}

// After a pass that stopped at a retry, the next pass does not read ahead:
// an entry that keeps asking for a retry would have every batch read ahead
// dropped.
func TestDriver_ReadsNoBatchAheadAfterAPassThatStoppedEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		s := &scanLog{OutboxStore: r.store}
		var stuck outbox.ID
		d := walkFor(r, s, 20, 3500*time.Millisecond, func(run []outbox.Entry) ([]outbox.Outcome, error) {
			if stuck.IsNil() {
				stuck = run[5].ID
			}
			out := all(len(run), outbox.Delivered())
			for i, e := range run {
				if e.ID == stuck {
					out[i] = outbox.RetryAfter("the destination is busy", time.Second)
					break
				}
			}
			return out, nil
		})
		at := d[4].Cursor() // the last entry settled
		// The first pass read ahead (from its batch's end); the passes at
		// 1 s, 2 s and 3 s scan from the retried entry, and nothing else.
		want := []outbox.Cursor{{}, d[9].Cursor(), at, at, at}
		if got := s.scans(); !slices.Equal(got, want) {
			t.Fatalf("scans from %v,\nwant %v", got, want)
		}
	})
}

// onFirstReadAhead makes s answer the first scan from anywhere but the
// start (in these tests, the first read ahead) with do.
func onFirstReadAhead(s *scanLog, do func() error) {
	var done bool
	s.onScan = func(after outbox.Cursor) error {
		if after.IsZero() || done {
			return nil
		}
		done = true
		return do()
	}
}

// A read ahead that fails is the scan's answer: the pass fails with its
// error, and the scan is not sent again until ErrorDelay has passed.
func TestDriver_AFailedReadAheadFailsThePass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		s := &scanLog{OutboxStore: r.store}
		onFirstReadAhead(s, func() error { return errUnreachable })
		d := walkFor(r, s, 15, time.Second, nil)
		if len(d) != 10 {
			t.Fatalf("delivered %d entries, want the first batch (10) before ErrorDelay", len(d))
		}
		if got := s.scans(); len(got) != 2 {
			t.Fatalf("scans from %v, want the first and the failed read ahead", got)
		}
		if st := r.state(); !strings.Contains(st[outbox.KeyLastError], errUnreachable.Error()) {
			t.Fatalf("last_error %q, want the read ahead's error", st[outbox.KeyLastError])
		}
	})
}

// A Scan that panics on the goroutine reading ahead fails that scan; it
// does not end the process.
func TestDriver_APanicInAReadAheadFailsTheScan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		s := &scanLog{OutboxStore: r.store}
		onFirstReadAhead(s, func() error { panic("index out of range [3] with length 3") })
		walkFor(r, s, 15, time.Second, nil)
		if st := r.state(); !strings.Contains(st[outbox.KeyLastError], "panicked: index out of range") {
			t.Fatalf("last_error %q, want the panic", st[outbox.KeyLastError])
		}
	})
}

// settleLog is a memory store that records every settlement's state
// keys and the (virtual) time it was made.
type settleLog struct {
	*memory.OutboxStore
	mu    sync.Mutex
	start time.Time
	sent  []sentState
}

type sentState struct {
	at   time.Duration
	keys []string
}

func (s *settleLog) Settle(ctx context.Context, st outbox.Settlement) error {
	keys := make([]string, 0, len(st.State))
	for k := range st.State {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s.mu.Lock()
	s.sent = append(s.sent, sentState{at: time.Since(s.start), keys: keys})
	s.mu.Unlock()
	return s.OutboxStore.Settle(ctx, st)
}

// A walk whose health does not change writes no stamp it has written
// already, and last_scan_at once a second: a busy walk settles hundreds of
// passes a second.
func TestDriver_WritesOnlyChangedStampsAndLastScanAtOnceASecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t)
		for range 35 {
			r.commit("a")
		}
		s := &settleLog{OutboxStore: r.store, start: time.Now()}
		rec := &recorder{lane: "a"}
		cfg := r.config(rec)
		cfg.Store, cfg.IdleDelay = s, 100*time.Millisecond
		stop := r.run(cfg)
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		stop()
		var stamped []time.Duration
		for i, st := range s.sent {
			switch {
			case slices.Equal(st.keys, []string{outbox.KeyLastScanAt}) || (i == 0 && slices.Contains(st.keys, outbox.KeyLastScanAt)):
				stamped = append(stamped, st.at)
			case len(st.keys) > 0:
				t.Fatalf("settlement %d at %v wrote %v; the health did not change", i, st.at, st.keys)
			}
		}
		// The first pass, then the first passes at or after 1 s and 2 s
		// (the idle walk passes every 100 ms).
		want := []time.Duration{0, time.Second, 2 * time.Second}
		if !slices.Equal(stamped, want) {
			t.Fatalf("last_scan_at written at %v, want at %v (of %d settlements)", stamped, want, len(s.sent))
		}
		if _, ok := r.state()[outbox.KeyLastScanAt]; !ok {
			t.Fatal("last_scan_at is not stored")
		}
	})
}
