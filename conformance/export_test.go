package conformance

import "testing"

// Subtests returns each suite's subtest names, in the order the suite runs
// them, for the tests that keep docs/adapters.md and the broken variants
// in step with the suites.
func Subtests() map[string][]string {
	return map[string][]string{
		"RunLockProvider":    names(newLockSuite(nil, LockFeatures{}).checks()),
		"RunLeaseStore":      names(newLeaseSuite(nil, LeaseFeatures{}).checks()),
		"RunOutboxStore":     names(newOutboxSuite(nil, OutboxFeatures{}).checks()),
		"RunOutboxLog":       names(newOutboxLogSuite(nil, OutboxLogFeatures{}).checks()),
		"RunProjectionStore": names(newProjectionSuite(nil, ProjectionFeatures{}).checks()),
		"RunWorkRows":        names(newWorkRowsSuite(nil, WorkRowsFeatures{}).checks()),
	}
}

// SetUpLockSubtest is the lock suites' setup of one subtest: the harness
// the factory returns, as the subtest gets it.
func SetUpLockSubtest(t *testing.T, factory func(t *testing.T) LockHarness) LockHarness {
	return newLockSuite(factory, LockFeatures{}).setup(t).h
}
