package conformance_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/baton-go/baton/conformance"
)

// The contract has three written forms that must agree: the numbered
// rules on the interfaces, the table in docs/adapters.md (rule, subtest,
// broken variants), and the suites with their lists of broken variants.
// These tests compare them, so none can drift.

// ruleSources are the files whose documentation numbers each suite's
// rules (separated by spaces where there are several), and the rules'
// prefix.
var ruleSources = map[string]struct{ prefix, file string }{
	"RunLockProvider":    {"K", "../core/lock/lock.go"},
	"RunLeaseStore":      {"L", "../core/lease/store.go"},
	"RunOutboxStore":     {"O", "../core/outbox/store.go ../core/outbox/wake.go"},
	"RunOutboxLog":       {"R", "../core/outbox/log.go"},
	"RunProjectionStore": {"P", "../core/projection/store.go"},
	"RunWorkRows":        {"W", "../core/workrow/store.go ../core/workrow/wake.go"},
}

const adaptersGuide = "../docs/adapters.md"

// tableRow is one row of a suite's table in the guide.
type tableRow struct {
	rule, what, subtest string
	variants            []string
	line                int
}

var (
	suiteHeading = regexp.MustCompile("^### (Run\\w+)$")
	ruleRow      = regexp.MustCompile("^\\| ([A-Z]\\d+) \\| ([^|]+) \\| `(\\w+)` \\| (.+) \\|$")
	ruleItem     = regexp.MustCompile(`^\s*//\s+- ([A-Z]\d+) ([^:]+):`)
)

// guideTables reads the rule tables of docs/adapters.md, by suite.
func guideTables(t *testing.T) map[string][]tableRow {
	t.Helper()
	src, err := os.ReadFile(adaptersGuide)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string][]tableRow{}
	suite := ""
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := suiteHeading.FindStringSubmatch(line); m != nil {
			suite = m[1]
			continue
		}
		m := ruleRow.FindStringSubmatch(line)
		if m == nil || suite == "" {
			continue
		}
		var vs []string
		for _, v := range strings.Split(m[4], ", ") {
			vs = append(vs, strings.Trim(v, "`"))
		}
		tables[suite] = append(tables[suite], tableRow{rule: m[1], what: m[2], subtest: m[3], variants: vs, line: n})
	}
	return tables
}

// documentedRules reads the numbered rules of a file's documentation:
// rule → its short name.
func documentedRules(t *testing.T, files string) map[string]string {
	t.Helper()
	rules := map[string]string{}
	for _, file := range strings.Fields(files) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(src), "\n") {
			if m := ruleItem.FindStringSubmatch(line); m != nil {
				if _, twice := rules[m[1]]; twice {
					t.Errorf("%s numbers rule %s twice", files, m[1])
				}
				rules[m[1]] = m[2]
			}
		}
	}
	return rules
}

func TestRules_EveryRuleHasASubtestAndABrokenVariant(t *testing.T) {
	skipInChild(t)
	tables := guideTables(t)
	subtests := conformance.Subtests()
	broken := map[string]brokenSuite{}
	for _, b := range brokenSuites() {
		broken[b.suite] = b
	}
	if len(tables) != len(ruleSources) {
		t.Errorf("%s has tables for %d suites, want %d", adaptersGuide, len(tables), len(ruleSources))
	}
	for suite, src := range ruleSources {
		t.Run(suite, func(t *testing.T) {
			rows := tables[suite]
			where := func(r tableRow) string { return fmt.Sprintf("%s:%d", filepath.Base(adaptersGuide), r.line) }

			// The interface's rules are the table's, in order, with the
			// same short names.
			documented := documentedRules(t, src.file)
			if len(documented) == 0 {
				t.Fatalf("%s numbers no rules", src.file)
			}
			for i, r := range rows {
				if want := fmt.Sprintf("%s%d", src.prefix, i+1); r.rule != want {
					t.Errorf("%s: rule %s, want %s: the table lists the rules in order", where(r), r.rule, want)
				}
				if what, ok := documented[r.rule]; !ok {
					t.Errorf("%s: rule %s is not written on the interface in %s", where(r), r.rule, src.file)
				} else if what != r.what {
					t.Errorf("%s: rule %s is %q in the table and %q in %s", where(r), r.rule, r.what, what, src.file)
				}
			}
			for rule := range documented {
				if !slices.ContainsFunc(rows, func(r tableRow) bool { return r.rule == rule }) {
					t.Errorf("rule %s of %s is missing from the table of %s", rule, src.file, adaptersGuide)
				}
			}

			// Each subtest of the suite checks exactly one rule.
			var tabled []string
			for _, r := range rows {
				tabled = append(tabled, r.subtest)
			}
			if !slices.Equal(tabled, subtests[suite]) {
				t.Errorf("the table's subtests are\n%v\nand the suite's, in its order,\n%v", tabled, subtests[suite])
			}

			// Every rule has a broken variant, and the table names them
			// all, each with the subtest that must catch it.
			b := broken[suite]
			for _, r := range rows {
				var listed []string
				for _, v := range b.variants {
					if v.rule != r.rule {
						continue
					}
					listed = append(listed, v.name)
					if v.subtest != r.subtest {
						t.Errorf("variant %s of rule %s is caught by %s, but the table says %s", v.name, r.rule, v.subtest, r.subtest)
					}
				}
				if len(listed) == 0 {
					t.Errorf("%s: rule %s has no broken variant", where(r), r.rule)
				}
				if !slices.Equal(listed, r.variants) {
					t.Errorf("%s: rule %s lists variants %v; the broken-store test has %v", where(r), r.rule, r.variants, listed)
				}
			}
			for _, v := range b.variants {
				if !slices.ContainsFunc(rows, func(r tableRow) bool { return r.rule == v.rule }) {
					t.Errorf("variant %s breaks rule %s, which the table does not list", v.name, v.rule)
				}
			}
		})
	}
}

func TestRules_TheAdaptersGuideShowsTheExampleAdapterAsItIs(t *testing.T) {
	skipInChild(t)
	guide, err := os.ReadFile(adaptersGuide)
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_adapter_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(guide, []byte("```go\n"+string(example)+"```\n")) {
		t.Errorf("%s does not show example_adapter_test.go as it is; copy the file into its Go block", adaptersGuide)
	}
}
