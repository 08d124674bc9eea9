// Package conformance holds the executable contracts of baton's adapter
// interfaces. An adapter proves itself by calling the suite for its kind from
// its own tests, against a real server:
//
//	func TestConformance(t *testing.T) {
//		conformance.RunLockProvider(t, func(t *testing.T) conformance.LockHarness {
//			return conformance.LockHarness{Provider: newProvider(t), TakeAway: ...}
//		}, conformance.LockFeatures{})
//	}
//
// The rules themselves are written, numbered, on the interface methods they
// govern (lock.Provider and lock.Lock, lease.Store, outbox.Store,
// projection.Store, workrow.Store). Each suite checks every rule of its
// interface with one subtest, whose stable name says what the rule is, so a
// failure names the broken rule and one rule runs alone with -run.
// docs/adapters.md maps every rule to its subtest, and to the deliberately
// broken reference store the suite's own tests prove that subtest fails.
//
// Each suite has one exported entry point. It calls the factory once per
// subtest, with that subtest's *testing.T, so every subtest gets fresh state
// and cleanup runs where it belongs; subtests run in parallel. A small
// features struct declares what a backend cannot do, so the suite skips
// exactly those checks and nothing else. A harness's Unmigrated hook, where
// the store has tables, lets the suite check that a database without them
// fails with the adapter's schema-mismatch error.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"testing"
	"time"
)

// subtest is one rule's check, run on the bundle its area's setup builds.
type subtest[B any] struct {
	name string
	run  func(t *testing.T, b B)
}

// check is a subtest bound to its area's setup: what runChecks runs.
type check struct {
	name string
	run  func(t *testing.T)
}

// area binds the subtests of one area (one file) to the setup they share.
// The setup runs inside each subtest, with its t, so the state it builds
// and its cleanup belong to that subtest alone.
func area[B any](setup func(t *testing.T) B, tests ...subtest[B]) []check {
	out := make([]check, len(tests))
	for i, st := range tests {
		out[i] = check{name: st.name, run: func(t *testing.T) { st.run(t, setup(t)) }}
	}
	return out
}

// runChecks runs every check as a parallel subtest of t.
func runChecks(t *testing.T, checks []check) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

// concat joins the checks of a suite's areas.
func concat(areas ...[]check) []check {
	var out []check
	for _, a := range areas {
		out = append(out, a...)
	}
	return out
}

// names lists the checks' subtest names, in order.
func names(checks []check) []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.name
	}
	return out
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9]+`)

// uniqueName returns a name no other subtest (or earlier run against the
// same server) uses, so suites can share one server in parallel.
func uniqueName(t *testing.T, what string) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	base := unsafeChars.ReplaceAllString(t.Name(), "-")
	if len(base) > 60 {
		base = base[len(base)-60:]
	}
	return "conformance/" + base + "/" + what + "/" + hex.EncodeToString(b)
}

// testCtx is a subtest's context: generous, so that only a hang ends it.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// call is one method call of a store, made by the general subtests.
type call struct {
	what string
	do   func(ctx context.Context) error
}

// checkCancelled makes every call with a context cancelled beforehand: each
// must fail, with an error that still says why (errors.Is
// context.Canceled), however the adapter wraps its own errors.
func checkCancelled(t *testing.T, calls ...call) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range calls {
		if err := c.do(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: err = %v, want one wrapping context.Canceled", c.what, err)
		}
	}
}

// checkSchemaMismatch makes every call against a database without the
// store's tables: each must fail with an error wrapping sentinel, the
// adapter's schema-mismatch error, so an operator reads "migrate" instead
// of an unexplained SQL error.
func checkSchemaMismatch(t *testing.T, sentinel error, calls ...call) {
	t.Helper()
	if sentinel == nil {
		t.Fatal("conformance: the harness has Unmigrated but no SchemaMismatch error to expect")
	}
	ctx := testCtx(t)
	for _, c := range calls {
		if err := c.do(ctx); !errors.Is(err, sentinel) {
			t.Errorf("%s without the tables: err = %v, want one wrapping %v", c.what, err, sentinel)
		}
	}
}

// ignore drops a result a general subtest does not look at.
func ignore[T any](_ T, err error) error { return err }
