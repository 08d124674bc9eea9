package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/baton-go/baton/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cliResult is one run of the command line.
type cliResult struct {
	code           int
	stdout, stderr string
}

// runCLI runs the command line in-process, as main would.
func runCLI(t *testing.T, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

// wantCode fails the test unless the run exited with code.
func (r cliResult) wantCode(t *testing.T, code int) cliResult {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}
