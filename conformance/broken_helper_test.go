package conformance_test

import (
	"bufio"
	"bytes"
	"errors"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// The suites are only worth something if they fail broken adapters. Every
// rule written on an interface has at least one variant here: the
// reference (memory) adapter with that rule broken, and nothing else. A
// suite's test runs its suite against each variant in a child process (a
// failing suite must not fail this test binary), running only the subtest
// named for the rule, and asserts that it fails. docs/adapters.md lists
// rule, subtest and variant; rules_test.go keeps that table, the suites
// and the interfaces' documentation in step with these lists.
//
// A break that shows only under one interleaving is given a hook that
// forces it (see rendezvous), so every variant fails every run: run
// `go test -count=20 -run FailsEveryBrokenStore ./conformance/` to see.

// variant is one broken reference adapter, as its suite's list holds it.
type variant struct {
	// name is the variant's stable name, as docs/adapters.md lists it.
	name string
	// rule is the rule it breaks, as the interface documentation numbers
	// it ("L14").
	rule string
	// subtest is the subtest that must fail against it.
	subtest string
}

func (v variant) info() variant { return v }

// hasVariant is a suite's own variant type, which embeds variant.
type hasVariant interface{ info() variant }

// brokenSuite is one suite's variants and the child test that runs one.
type brokenSuite struct {
	// suite is the entry point, as the table in docs/adapters.md names it.
	suite string
	// child is the test function that runs the suite against the variant
	// named by the environment variable env.
	child, env string
	variants   []variant
}

func newBrokenSuite[V hasVariant](suite, child, env string, vs []V) brokenSuite {
	b := brokenSuite{suite: suite, child: child, env: env}
	for _, v := range vs {
		b.variants = append(b.variants, v.info())
	}
	return b
}

// brokenSuites is every suite's list, for rules_test.go.
func brokenSuites() []brokenSuite {
	return []brokenSuite{lockBroken(), leaseBroken(), outboxBroken(), outboxLogBroken(), projectionBroken(), workRowsBroken()}
}

// chosen returns the variant the environment names, in a child process;
// elsewhere it skips the test.
func chosen[V hasVariant](t *testing.T, env string, vs []V) V {
	t.Helper()
	name := os.Getenv(env)
	if name == "" {
		t.Skip("runs only as a child of a FailsEveryBrokenStore test")
	}
	for _, v := range vs {
		if v.info().name == name {
			return v
		}
	}
	t.Fatalf("no broken variant %q", name)
	panic("unreachable")
}

// childProcesses bounds the children running at once. They mostly wait
// (for leases to expire, for announcements), so a few per core.
func childProcesses() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// run runs every variant's child and checks that the named subtest failed.
func (b brokenSuite) run(t *testing.T) {
	if os.Getenv(b.env) != "" {
		t.Skip("child process")
	}
	results := make([]chan childResult, len(b.variants))
	sem := make(chan struct{}, childProcesses())
	var wg sync.WaitGroup
	for i, v := range b.variants {
		results[i] = make(chan childResult, 1)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] <- b.runChild(v)
		})
	}
	defer wg.Wait()
	for i, v := range b.variants {
		t.Run(v.name, func(t *testing.T) {
			r := <-results[i]
			r.check(t, b, v)
		})
	}
}

// childResult is what one child run showed.
type childResult struct {
	err    error
	output []byte
	took   time.Duration
	// results maps each subtest that ran to PASS, FAIL or SKIP.
	results map[string]string
}

func (b brokenSuite) runChild(v variant) childResult {
	start := time.Now()
	cmd := exec.Command(os.Args[0],
		"-test.run=^"+b.child+"$/^"+v.subtest+"$", "-test.v", "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), b.env+"="+v.name)
	out, err := cmd.CombinedOutput()
	r := childResult{err: err, output: out, took: time.Since(start), results: map[string]string{}}
	line := regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): ` + regexp.QuoteMeta(b.child) + `/(\w+)`)
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if m := line.FindStringSubmatch(sc.Text()); m != nil {
			r.results[m[2]] = m[1]
		}
	}
	return r
}

// check fails t unless the child failed in the subtest named for the
// variant's rule, by an assertion of that subtest: not a crash, not a
// harness the suite refused.
func (r childResult) check(t *testing.T, b brokenSuite, v variant) {
	t.Helper()
	var exitErr *exec.ExitError
	switch {
	case !errors.As(r.err, &exitErr):
		t.Errorf("%s passed the variant %q, which breaks rule %s (err=%v)", b.suite, v.name, v.rule, r.err)
	case r.results[v.subtest] != "FAIL":
		t.Errorf("subtest %s did not catch %q, which breaks rule %s (result %q)", v.subtest, v.name, v.rule, r.results[v.subtest])
	case bytes.Contains(r.output, []byte("panic: ")):
		t.Errorf("the child crashed on %q instead of failing subtest %s", v.name, v.subtest)
	case bytes.Contains(r.output, []byte("conformance: ")):
		t.Errorf("the suite refused the harness of %q instead of catching its broken rule", v.name)
	}
	if others := slices.DeleteFunc(slices.Collect(maps.Keys(r.results)), func(n string) bool { return n == v.subtest }); len(others) > 0 {
		t.Errorf("the child ran other subtests too: %v", others)
	}
	if t.Failed() {
		t.Logf("child output (%v):\n%s", r.took.Round(time.Millisecond), r.output)
	}
}

// rendezvous forces an interleaving: it pairs callers, each waiting (up to
// patience) for a partner, so two concurrent calls both pass the point
// before either goes on. A caller with no partner goes on alone, which
// keeps sequential subtests working.
type rendezvous struct {
	patience time.Duration

	mu      sync.Mutex
	waiting *meeting
}

type meeting struct {
	met   chan struct{}
	first any // the first arrival's value, for the second
	other any // the second arrival's value, for the first
}

// meet waits for a partner and returns the partner's value and whether one
// came; the first arrival is told so by first.
func (r *rendezvous) meet(v any) (partner any, met, first bool) {
	r.mu.Lock()
	if m := r.waiting; m != nil {
		r.waiting = nil
		m.other = v
		close(m.met)
		r.mu.Unlock()
		return m.first, true, false
	}
	m := &meeting{met: make(chan struct{}), first: v}
	r.waiting = m
	r.mu.Unlock()
	timer := time.NewTimer(r.patience)
	defer timer.Stop()
	select {
	case <-m.met:
		return m.other, true, true
	case <-timer.C:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiting == m { // nobody came
		r.waiting = nil
		return nil, false, true
	}
	<-m.met // a partner arrived at the last moment
	return m.other, true, true
}
