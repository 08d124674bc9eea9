// Package baton is the root of the baton module: coordination for a service
// running on a few nodes over its own PostgreSQL. The code lives in the
// packages below it:
//
//   - core/...: every rule, written once, importing no driver;
//   - backends/... and locks/...: adapters that translate those rules to a
//     store (memory, PostgreSQL with pgx, Redis);
//   - conformance: the suites every adapter passes.
//
// See README.md and docs/ for what each capability does and how to wire it.
package baton
