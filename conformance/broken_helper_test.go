package conformance_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"testing"
)

// The suites are only worth something if they fail broken adapters. A
// self-test wraps a memory adapter with one defect, runs the suite against
// it in a child process (a failing suite must not fail this test binary),
// and asserts that the subtests named for the defect caught it while the
// others still pass.

// brokenChild is one such run.
type brokenChild struct {
	// Test is the child test function, which runs the suite against the
	// defect named by the environment variable Env.
	Test, Env string
	// Kind names the defect; What names the adapter ("provider", "store")
	// in messages.
	Kind, What string
	// MustCatch are subtests that must fail; MustPassAt are subtests that
	// must still pass (the harness itself works).
	MustCatch, MustPassAt []string
}

// run runs the child and checks its subtest results.
func (c brokenChild) run(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+c.Test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), c.Env+"="+c.Kind)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("the suite passed a %s whose %s (err=%v); output:\n%s", c.What, c.Kind, err, out)
	}
	subtestResult := regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): ` + regexp.QuoteMeta(c.Test) + `/(\w+)`)
	results := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := subtestResult.FindStringSubmatch(sc.Text()); m != nil {
			results[m[2]] = m[1]
		}
	}
	for _, name := range c.MustCatch {
		if results[name] != "FAIL" {
			t.Errorf("subtest %s did not catch %s (result %q)", name, c.Kind, results[name])
		}
	}
	for _, name := range c.MustPassAt {
		if results[name] != "PASS" {
			t.Errorf("subtest %s should pass for %s but got %q", name, c.Kind, results[name])
		}
	}
	if t.Failed() {
		names := make([]string, 0, len(results))
		for n, r := range results {
			names = append(names, n+"="+r)
		}
		sort.Strings(names)
		t.Logf("child results: %v\noutput:\n%s", names, out)
	}
}
