package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/internal/testenv"
)

func TestSchemaPrintFrom(t *testing.T) {
	known := pgxstore.KnownMigrations()
	latest := known[len(known)-1].Version
	whole := runCLI(t, "schema", "print").wantCode(t, exitOK).stdout
	from := runCLI(t, "schema", "print", "--from", "2").wantCode(t, exitOK).stdout
	for _, m := range known {
		header := fmt.Sprintf("-- Migration %04d: %s", m.Version, m.Name)
		if !strings.Contains(whole, header) {
			t.Errorf("the whole schema lacks %q", header)
		}
		if got := strings.Contains(from, header); got != (m.Version > 2) {
			t.Errorf("--from 2: has %q = %v, want %v", header, got, m.Version > 2)
		}
	}
	if !strings.Contains(from, fmt.Sprintf("upgrade from migration version 2 to %d", latest)) {
		t.Errorf("--from 2 does not say it is an upgrade:\n%.300s", from)
	}
	none := runCLI(t, "schema", "print", "--from", fmt.Sprint(latest)).wantCode(t, exitOK).stdout
	if strings.Contains(none, "-- Migration ") {
		t.Errorf("--from the latest version prints migrations:\n%s", none)
	}
	for _, bad := range []string{"-1", fmt.Sprint(latest + 1)} {
		r := runCLI(t, "schema", "print", "--from", bad).wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, "no migration version "+bad) {
			t.Errorf("--from %s: %q", bad, r.stderr)
		}
	}
}

// TestSchemaPrintFrom_UpgradesASchema runs the upgrade script from each
// version on a schema at that version: it must end where migrate does.
func TestSchemaPrintFrom_UpgradesASchema(t *testing.T) {
	whole, err := pgxstore.SchemaSQLFrom(0)
	if err != nil {
		t.Fatal(err)
	}
	known := pgxstore.KnownMigrations()
	for _, m := range known[1:] {
		from := m.Version - 1
		t.Run(fmt.Sprintf("from %d", from), func(t *testing.T) {
			env := testenv.Postgres(t)
			ctx := testContext(t)
			// The schema at version from: the whole script cut before the
			// next migration.
			cut := strings.Index(whole, fmt.Sprintf("\n-- Migration %04d", m.Version))
			if cut < 0 {
				t.Fatalf("no migration %d in the script", m.Version)
			}
			up, err := pgxstore.SchemaSQLFrom(from)
			if err != nil {
				t.Fatal(err)
			}
			for _, sql := range []string{whole[:cut], up} {
				tx, err := env.Pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+quoteIdent(env.Schema)); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Exec(ctx, sql); err != nil {
					t.Fatalf("run the script: %v", err)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := pgxstore.VerifySchema(ctx, env.Pool, pgxstore.VerifyOptions{Schema: env.Schema}); err != nil {
				t.Fatalf("after the upgrade script: %v", err)
			}
		})
	}
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func TestSchemaStatusAndMigrateDryRun(t *testing.T) {
	env := testenv.Postgres(t)
	db := []string{"--postgres", env.URL}
	cmd := func(args ...string) []string { return append(args, db...) }
	known := pgxstore.KnownMigrations()

	r := runCLI(t, cmd("schema", "status")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "records no baton migrations") || !strings.Contains(r.stdout, fmt.Sprintf("pending: %d migration(s)", len(known))) {
		t.Errorf("schema status of an empty schema:\n%s", r.stdout)
	}
	r = runCLI(t, cmd("migrate", "--dry-run")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, fmt.Sprintf("would apply %d migration(s)", len(known))) || !strings.Contains(r.stdout, known[0].Name) ||
		!strings.Contains(r.stdout, "nothing was changed") {
		t.Errorf("migrate --dry-run of an empty schema:\n%s", r.stdout)
	}
	if recs, err := ops.ReadMigrations(testContext(t), env.Pool, env.Schema); err != nil || len(recs) != 0 {
		t.Fatalf("migrate --dry-run recorded %v (%v)", recs, err)
	}
	if n, err := ops.CountTables(testContext(t), env.Pool, env.Schema, ops.BatonTables); err != nil || n != 0 {
		t.Fatalf("migrate --dry-run made %d tables (%v)", n, err)
	}

	runCLI(t, cmd("migrate")...).wantCode(t, exitOK)
	r = runCLI(t, cmd("schema", "status")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "up to date: version "+fmt.Sprint(known[len(known)-1].Version)) || !strings.Contains(r.stdout, "APPLIED AT") {
		t.Errorf("schema status after migrate:\n%s", r.stdout)
	}
	var rep ops.SchemaStatusReport
	r = runCLI(t, cmd("schema", "status", "--json")...).wantCode(t, exitOK)
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || len(rep.Applied) != len(known) || len(rep.Pending) != 0 || rep.Applied[0].AppliedAt.IsZero() {
		t.Errorf("schema status --json: %v %+v", err, rep)
	}
	r = runCLI(t, cmd("migrate", "--dry-run")...).wantCode(t, exitOK)
	if !strings.Contains(r.stdout, "up to date") || !strings.Contains(r.stdout, "would change nothing") {
		t.Errorf("migrate --dry-run after migrate:\n%s", r.stdout)
	}
}
