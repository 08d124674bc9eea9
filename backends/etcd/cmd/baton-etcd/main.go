// Command baton-etcd runs baton's demo with its coordination on etcd: the
// same three instances of the "profiles" service and the same verified
// scenario as "baton demo", with the role lease, the 16 partitions and the
// outbox's leader lock in an etcd cluster, while the outbox, the
// projections and the profiles stay on the memory stores, or in PostgreSQL
// with --postgres.
//
//	baton-etcd demo                                  a throwaway three-member cluster in this process
//	baton-etcd demo --etcd-endpoints HOST:PORT,...   a cluster of your own
//	baton-etcd demo --postgres URL                   the outbox in PostgreSQL, in a schema of its own
//
// (go run ./cmd/baton-etcd demo, from backends/etcd). The exit statuses are
// baton's: 0 on success; 1 on a failure (a failed check, an unreachable
// server); 2 on bad input; 130 when interrupted.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/baton-go/baton/backends/etcd/internal/member"
	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/demo"
)

// Environment variables read by the demo: the endpoints when the flag is
// not given, and the credentials, which are read from the environment only
// so that they never show in the process list.
const (
	envEndpoints = "ETCD_ENDPOINTS"
	envUsername  = "ETCD_USERNAME"
	envPassword  = "ETCD_PASSWORD"
)

func main() {
	member.RunIfChild() // the throwaway cluster's members are this binary too
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command line, testable: it returns the exit status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return cli.Execute(ctx, newRootCommand(getenv), args, stdout, stderr)
}

func newRootCommand(getenv func(string) string) *cobra.Command {
	root := &cobra.Command{
		Use:   "baton-etcd",
		Short: "baton's demo with its role leases, partitions and locks on etcd",
		Long: `baton-etcd runs baton's demo with the instances' coordination on etcd: the role
lease, the partitions and the outbox's leader lock live in an etcd cluster,
through backends/etcd's lease store and lock provider, while the outbox stays
where "baton demo" keeps it. Start with "baton-etcd demo".

Exit status: 0 success, 1 failure, 2 bad input, 130 interrupted.`,
	}
	root.AddCommand(newDemoCommand(getenv))
	return root
}

func newDemoCommand(getenv func(string) string) *cobra.Command {
	var endpoints string
	return demo.Command(demo.CommandOptions{
		Use:   "demo",
		Short: "Run baton's demo with the role leases, partitions and locks on etcd",
		Long: `Run the scenario of "baton demo" (three instances of a small "profiles" service
in this process: placement, ordered delivery, the leader killed mid-run, an
engine outage, a parked entry, a projection refresh, then a verification) with
the instances' role lease, 16 partitions and the outbox's leader lock on etcd:
each instance has an etcd client, lease store and lock provider of its own, as
a separate process would. The kill closes the leader's etcd client without
revoking anything, so its roles and its lock are freed when etcd expires its
sessions. It exits 1 if any check fails.

With no --etcd-endpoints (and no $` + envEndpoints + `) it starts a throwaway
three-member cluster on loopback ports, each member a child process of this
command, with its data in a temporary directory removed afterwards. Given endpoints, it uses that cluster,
with credentials from $` + envUsername + ` and $` + envPassword + `, under a key prefix
of its own (baton-demo-<hex>/) that it deletes afterwards.

The outbox, the projections and the profiles stay on the memory stores, or in
PostgreSQL with --postgres URL (a schema of its own, dropped afterwards unless
--keep). Leases and locks are whole seconds on etcd, no shorter than the
cluster grants: the header shows the timings used.`,
		Example: `  baton-etcd demo
  baton-etcd demo --etcd-endpoints 127.0.0.1:2379
  baton-etcd demo --postgres postgres://postgres@127.0.0.1:5432/postgres --json`,
		Flags: func(f *pflag.FlagSet) {
			f.StringVar(&endpoints, "etcd-endpoints", "", "use the etcd cluster at these members, comma separated, as host:port or http://host:port, instead of a throwaway one [$"+envEndpoints+"]")
		},
		Coordination: func(ctx context.Context) (demo.Coordination, func(), error) {
			if endpoints == "" {
				endpoints = getenv(envEndpoints)
			}
			if endpoints == "" {
				return startThrowaway(ctx)
			}
			return connect(ctx, splitEndpoints(endpoints), getenv(envUsername), getenv(envPassword))
		},
	})
}

// splitEndpoints reads a comma-separated list, ignoring blanks around the
// commas.
func splitEndpoints(s string) []string {
	var out []string
	for _, ep := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(ep))
	}
	return out
}
