package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/testenv"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func migrated(t *testing.T) *testenv.PostgresEnv {
	t.Helper()
	env := testenv.Postgres(t)
	if err := pgxstore.Migrate(testContext(t), env.Pool, pgxstore.MigrateOptions{}); err != nil {
		t.Fatal(err)
	}
	return env
}

// seededOutbox is an outbox written through the real store: three entries
// committed in one transaction, one pass settled with the middle one parked
// and a failing streak recorded.
type seededOutbox struct {
	store   *pgxstore.OutboxStore
	entries []outbox.Entry
	parked  outbox.ID
}

func seedOutbox(t *testing.T, env *testenv.PostgresEnv) seededOutbox {
	t.Helper()
	ctx := testContext(t)
	store, err := pgxstore.NewOutboxStore(env.Pool, pgxstore.OutboxStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ids := []outbox.ID{outbox.NewID(), outbox.NewID(), outbox.NewID()}
	slices.SortFunc(ids, outbox.ID.Compare)
	tx, err := env.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		payload, _ := json.Marshal(graph.MetadataPayload{EntityType: "profile", EntityID: fmt.Sprintf("p-%d", i), Label: fmt.Sprintf("Label %d", i)})
		if err := pgxstore.Enqueue(ctx, tx, id, graph.LaneMetadata, payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The walk reads below the cluster-wide horizon: another test binary's
	// open transaction may hide the entries for a moment.
	var entries []outbox.Entry
	deadline := time.Now().Add(30 * time.Second)
	for len(entries) < 3 {
		if entries, err = store.Scan(ctx, outbox.Cursor{}, 10); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("scan found %d of 3 entries", len(entries))
		}
		time.Sleep(10 * time.Millisecond)
	}
	str := func(s string) *string { return &s }
	now := time.Now().UTC()
	err = store.Settle(ctx, outbox.Settlement{
		From: outbox.Cursor{},
		To:   entries[2].Cursor(),
		Park: []outbox.Parked{{Entry: entries[1], Reason: "PUT /api/v3/graph/entities/profile/p-1/metadata: 409 Conflict"}},
		State: map[string]*string{
			outbox.KeyLastScanAt:              str(now.Format(time.RFC3339Nano)),
			outbox.KeyFailedAttempts:          str("3"),
			outbox.KeyLastError:               str("lane graph.metadata: 503 Service Unavailable"),
			outbox.KeyFirstStuckAt:            str(now.Add(-time.Minute).Format(time.RFC3339Nano)),
			outbox.KeyLastDeadLetterAt:        str(now.Format(time.RFC3339Nano)),
			outbox.KeyLastScannedXID:          str("ignored: the cursor keys come from To"),
			outbox.KeyLastStuckNotificationAt: nil,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return seededOutbox{store: store, entries: entries, parked: entries[1].ID}
}

func TestSchemaPrint(t *testing.T) {
	r := runCLI(t, "schema", "print").wantCode(t, exitOK)
	if r.stdout != pgxstore.SchemaSQL() || !strings.Contains(r.stdout, "CREATE TABLE baton_outbox") {
		t.Errorf("schema print is not SchemaSQL():\n%s", r.stdout)
	}
	var doc struct{ SQL string }
	r = runCLI(t, "schema", "print", "--json").wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.SQL != pgxstore.SchemaSQL() {
		t.Errorf("schema print --json: %v\n%s", err, r.stdout)
	}
	runCLI(t, "schema").wantCode(t, exitOK)
	runCLI(t, "schema", "prnt").wantCode(t, exitUsage)
}

func TestMigrateAndVerify(t *testing.T) {
	env := testenv.Postgres(t) // an empty schema, the URL's search_path
	ctx := testContext(t)

	r := runCLI(t, "verify", "--postgres", env.URL).wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "has none of baton's tables") || !strings.Contains(r.stderr, "baton migrate") {
		t.Errorf("verify before migrate: %q", r.stderr)
	}

	r = runCLI(t, "migrate", "--postgres", env.URL).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, fmt.Sprintf("schema %q: applied", env.Schema)) || !strings.Contains(r.stdout, "0003") {
		t.Errorf("first migrate:\n%s", r.stdout)
	}
	r = runCLI(t, "migrate", "--postgres", env.URL).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "is up to date") {
		t.Errorf("second migrate:\n%s", r.stdout)
	}
	var mig ops.MigrateReport
	r = runCLI(t, "migrate", "--postgres", env.URL, "--json").wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &mig); err != nil || mig.Schema != env.Schema || mig.Version < 4 || len(mig.Applied) != 0 {
		t.Errorf("migrate --json: %v %+v", err, mig)
	}

	r = runCLI(t, "verify", "--postgres", env.URL).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "matches this version of baton") {
		t.Errorf("verify:\n%s", r.stdout)
	}
	if _, err := env.Pool.Exec(ctx, "DROP INDEX baton_outbox_walk"); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "verify", "--postgres", env.URL).wantCode(t, exitFailure)
	const fix = "CREATE INDEX baton_outbox_walk ON baton_outbox (xid, id);"
	if !strings.Contains(r.stdout, "baton_outbox_walk") || !strings.Contains(r.stdout, "does not match") || !strings.Contains(r.stdout, fix) {
		t.Errorf("verify after dropping an index, want the problem and %q:\n%s", fix, r.stdout)
	}
	var rep ops.VerifyReport
	r = runCLI(t, "verify", "--postgres", env.URL, "--json").wantCode(t, exitFailure)
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || rep.OK || len(rep.Problems) == 0 || len(rep.DDL) != 1 {
		t.Errorf("verify --json: %v %+v", err, rep)
	}
	// migrate recreates the index.
	runCLI(t, "migrate", "--postgres", env.URL).wantCode(t, exitOK)
	runCLI(t, "verify", "--postgres", env.URL).wantCode(t, exitOK)

	// --schema names another schema, created by migrate.
	other := env.Schema + "_other"
	t.Cleanup(func() {
		_, _ = env.Pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{other}.Sanitize()+" CASCADE")
	})
	runCLI(t, "verify", "--postgres", env.URL, "--schema", other).wantCode(t, exitUsage)
	runCLI(t, "migrate", "--postgres", env.URL, "--schema", other).wantCode(t, exitOK)
	runCLI(t, "verify", "--postgres", env.URL, "--schema", other).wantCode(t, exitOK)
	r = runCLI(t, "migrate", "--postgres", env.URL, "--schema", "pg_nope").wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "--schema") {
		t.Errorf("a reserved schema name: %q", r.stderr)
	}
}

func TestOutboxCommands(t *testing.T) {
	env := migrated(t)
	seed := seedOutbox(t, env)
	ctx := testContext(t)
	db := []string{"--postgres", env.URL}
	cmd := func(args ...string) []string { return append(args, db...) }

	r := runCLI(t, cmd("outbox", "status")...).wantCode(t, exitOK)
	for _, want := range []string{
		"last_scanned_id", seed.entries[2].ID.String(), "503 Service Unavailable", "failing since",
		"dead letters waiting for an operator: 1",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("outbox status lacks %q:\n%s", want, r.stdout)
		}
	}
	var st ops.StatusReport
	r = runCLI(t, cmd("outbox", "status", "--json")...).wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		t.Fatal(err)
	}
	if st.Schema != env.Schema || st.DeadLettersWaiting != 1 || st.Health.FailedAttempts == nil || *st.Health.FailedAttempts != 3 ||
		st.Health.LastScannedID == nil || *st.Health.LastScannedID != seed.entries[2].ID.String() || st.Health.LastStuckNotificationAt != nil {
		t.Errorf("outbox status --json: %+v", st)
	}

	r = runCLI(t, cmd("outbox", "dead", "list")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, seed.parked.String()) || !strings.Contains(r.stdout, "409 Conflict") {
		t.Errorf("dead list:\n%s", r.stdout)
	}
	var list []ops.DeadJSON
	r = runCLI(t, cmd("outbox", "dead", "list", "--json")...).wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].ID != seed.parked ||
		list[0].Payload != nil || list[0].RequeuedAs != nil {
		t.Errorf("dead list --json: %v %+v", err, list)
	}
	r = runCLI(t, cmd("outbox", "dead", "list", "--limit", "1")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "--before "+seed.parked.String()) {
		t.Errorf("a full page does not say how to get the next:\n%s", r.stdout)
	}
	r = runCLI(t, cmd("outbox", "dead", "list", "--before", seed.parked.String())...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "no more dead letters") {
		t.Errorf("the page after the last:\n%s", r.stdout)
	}

	r = runCLI(t, cmd("outbox", "dead", "show", seed.parked.String())...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, `"label": "Label 1"`) || !strings.Contains(r.stdout, "waiting") {
		t.Errorf("dead show:\n%s", r.stdout)
	}
	var one ops.DeadJSON
	r = runCLI(t, cmd("outbox", "dead", "show", seed.parked.String(), "--json")...).wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &one); err != nil || one.ID != seed.parked || len(one.Payload) == 0 {
		t.Errorf("dead show --json: %v %+v", err, one)
	}

	r = runCLI(t, cmd("outbox", "dead", "requeue", seed.parked.String())...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "requeued dead letter "+seed.parked.String()) {
		t.Errorf("requeue:\n%s", r.stdout)
	}
	dl, err := seed.store.GetDead(ctx, seed.parked)
	if err != nil || dl.RequeuedAs.IsNil() {
		t.Fatalf("after requeue: %v %+v", err, dl)
	}
	// The horizon is cluster-wide: another test's open transaction may hide
	// the requeued entry for a moment, so wait for it.
	var after []outbox.Entry
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		after, err = seed.store.Scan(ctx, seed.entries[2].Cursor(), 10)
		if err != nil || len(after) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || len(after) != 1 || after[0].ID != dl.RequeuedAs || after[0].Lane != graph.LaneMetadata {
		t.Errorf("the requeued entry after the cursor: %v %+v", err, after)
	}
	r = runCLI(t, cmd("outbox", "dead", "requeue", seed.parked.String())...).wantCode(t, exitUsage)
	if !strings.Contains(r.stderr, "requeued already, as "+dl.RequeuedAs.String()) {
		t.Errorf("a second requeue: %q", r.stderr)
	}
	r = runCLI(t, cmd("outbox", "status", "--json")...).wantCode(t, exitOK)
	st = ops.StatusReport{}
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || st.DeadLettersWaiting != 0 {
		t.Errorf("waiting after the requeue: %v %+v", err, st)
	}

	// The environment variable stands in for --postgres.
	t.Setenv(cli.EnvDatabaseURL, env.URL)
	runCLI(t, "outbox", "dead", "list").wantCode(t, exitOK)
}

func TestLeasesCommand(t *testing.T) {
	env := migrated(t)
	ctx := testContext(t)
	store, err := pgxstore.NewLeaseStore(env.Pool, pgxstore.LeaseStoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Heartbeat(ctx, lease.HeartbeatRequest{
		Holder: "node-a", Address: "http://10.0.0.1:8080", LeaseDuration: time.Minute,
		Claims: []lease.Claim{{Role: "coordinator"}, {Role: "devices:partition-0"}},
	}); err != nil {
		t.Fatal(err)
	}
	recs, err := store.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "node-b", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "reports"}}})
	if err != nil || len(recs) != 1 || !recs[0].Held {
		t.Fatalf("heartbeat: %v %+v", err, recs)
	}
	if ok, err := store.Release(ctx, "reports", "node-b", recs[0].Token); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}

	r := runCLI(t, "leases", "--postgres", env.URL).wantCode(t, exitOK)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "ROLE") {
		t.Fatalf("leases table:\n%s", r.stdout)
	}
	for i, want := range [][]string{
		{"coordinator", "node-a", "http://10.0.0.1:8080", "held ("},
		{"devices:partition-0", "node-a", "held ("},
		{"reports", "node-b", "free (expired"},
	} {
		for _, w := range want {
			if !strings.Contains(lines[i+1], w) {
				t.Errorf("leases line %d %q lacks %q", i+1, lines[i+1], w)
			}
		}
	}
	var list []ops.LeaseJSON
	r = runCLI(t, "leases", "--postgres", env.URL, "--json").wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 3 {
		t.Fatalf("leases --json: %v\n%s", err, r.stdout)
	}
	if !list[0].Live || list[0].Token != "1" || list[0].ExpiresInMS <= 0 || list[2].Live || list[2].Holder != "node-b" {
		t.Errorf("leases --json: %+v", list)
	}

}

func TestOperatorErrors(t *testing.T) {
	t.Setenv(cli.EnvDatabaseURL, "")
	env := migrated(t)
	empty := testenv.Postgres(t)
	id := outbox.NewID().String()

	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no database", []string{"outbox", "status"}, exitUsage, "pass --postgres URL or set " + cli.EnvDatabaseURL},
		{"bad URL", []string{"leases", "--postgres", "postgres://h:notaport/db"}, exitUsage, "--postgres: not a valid PostgreSQL connection string"},
		{"unreachable", []string{"leases", "--postgres", "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=2"}, exitFailure, "cannot connect to PostgreSQL"},
		{"missing schema", []string{"outbox", "status", "--postgres", env.URL, "--schema", "no_such_schema_here"}, exitUsage, `schema "no_such_schema_here" does not exist`},
		{"tables missing", []string{"outbox", "status", "--postgres", empty.URL}, exitUsage, "has no baton_outbox table; create baton's tables with: baton migrate"},
		{"lease table missing", []string{"leases", "--postgres", empty.URL}, exitUsage, "baton migrate"},
		{"invalid uuid", []string{"outbox", "dead", "show", "not-a-uuid", "--postgres", env.URL}, exitUsage, `"not-a-uuid" is not a valid id`},
		{"unknown id", []string{"outbox", "dead", "show", id, "--postgres", env.URL}, exitUsage, "no dead letter " + id},
		{"requeue unknown id", []string{"outbox", "dead", "requeue", id, "--postgres", env.URL}, exitUsage, "no dead letter " + id},
		{"requeue invalid uuid", []string{"outbox", "dead", "requeue", "12345", "--postgres", env.URL}, exitUsage, "not a valid id"},
		{"show without id", []string{"outbox", "dead", "show", "--postgres", env.URL}, exitUsage, "takes one dead letter id"},
		{"limit 0", []string{"outbox", "dead", "list", "--limit", "0", "--postgres", env.URL}, exitUsage, "--limit is 0"},
		{"limit not a number", []string{"outbox", "dead", "list", "--limit", "many", "--postgres", env.URL}, exitUsage, "--limit"},
		{"before invalid", []string{"outbox", "dead", "list", "--before", "yesterday", "--postgres", env.URL}, exitUsage, "--before"},
		{"before unknown", []string{"outbox", "dead", "list", "--before", id, "--postgres", env.URL}, exitUsage, "--before: no dead letter"},
		{"unknown command", []string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{"unknown subcommand", []string{"outbox", "bogus"}, exitUsage, `unknown command "bogus"`},
		{"unknown flag", []string{"leases", "--nope"}, exitUsage, "unknown flag: --nope"},
		{"stray argument", []string{"leases", "extra", "--postgres", env.URL}, exitUsage, "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, tc.args...).wantCode(t, tc.code)
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q, want it to mention %q", r.stderr, tc.want)
			}
			if n := strings.Count(strings.TrimRight(r.stderr, "\n"), "\n"); n != 0 {
				t.Errorf("stderr has %d lines, want one: %q", n+1, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q, want nothing", r.stdout)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		nil, {"--help"}, {"help"}, {"demo", "--help"}, {"outbox"}, {"outbox", "dead", "--help"},
		{"outbox", "dead", "requeue", "--help"}, {"leases", "--help"}, {"migrate", "--help"}, {"verify", "--help"},
		{"schema", "print", "--help"}, {"outbox", "status", "--help"}, {"outbox", "dead", "list", "--help"},
		{"outbox", "dead", "show", "--help"}, {"bench", "--help"}, {"schema", "verify", "--help"},
	} {
		r := runCLI(t, args...).wantCode(t, exitOK)
		if !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("baton %v: no usage in\n%s", args, r.stdout)
		}
	}
}
