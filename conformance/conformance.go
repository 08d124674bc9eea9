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
// Each suite has one exported entry point. It calls the factory once per
// subtest, with that subtest's *testing.T, so every subtest gets fresh state
// and cleanup runs where it belongs; subtests run in parallel. A small
// features struct declares what a backend cannot do, so the suite skips
// exactly those checks and nothing else.
package conformance

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"testing"
)

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
