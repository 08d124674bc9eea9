// Package demo is baton's demo: three instances of a small "profiles"
// service in one process, walked through a seeded scenario (placement,
// ordered delivery, the leader killed, an engine outage, a parked entry, a
// projection refresh) and verified from what the fake graph engine
// received. Run runs it; Command is the command line of "baton demo" and of
// the nested modules' demo commands.
//
// The instances keep their state in memory stores or in a PostgreSQL schema
// of their own. A Coordination moves their role leases, partitions and
// locks to a service of its own (etcd, in backends/etcd) while the outbox,
// the projections and the profiles stay where they were: the same scenario,
// with only the wiring changed.
package demo
