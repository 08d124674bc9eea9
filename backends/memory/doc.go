// Package memory holds baton's in-memory stores: the implementations of the
// core store interfaces that keep their state in the process.
//
// They serve two purposes. They are the embedded default, for a single
// instance, for development and for tests, where running PostgreSQL would
// be overhead; state lives as long as the store value and is shared only by
// the goroutines of one process. And they are the reference adapter: each
// store states the contract of its interface in the plainest code that
// passes the same conformance suite as the database adapters, so when an
// adapter and a memory store disagree, the memory store shows the intended
// behaviour.
//
// OutboxStore is also its own producer: Begin, Enqueue and Commit stand in
// for the caller's database transaction, with PostgreSQL's rules for xids
// (taken at the first write) and visibility (below the oldest open
// transaction).
//
// WorkRowStore keeps one work table of any row struct, its fields named as
// database columns, and evaluates claims with core's SQL rules
// (workrow.Cond.Eval); its ClaimIndex is what a partial claim index over
// the live filter would hold.
//
// Every store is safe for concurrent use. Where a rule depends on time, the
// store judges it by its own clock, which the options let a test replace.
package memory
