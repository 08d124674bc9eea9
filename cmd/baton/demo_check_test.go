package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/baton-go/baton/internal/testenv"
)

// childArgs, when set, makes TestDemo_UnreachableRedisIsOneLine the CLI
// itself, writing to the process's own stdout and stderr: go-redis's logger
// writes there, past any writer a test could give run.
const childArgs = "BATON_TEST_CLI_ARGS"

func demoSchemas(t *testing.T, env *testenv.PostgresEnv) []string {
	t.Helper()
	rows, err := env.Pool.Query(testContext(t), `SELECT nspname FROM pg_namespace WHERE nspname LIKE 'baton\_demo\_%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func TestDemo_UnreachableRedisIsOneLine(t *testing.T) {
	if args := os.Getenv(childArgs); args != "" {
		os.Exit(run(context.Background(), strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
	}
	env := testenv.Postgres(t)
	before := demoSchemas(t, env)
	cmd := exec.Command(os.Args[0], "-test.run=^TestDemo_UnreachableRedisIsOneLine$")
	cmd.Env = append(os.Environ(), childArgs+"="+strings.Join([]string{"demo", "--postgres", env.URL, "--redis", "127.0.0.1:1"}, "\x1f"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitFailure {
		t.Fatalf("exit: %v; want status %d\nstdout:\n%s\nstderr:\n%s", err, exitFailure, stdout.String(), stderr.String())
	}
	if stdout.Len() != 0 {
		t.Errorf("the demo printed before it checked Redis:\n%s", stdout.String())
	}
	if msg := strings.TrimSpace(stderr.String()); strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "--redis 127.0.0.1:1: cannot reach Redis") {
		t.Errorf("stderr is not one line naming Redis:\n%s", stderr.String())
	}
	if after := demoSchemas(t, env); strings.Join(after, ",") != strings.Join(before, ",") {
		t.Errorf("demo schemas before %v, after %v: a schema was created before Redis was checked", before, after)
	}
}

func TestDemo_UnreachablePostgresIsOneLine(t *testing.T) {
	r := runCLI(t, "demo", "--postgres", "postgres://root@127.0.0.1:1/baton").wantCode(t, exitFailure)
	if r.stdout != "" {
		t.Errorf("the demo printed before it checked PostgreSQL:\n%s", r.stdout)
	}
	if msg := strings.TrimSpace(r.stderr); strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "cannot connect to PostgreSQL at 127.0.0.1:1") {
		t.Errorf("stderr is not one line naming PostgreSQL:\n%s", r.stderr)
	}
}
