package main

import (
	"github.com/spf13/cobra"

	"github.com/baton-go/baton/internal/demo"
)

// newDemoCommand is "baton demo": the demo on memory or PostgreSQL, with
// memory, advisory or Redis locks.
func newDemoCommand() *cobra.Command {
	return demo.Command(demo.CommandOptions{
		Use:   "demo",
		Short: "Run three instances of a small service and watch baton work",
		Long: `Run three instances of a small "profiles" service in this process and walk
through a fixed, seeded scenario:

  1. one holder of the role lease, and the 16 partitions spread over the instances;
  2. producers writing profile changes and outbox entries in one transaction
     (some rolled back), delivered in order on both standard lanes
     (graph.init, graph.metadata);
  3. the leader killed mid-run, without releasing anything, and another
     instance taking over within the lease and lock bounds (measured);
  4. the engine answering 503 for a while: one stuck notice, then recovery;
  5. a 409 parking an entry, requeued through the outbox admin API, delivered;
  6. a projection refresh from the engine's grants and local permission checks.

It ends with a verification computed from what the (fake) graph engine
received: delivered in (xid, id) order, nothing lost, nothing rolled back
delivered, failover within its bound. It exits 1 if any check fails.

With no flags it runs on memory stores and memory locks: no server needed,
about 5 seconds. Durations are shortened for the demo (leases of 2s instead
of 15s, ...); the output says which.

With --postgres URL it runs the same scenario on PostgreSQL, in a schema of its
own (baton_demo_<hex>, created, migrated and dropped afterwards unless --keep),
with advisory locks, or Redis locks with --redis ADDR. The kill then ends the
instance's database sessions for real.

On a terminal a progress line (deliveries per second, parked entries, the
current leader) is redrawn in place; otherwise progress is logged. Ctrl-C stops
the demo cleanly.`,
		Example: `  baton demo
  baton demo --postgres postgres://postgres@127.0.0.1:5432/postgres
  baton demo --postgres postgres://postgres@127.0.0.1:5432/postgres --redis 127.0.0.1:6379 --keep`,
		Redis: true,
	})
}
