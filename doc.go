// Package baton is the root of the baton module: coordination for a service
// running on a few nodes over its own PostgreSQL. The code lives in the
// packages below it:
//
//   - core/...: every rule, written once, importing no driver;
//   - backends/... and locks/...: adapters that translate those rules to a
//     store (memory, PostgreSQL with pgx, Redis);
//   - conformance: the suites every adapter passes.
//
// The PostgreSQL adapters are backends/pgxstore (stores on pgx),
// backends/bunstore (stores on bun) and locks/pglock (advisory locks).
//
// Every package speaks one vocabulary, which core/config states: Config for
// core components, Options for adapter constructors, NewX constructors
// returning (T, error), defaults filled in by withDefaults before validate
// checks, refusals as *config.FieldError naming the field, and long-running
// components that block in Run(ctx) until ctx ends.
//
// See README.md and docs/ for what each capability does and how to wire it.
package baton
