package pgxstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// A settlement never fails on a conflict it can foresee, on the log as on
// the walk. An entry whose id already has a dead letter (rows written
// around Enqueue, or left by a version before parking copied, whose park
// raced an Enqueue of the same id) is parked by replacing that dead
// letter; a log park that refused it failed every settlement from then on,
// and nothing after the entry was delivered again.
func TestOutboxLog_ParkingAnEntryWithADeadLettersIDReplacesItInsteadOfStalling(t *testing.T) {
	e := newLogEnv(t)
	ctx := testContext(t)
	id := outbox.NewID()
	rec := &delivered{lane: "a", answer: func(run []outbox.Entry) []outbox.Outcome {
		out := make([]outbox.Outcome, len(run))
		for i, en := range run {
			out[i] = outbox.Delivered()
			if en.ID == id {
				out[i] = outbox.Park("second")
			}
		}
		return out
	}}
	runDriver(t, e.store, e.store, nil, rec)
	awaitSource(t, e.store, outbox.SourceLogical)

	tx, err := e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `INSERT INTO baton_outbox_dead (id, xid, lane, payload, error) VALUES ($1, '1', 'old', '{"v": 1}', 'first')`, [16]byte(id)); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO baton_outbox (id, lane, payload) VALUES ($1, 'a', '{"v": 2}')`, [16]byte(id)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after := outbox.NewID()
	tx, err = e.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := Enqueue(ctx, tx, after, "a", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	times := func(x outbox.ID) int {
		n := 0
		for _, got := range rec.ids() {
			if got == x {
				n++
			}
		}
		return n
	}
	var d outbox.DeadLetter
	replaced := func() bool {
		d, err = e.store.GetDead(ctx, id)
		return err == nil && strings.HasPrefix(d.Error, "second")
	}
	deadline := time.Now().Add(30 * time.Second)
	for !replaced() || times(after) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s the dead letter is %+v, %v, and the entry was delivered %d times, the one after it %d times: the log's settlements stall on the park",
				d, err, times(id), times(after))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d.Lane != "a" || !strings.HasPrefix(d.Error, "second (this replaced a dead letter") || !samePayloadJSON(d.Payload, `{"v": 2}`) {
		t.Fatalf("the dead letter is %+v; want the newer entry, its error saying what it replaced", d)
	}
	if n := times(id); n != 1 {
		t.Fatalf("the entry was delivered %d times; want once, its park settled by the first pass", n)
	}
}
