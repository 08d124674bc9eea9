// Command profiles runs the profiles service of examples/profiles with its
// coordination on etcd: the role lease "profiles-maintenance", the
// partition set "profiles" and the outbox's leader lock live in etcd, while
// the profiles and the outbox stay in PostgreSQL, in the transactions that
// write them. Only the wiring differs from examples/profiles: the service
// gets an etcd lease store and lock provider instead of PostgreSQL's.
//
//	go run ./examples/profiles -etcd-endpoints 127.0.0.1:2379 -listen 127.0.0.1:8081 -instance-id one
//
// (from backends/etcd). Every flag of examples/profiles applies, and its
// secrets (the admin token, the users' tokens, the engine token) come from
// the same environment variables; see its README. The flags below add the
// cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/baton-go/baton/backends/etcd"
	"github.com/baton-go/baton/examples/profiles/service"
)

// Environment variables read for the etcd flags' defaults; a flag wins.
// The credentials are read from the environment only, so that they never
// show in the process list.
const (
	envEndpoints = "ETCD_ENDPOINTS"
	envPrefix    = "PROFILES_ETCD_PREFIX"
	envUsername  = "ETCD_USERNAME"
	envPassword  = "ETCD_PASSWORD"
)

const (
	defaultEndpoints = "127.0.0.1:2379"
	defaultPrefix    = "profiles/"
	// defaultPartitions is this command's default for -partitions: the
	// point of it is to show partitions on etcd too.
	defaultPartitions = "8"
)

// coordination is where the service's leases and locks go.
type coordination struct {
	client etcd.ClientOptions
	prefix string
}

// parseFlags reads the service's flags and the etcd ones.
func parseFlags(args []string, getenv func(string) string) (service.Config, coordination, error) {
	or := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("profiles", flag.ContinueOnError)
	endpoints := fs.String("etcd-endpoints", or(envEndpoints, defaultEndpoints),
		"etcd members, comma separated, as host:port or http(s)://host:port [$"+envEndpoints+"]")
	prefix := fs.String("etcd-prefix", or(envPrefix, defaultPrefix),
		"prefix of every key the service writes to etcd; instances that share roles share it [$"+envPrefix+"]")
	withDefaults := func(key string) string {
		if key == "PROFILES_PARTITIONS" {
			return or(key, defaultPartitions)
		}
		return getenv(key)
	}
	cfg, err := service.ParseConfig(fs, args, withDefaults)
	if err != nil {
		return service.Config{}, coordination{}, err
	}
	c := coordination{
		client: etcd.ClientOptions{
			Endpoints: strings.Split(*endpoints, ","),
			Username:  getenv(envUsername),
			Password:  getenv(envPassword),
		},
		prefix: *prefix,
	}
	return cfg, c, nil
}

func main() {
	cfg, c, err := parseFlags(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profiles:", err)
		os.Exit(2)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, c); err != nil {
		cfg.Logger.Error("profiles stopped", "err", err)
		os.Exit(1)
	}
}

// run connects to etcd, hands the service an etcd lease store and lock
// provider, and runs it until ctx ends. The service releases its role and
// its locks as it stops; closing the store and the provider afterwards
// revokes their sessions, which frees anything left at once.
func run(ctx context.Context, cfg service.Config, c coordination) error {
	cli, err := etcd.NewClient(c.client)
	if err != nil {
		return err
	}
	defer cli.Close()
	leases, err := etcd.NewLeaseStore(cli, etcd.LeaseStoreOptions{Prefix: c.prefix, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	locks, err := etcd.NewLockProvider(cli, etcd.LockProviderOptions{Prefix: c.prefix, Logger: cfg.Logger})
	if err != nil {
		return err
	}
	cfg.Leases, cfg.Locks = leases, locks
	runErr := service.Run(ctx, cfg)
	closeCtx := context.WithoutCancel(ctx)
	if err := locks.Close(closeCtx); err != nil && runErr == nil {
		runErr = err
	}
	if err := leases.Close(closeCtx); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}
