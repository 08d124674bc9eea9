package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/internal/testenv"
)

// parkLanes commits one entry per lane, each in a transaction of its own,
// and parks them all in one pass; it returns them in the walk's order.
func parkLanes(t *testing.T, env *testenv.PostgresEnv, lanes ...string) (*pgxstore.OutboxStore, []outbox.Entry) {
	t.Helper()
	ctx := testContext(t)
	store, err := pgxstore.NewOutboxStore(env.Pool, pgxstore.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, lane := range lanes {
		tx, err := env.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := pgxstore.Enqueue(ctx, tx, outbox.NewID(), lane, []byte(`{"lane":"`+lane+`"}`)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var entries []outbox.Entry
	deadline := time.Now().Add(30 * time.Second)
	for len(entries) < len(lanes) {
		if entries, err = store.Scan(ctx, outbox.Cursor{}, 100); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("scan found %d of %d entries", len(entries), len(lanes))
		}
		time.Sleep(10 * time.Millisecond)
	}
	park := make([]outbox.Parked, len(entries))
	for i, e := range entries {
		park[i] = outbox.Parked{Entry: e, Reason: "409 Conflict"}
	}
	if err := store.Settle(ctx, outbox.Settlement{To: entries[len(entries)-1].Cursor(), Park: park}); err != nil {
		t.Fatal(err)
	}
	return store, entries
}

func TestDeadRequeueMany(t *testing.T) {
	env := migrated(t)
	store, es := parkLanes(t, env, "a", "a", "b", "a")
	ctx := testContext(t)
	cmd := func(args ...string) []string { return append(args, "--postgres", env.URL) }
	if err := store.Requeue(ctx, es[1].ID, outbox.NewID()); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, cmd("outbox", "dead", "requeue", "--lane", "a", "--dry-run")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "would requeue 2 dead letters of lane \"a\"") || !strings.Contains(r.stdout, "1 requeued before, refused") ||
		!strings.Contains(r.stdout, es[0].ID.String()) || strings.Contains(r.stdout, es[2].ID.String()) {
		t.Fatalf("dry run:\n%s", r.stdout)
	}
	if d, _ := store.GetDead(ctx, es[0].ID); !d.RequeuedAs.IsNil() {
		t.Fatal("the dry run requeued")
	}

	var rep outbox.RequeueReport
	r = runCLI(t, cmd("outbox", "dead", "requeue", "--lane", "a", "--waiting", "--batch", "1", "--json")...).wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Requeued != 2 || rep.AlreadyRequeued != 0 || rep.Batches != 2 || rep.Entries[0].ID != es[0].ID || rep.Entries[1].ID != es[3].ID {
		t.Fatalf("requeue --lane a --waiting: %+v", rep)
	}
	// The replay keeps the order: the first's copy walks before the last's.
	// The walk sees a copy once the horizon has passed its transaction,
	// which another session's open transaction may delay.
	var walked []outbox.ID
	i, j := -1, -1
	for deadline := time.Now().Add(30 * time.Second); i < 0 || j < 0; time.Sleep(10 * time.Millisecond) {
		all, err := store.Scan(ctx, es[len(es)-1].Cursor(), 100)
		if err != nil {
			t.Fatal(err)
		}
		walked = walked[:0]
		for _, e := range all {
			walked = append(walked, e.ID)
		}
		i, j = slices.Index(walked, *rep.Entries[0].RequeuedAs), slices.Index(walked, *rep.Entries[1].RequeuedAs)
		if time.Now().After(deadline) {
			break
		}
	}
	if i < 0 || j < 0 || i > j {
		t.Fatalf("the copies walk at %d and %d of %v", i, j, walked)
	}

	r = runCLI(t, cmd("outbox", "dead", "requeue", "--all", "--waiting")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "requeued 1 dead letters of every lane") || !strings.Contains(r.stdout, es[2].ID.String()) {
		t.Fatalf("requeue --all --waiting:\n%s", r.stdout)
	}

	// dead list filters by state and lane.
	var list []ops.DeadJSON
	r = runCLI(t, cmd("outbox", "dead", "list", "--state", "requeued", "--lane", "a", "--json")...).wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 3 {
		t.Fatalf("dead list --state requeued --lane a: %v\n%s", err, r.stdout)
	}
	for _, d := range list {
		if d.Lane != "a" || d.RequeuedAs == nil {
			t.Errorf("listed %+v", d)
		}
	}
	r = runCLI(t, cmd("outbox", "dead", "list", "--state", "waiting", "--json")...).wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 0 {
		t.Fatalf("dead list --state waiting: %v\n%s", err, r.stdout)
	}
	r = runCLI(t, cmd("outbox", "dead", "list", "--state", "requeued", "--limit", "1", "--json")...).wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 {
		t.Fatalf("dead list --limit 1: %v\n%s", err, r.stdout)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"outbox", "dead", "requeue"}, "a dead letter id, --lane LANE, or --all"},
		{[]string{"outbox", "dead", "requeue", "--lane", "a", "--all"}, "exclude each other"},
		{[]string{"outbox", "dead", "requeue", es[0].ID.String(), "--lane", "a"}, "for requeueing many"},
		{[]string{"outbox", "dead", "requeue", "--all", "--parked-since", "yesterday"}, "neither an RFC 3339 time"},
		{[]string{"outbox", "dead", "requeue", "--all", "--batch", "0"}, "--batch is 0"},
		{[]string{"outbox", "dead", "list", "--state", "parked"}, "waiting or requeued"},
	} {
		r := runCLI(t, cmd(tc.args...)...).wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, r.stderr, tc.want)
		}
	}
}

func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	if got, err := parseWhen("--x", "2h", now); err != nil || !got.Equal(now.Add(-2*time.Hour)) {
		t.Errorf("2h: %v %v", got, err)
	}
	if got, err := parseWhen("--x", "2026-04-30T10:00:00Z", now); err != nil || !got.Equal(time.Date(2026, 4, 30, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("RFC 3339: %v %v", got, err)
	}
	if _, err := parseWhen("--x", "-2h", now); err == nil {
		t.Error("a negative duration was accepted")
	}
}
