package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/baton-go/baton/cmd/baton/internal/ops"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/demo"
	"github.com/baton-go/baton/internal/testenv"
)

// checkPassed asserts that a demo's JSON result passed every check; the
// demo package's own tests check what each one found.
func checkPassed(t *testing.T, res *demo.Result) {
	t.Helper()
	if !res.Passed || len(res.Checks) < 10 {
		t.Errorf("passed %v with %d checks, want a pass with 10", res.Passed, len(res.Checks))
	}
	for _, c := range res.Checks {
		if !c.OK {
			t.Errorf("check %q failed: %s", c.Name, c.Detail)
		}
	}
}

// TestDemo_Memory runs "baton demo" on the embedded default, through the
// command line, and checks its JSON result and its narrative.
func TestDemo_Memory(t *testing.T) {
	t.Setenv(cli.EnvColumns, "")
	r := runCLI(t, "demo", "--json").wantCode(t, exitOK)
	var res demo.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("stdout is not the JSON result: %v\n%s", err, r.stdout)
	}
	if res.Backend != "memory" || res.Seed != 1 {
		t.Errorf("backend %q, seed %d; want memory, 1", res.Backend, res.Seed)
	}
	checkPassed(t, &res)
	for _, want := range []string{
		"1. one holder", "2. producers", "3. the leader is killed mid-run", "4. the engine answers 503",
		"5. a 409 parks an entry", "6. projections", "PASS in", "   · delivered ",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the narrative (stderr with --json) lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.ContainsAny(r.stderr, "\r\x1b") {
		t.Errorf("carriage return or terminal escapes in output that is not a terminal:\n%q", r.stderr)
	}
	// The progress lines fit 80 columns (the narrative's are not cut).
	progress := 0
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.Contains(l, "   · delivered ") {
			progress++
			if w := cli.DisplayWidth(l); w > cli.DefaultColumns {
				t.Errorf("progress line of %d columns: %q", w, l)
			}
		}
	}
	if progress == 0 {
		t.Error("no progress line")
	}
}

// TestDemo_Interrupted: a cancelled context stops the demo cleanly, with
// exit status 130 (every goroutine stopped: testenv.Main checks).
func TestDemo_Interrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(1500*time.Millisecond, cancel)
	var out, errb strings.Builder
	if code := run(ctx, []string{"demo"}, &out, &errb); code != exitInterrupted {
		t.Fatalf("exit status %d, want %d\n%s\n%s", code, exitInterrupted, out.String(), errb.String())
	}
	if !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("stderr %q does not say interrupted", errb.String())
	}
}

func TestDemo_FlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--redis", "127.0.0.1:6379"}, "--redis needs --postgres"},
		{[]string{"demo", "--keep"}, "--keep needs --postgres"},
		{[]string{"demo", "--postgres", "postgres://x@127.0.0.1/db", "--redis", "no-port"}, "--redis"},
		{[]string{"demo", "--postgres", "nonsense"}, "--postgres"},
		{[]string{"demo", "--seed", "minus-one"}, "--seed"},
		{[]string{"demo", "extra"}, "takes no arguments"},
	} {
		r := runCLI(t, tc.args...).wantCode(t, exitUsage)
		if !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: stderr %q, want one line mentioning %q", tc.args, r.stderr, tc.want)
		}
	}
}

// TestDemo_PostgresKeep keeps the schema, and the operator commands read
// what the demo left.
func TestDemo_PostgresKeep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole scenario against PostgreSQL; skipped with -short")
	}
	url := testenv.PostgresURL(t)
	r := runCLI(t, "demo", "--postgres", url, "--keep", "--json").wantCode(t, exitOK)
	var res demo.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{res.Schema}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	lr := runCLI(t, "leases", "--postgres", url, "--schema", res.Schema).wantCode(t, exitOK)
	for _, want := range []string{"profiles-coordinator", "profiles:partition-15", "instance-", "free (expired"} {
		if !strings.Contains(lr.stdout, want) {
			t.Errorf("leases output lacks %q:\n%s", want, lr.stdout)
		}
	}
	dl := runCLI(t, "outbox", "dead", "list", "--postgres", url, "--schema", res.Schema, "--json").wantCode(t, exitOK)
	var dead []ops.DeadJSON
	if err := json.Unmarshal([]byte(dl.stdout), &dead); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || dead[0].RequeuedAs == nil || dead[0].Lane != graph.LaneMetadata {
		t.Errorf("dead letters %+v, want the one requeued graph.metadata entry", dead)
	}
	runCLI(t, "verify", "--postgres", url, "--schema", res.Schema).wantCode(t, exitOK)
}
