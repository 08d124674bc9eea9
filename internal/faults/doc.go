// Package faults is baton's multi-process fault suite. Its tests start the
// test binary again as child processes (holders, outbox producers and
// drivers, work-row workers) against throwaway PostgreSQL and Redis servers,
// then kill them (SIGKILL), pause them (SIGSTOP/SIGCONT), terminate them
// (SIGTERM), cut their connections (blackhole or reset, through a fault
// proxy) and stop the database, on a fixed seeded schedule.
//
// The children report what they believe (held or not, with which token;
// what they completed) to the parent over loopback, stamped with the wall
// clock they all share; the outbox drivers deliver to a fencing destination
// in the parent, which records what it accepts. The parent asserts the invariants on
// those reports and on the database, and prints the timings as "figure"
// lines without asserting them.
//
// Every scenario has a negative control, switched on with -faults.negative,
// that misuses the API on purpose (a holder that keeps acting after IsHeld
// turned false, a producer that reports a rolled-back entry as committed, a
// worker that finalizes rows it no longer owns). With it the scenario must
// fail; .ci/run checks that it does.
//
// Run it alone, after the other packages, since it measures timings:
//
//	go test -count=1 -v ./internal/faults/
package faults
