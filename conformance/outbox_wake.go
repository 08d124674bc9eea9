package conformance

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// Waking the driver (outbox.Waker): every commit of an entry reaches an
// idle listener, with its transaction's xid, and nothing else does.

// wakeBound bounds how long a signal may take to arrive, and a listener to
// become idle: only a hang, or a signal never sent, reaches it.
const wakeBound = 5 * time.Second

func (s *outboxSuite) wakeChecks() []check {
	return area(s.wakeSetup,
		subtest[wakeBundle]{"ACommitWakesAnIdleListener", s.commitWakes},
		subtest[wakeBundle]{"ARollbackWakesNobody", s.rollbackWakesNobody},
		subtest[wakeBundle]{"AnEntryEnqueuedBeforeIdleIsNeverMissed", s.inFlightNotMissed},
		subtest[wakeBundle]{"IdleReportsTheNewestEntryAfterTheCursor", s.idleReportsNewest},
		subtest[wakeBundle]{"AWaitThatTimesOutLeavesTheListenerWorking", s.waitTimesOut},
		subtest[wakeBundle]{"AnotherOutboxDoesNotWakeIt", s.anotherOutbox},
	)
}

// wakeBundle is an outbox subtest's start with the store's Waker.
type wakeBundle struct {
	*outboxT
	w outbox.Waker
}

func (s *outboxSuite) wakeSetup(t *testing.T) wakeBundle {
	t.Helper()
	if s.f.NoWake {
		t.Skip("the store does not wake the driver (OutboxFeatures.NoWake)")
	}
	x := s.start(t)
	w, ok := x.h.Store.(outbox.Waker)
	if !ok {
		t.Fatalf("the store %T does not implement outbox.Waker; set OutboxFeatures.NoWake if it cannot", x.h.Store)
	}
	return wakeBundle{outboxT: x, w: w}
}

// listen opens a listening session, closed when the test ends.
func (b wakeBundle) listen() outbox.Listener {
	b.t.Helper()
	l, err := b.w.Listen(b.ctx)
	if err != nil {
		b.t.Fatalf("Listen: %v", err)
	}
	if l == nil {
		b.t.Fatal("Listen returned a nil Listener and no error")
	}
	b.t.Cleanup(func() { _ = l.Close() })
	return l
}

// idle asks Idle until it answers idle or reports a newest entry (busy is
// allowed while a producer is in flight, and none is here for long), and
// returns the answer.
func (b wakeBundle) idle(l outbox.Listener, after outbox.Cursor) (bool, uint64) {
	b.t.Helper()
	for deadline := time.Now().Add(wakeBound); ; time.Sleep(5 * time.Millisecond) {
		idle, newest, err := l.Idle(b.ctx, after)
		if err != nil {
			b.t.Fatalf("Idle: %v", err)
		}
		if idle || newest != 0 {
			return idle, newest
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("Idle answered busy for %v with no producer in flight", wakeBound)
		}
	}
}

// idleEmpty makes l idle over an outbox with nothing after the cursor.
func (b wakeBundle) idleEmpty(l outbox.Listener) {
	b.t.Helper()
	if idle, newest := b.idle(l, outbox.Cursor{}); !idle {
		b.t.Fatalf("Idle over an empty outbox reported newest xid %d and did not answer idle", newest)
	}
}

// wait waits for a signal, failing after wakeBound.
func (b wakeBundle) wait(l outbox.Listener, what string) uint64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wakeBound)
	defer cancel()
	xid, err := l.Wait(ctx)
	if err != nil {
		b.t.Fatalf("%s: Wait: %v (no signal within %v)", what, err, wakeBound)
	}
	return xid
}

// xidOf waits for e to be visible and returns its xid.
func (b wakeBundle) xidOf(e outbox.Entry) uint64 {
	b.t.Helper()
	return b.find(b.await(outbox.Cursor{}, e.ID), e.ID).XID
}

// commitWakes: once idle, a commit makes Wait return its xid (or later).
func (s *outboxSuite) commitWakes(t *testing.T, b wakeBundle) {
	l := b.listen()
	b.idleEmpty(l)
	e := outboxEntry("wake", 1)
	b.commitTx(e)
	got := b.wait(l, "after a commit")
	if want := b.xidOf(e); got < want {
		t.Fatalf("Wait returned xid %d after the commit of xid %d; it must return that xid or a later one", got, want)
	}
}

// rollbackWakesNobody: of two transactions, the younger rolls back and the
// older commits; the only signal is the older's.
func (s *outboxSuite) rollbackWakesNobody(t *testing.T, b wakeBundle) {
	l := b.listen()
	b.idleEmpty(l)
	older, younger := b.begin(), b.begin()
	kept, dropped := outboxEntry("wake", 1), outboxEntry("wake", 2)
	b.enqueue(older, kept)
	b.enqueue(younger, dropped) // takes the younger xid
	if err := younger.Rollback(b.ctx); err != nil {
		t.Fatalf("Rollback: %v", err)
	}
	b.commit(older)
	got := b.wait(l, "after a rollback and a commit")
	if want := b.xidOf(kept); got != want {
		t.Fatalf("Wait returned xid %d; only the committed transaction (xid %d) signals, not the younger one that rolled back", got, want)
	}
}

// inFlightNotMissed: an entry enqueued before Idle and committed after its
// answer is reported by a later Idle (busy first) or wakes Wait.
func (s *outboxSuite) inFlightNotMissed(t *testing.T, b wakeBundle) {
	l := b.listen()
	tx := b.begin()
	e := outboxEntry("wake", 1)
	b.enqueue(tx, e)
	idle, _, err := l.Idle(b.ctx, outbox.Cursor{})
	if err != nil {
		t.Fatalf("Idle: %v", err)
	}
	b.commit(tx)
	want := b.xidOf(e)
	if !idle {
		// Busy while the producer was in flight: the next answer reports
		// its entry, which committed before it.
		if _, newest := b.idle(l, outbox.Cursor{}); newest < want {
			t.Fatalf("Idle reported newest xid %d after a commit of xid %d it answered busy for; the entry would be missed", newest, want)
		}
		return
	}
	if got := b.wait(l, "after the commit of an entry enqueued before Idle"); got < want {
		t.Fatalf("Wait returned xid %d, want %d or later", got, want)
	}
}

// idleReportsNewest: Idle reports the newest committed entry after the
// cursor, and 0 after the last one.
func (s *outboxSuite) idleReportsNewest(t *testing.T, b wakeBundle) {
	l := b.listen()
	first, second := outboxEntry("wake", 1), outboxEntry("wake", 2)
	b.commitTx(first)
	b.commitTx(second)
	x1, x2 := b.xidOf(first), b.xidOf(second)
	for _, c := range []struct {
		after outbox.Cursor
		want  uint64
		what  string
	}{
		{outbox.Cursor{}, x2, "the start"},
		{outbox.Cursor{XID: x1, ID: first.ID}, x2, "the first entry"},
		{outbox.Cursor{XID: x2, ID: second.ID}, 0, "the last entry"},
	} {
		idle, got := b.idle(l, c.after)
		switch {
		case got != c.want:
			t.Errorf("Idle(after %s) reported newest xid %d, want %d", c.what, got, c.want)
		case idle != (c.want == 0):
			t.Errorf("Idle(after %s) answered idle %v with newest xid %d; it answers idle only with nothing after the cursor", c.what, idle, got)
		}
	}
}

// waitTimesOut: a Wait whose ctx ends returns ctx's error, and the next
// Wait still hears a commit.
func (s *outboxSuite) waitTimesOut(t *testing.T, b wakeBundle) {
	l := b.listen()
	b.idleEmpty(l)
	ctx, cancel := context.WithTimeout(b.ctx, 50*time.Millisecond)
	_, err := l.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with nothing to hear returned %v when its ctx ended, want an error wrapping context.DeadlineExceeded", err)
	}
	e := outboxEntry("wake", 1)
	b.commitTx(e)
	if got, want := b.wait(l, "after a Wait that timed out"), b.xidOf(e); got < want {
		t.Fatalf("Wait returned xid %d, want %d or later", got, want)
	}
}

// anotherOutbox: commits into another outbox, with later xids, do not
// reach this one's listener.
func (s *outboxSuite) anotherOutbox(t *testing.T, b wakeBundle) {
	other := &outboxT{t: t, ctx: b.ctx, h: s.harness(t), wait: b.outboxT.wait}
	l := b.listen()
	b.idleEmpty(l)
	mine := b.begin()
	e := outboxEntry("wake", 1)
	b.enqueue(mine, e)
	for i := range 3 { // later xids, whatever counter the other outbox keeps
		other.commitTx(outboxEntry("other", i))
	}
	b.commit(mine)
	if got, want := b.wait(l, "after commits into two outboxes"), b.xidOf(e); got != want {
		t.Fatalf("Wait returned xid %d, want %d, this outbox's only commit: another outbox's commits woke it", got, want)
	}
}
