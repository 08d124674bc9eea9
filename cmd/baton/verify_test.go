package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/internal/testenv"
)

// statementsOf returns the SQL verify printed after its list: the lines
// from SET search_path on.
func statementsOf(t *testing.T, stdout string) []string {
	t.Helper()
	_, sql, ok := strings.Cut(stdout, "\nSET search_path TO ")
	if !ok {
		t.Fatalf("verify printed no statements:\n%s", stdout)
	}
	lines := strings.Split(strings.TrimSpace("SET search_path TO "+sql), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, ";")
	}
	return lines
}

// fixColumn returns, for each problem containing one of the keys, the
// FIX column of its row in verify's table.
func fixColumn(t *testing.T, stdout string, keys ...string) map[string]string {
	t.Helper()
	header, _, _ := strings.Cut(stdout[strings.Index(stdout, "#  PROBLEM"):], "\n")
	at := strings.Index(header, "FIX")
	fixes := map[string]string{}
	for _, l := range strings.Split(stdout, "\n") {
		for _, k := range keys {
			if strings.Contains(l, k) && len(l) > at {
				fixes[k] = strings.TrimSpace(l[at:])
			}
		}
	}
	return fixes
}

// TestSchemaVerify_EachProblemWithWhatFixesIt: a missing column, and a
// migration applied whose record was lost, need the statements verify
// prints (migrate refuses the schema while the column is missing, and
// would apply the migration again); a missing index is migrate's.
// Following the advice makes the schema verify again.
func TestSchemaVerify_EachProblemWithWhatFixesIt(t *testing.T) {
	env := migrated(t)
	ctx := testContext(t)
	if _, err := env.Pool.Exec(ctx, `ALTER TABLE baton_role_leases DROP COLUMN holder_address;
		DROP INDEX baton_outbox_walk;
		DELETE FROM baton_schema_migrations WHERE version = (SELECT max(version) FROM baton_schema_migrations)`); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "schema", "verify", "--postgres", env.URL).wantCode(t, exitFailure)

	const column, index, record = "column baton_role_leases.holder_address is missing", "index baton_outbox_walk on baton_outbox is missing", "records migration version"
	got := fixColumn(t, r.stdout, column, index, record)
	for p, fix := range map[string]string{column: "the SQL below", index: "baton migrate, or the SQL below", record: "the SQL below"} {
		if got[p] != fix {
			t.Errorf("the fix of %q is %q, want %q:\n%s", p, got[p], fix, r.stdout)
		}
	}
	if want := "fix: run the SQL below, then baton migrate --schema " + env.Schema + ": it fixes 1 of them by itself"; !strings.Contains(r.stdout, want) {
		t.Errorf("verify lacks %q:\n%s", want, r.stdout)
	}
	sql := statementsOf(t, r.stdout)
	for _, want := range []string{`ALTER TABLE "baton_role_leases" ADD COLUMN holder_address text NOT NULL DEFAULT ''`,
		"CREATE INDEX baton_outbox_walk ON baton_outbox (xid, id)", "INSERT INTO baton_schema_migrations (version, name) VALUES ("} {
		if !strings.Contains(strings.Join(sql, "\n"), want) {
			t.Errorf("the statements lack %q: %q", want, sql)
		}
	}
	if r.stderr != "" {
		t.Errorf("stderr %q: the report is on stdout, once", r.stderr)
	}

	var rep ops.VerifyReport
	r = runCLI(t, "verify", "--postgres", env.URL, "--json").wantCode(t, exitFailure)
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Repairs) != 3 {
		t.Fatalf("verify --json: %v %+v", err, rep)
	}
	for _, rp := range rep.Repairs {
		if rp.Migrate != strings.Contains(rp.Problem, index) || len(rp.DDL) != 1 {
			t.Errorf("repair %+v: want one statement each, and migrate for the index only", rp)
		}
	}

	// Migrate is refused, changing nothing; the statements fix it all.
	runCLI(t, "migrate", "--postgres", env.URL).wantCode(t, exitFailure)
	err := pgx.BeginFunc(ctx, env.Pool, func(tx pgx.Tx) error {
		for _, s := range sql {
			if strings.HasPrefix(s, "SET ") {
				s = "SET LOCAL" + strings.TrimPrefix(s, "SET")
			}
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	runCLI(t, "schema", "verify", "--postgres", env.URL).wantCode(t, exitOK)
}

// TestSchemaVerify_MigrateFixesAnOlderSchema: a schema migrations behind
// (version 3) lacks the later migrations' objects, the tables of 4 and the
// columns 5 adds; migrate applies them, and verify says so for each, with
// no statement that would make migrate fail.
func TestSchemaVerify_MigrateFixesAnOlderSchema(t *testing.T) {
	env := testenv.Postgres(t)
	ctx := testContext(t)
	whole, err := pgxstore.SchemaSQLFrom(0)
	if err != nil {
		t.Fatal(err)
	}
	cut := strings.Index(whole, "\n-- Migration 0004")
	if cut < 0 {
		t.Fatal("no migration 4 in the script")
	}
	if _, err := env.Pool.Exec(ctx, whole[:cut]); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, "verify", "--postgres", env.URL).wantCode(t, exitFailure)

	keys := []string{"column baton_outbox.trace_context is missing", "column baton_outbox_dead.trace_context is missing",
		"table baton_projection_header is missing", "table baton_projection_detail is missing",
		"sequence baton_projection_generation is missing", "records migration version 3"}
	got := fixColumn(t, r.stdout, keys...)
	for _, k := range keys {
		if got[k] != "baton migrate" {
			t.Errorf("the fix of %q is %q, want baton migrate:\n%s", k, got[k], r.stdout)
		}
	}
	if want := "fix: baton migrate --schema " + env.Schema + " fixes every one of them by itself"; !strings.Contains(r.stdout, want) {
		t.Errorf("verify lacks %q:\n%s", want, r.stdout)
	}
	if strings.Contains(r.stdout, "SET search_path") {
		t.Errorf("statements printed for what migrate applies:\n%s", r.stdout)
	}
	runCLI(t, "migrate", "--postgres", env.URL).wantCode(t, exitOK)
	runCLI(t, "verify", "--postgres", env.URL).wantCode(t, exitOK)
}
