package service

import (
	"flag"
	"fmt"
	"strconv"
	"time"
)

// Environment variables read for each flag's default. A flag given on the
// command line wins.
const (
	envListen           = "PROFILES_LISTEN"
	envDatabaseURL      = "DATABASE_URL"
	envEngineURL        = "GRAPH_ENGINE_URL"
	envEngineToken      = "GRAPH_ENGINE_TOKEN"
	envAdminToken       = "PROFILES_ADMIN_TOKEN"
	envAdvertise        = "PROFILES_ADVERTISE"
	envInstanceID       = "PROFILES_INSTANCE_ID"
	envMaintenanceEvery = "PROFILES_MAINTENANCE_EVERY"
	envPartitions       = "PROFILES_PARTITIONS"
)

const (
	defaultListen           = "127.0.0.1:8080"
	defaultDatabaseURL      = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultMaintenanceEvery = 10 * time.Second
)

// ParseConfig reads args with fs, after adding the service's flags to it,
// with their defaults from the environment (getenv). A command that wires
// other stores adds its own flags to fs first.
func ParseConfig(fs *flag.FlagSet, args []string, getenv func(string) string) (Config, error) {
	or := func(key, def string) string {
		if v := getenv(key); v != "" {
			return v
		}
		return def
	}
	every := defaultMaintenanceEvery
	if v := getenv(envMaintenanceEvery); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return Config{}, fmt.Errorf("%s=%q is not a duration such as 10s", envMaintenanceEvery, v)
		}
		every = d
	}

	partitions := 0
	if v := getenv(envPartitions); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return Config{}, fmt.Errorf("%s=%q is not a number", envPartitions, v)
		}
		partitions = n
	}
	var cfg Config
	fs.StringVar(&cfg.Listen, "listen", or(envListen, defaultListen),
		"address to listen on; a wildcard host (\":8080\") advertises the first non-loopback IPv4 address [$"+envListen+"]")
	fs.StringVar(&cfg.DatabaseURL, "database-url", or(envDatabaseURL, defaultDatabaseURL),
		"PostgreSQL URL; tables go to the connection's current schema (add search_path=... to choose it) [$"+envDatabaseURL+"]")
	fs.StringVar(&cfg.EngineURL, "engine-url", getenv(envEngineURL),
		"graph engine delivery URL; empty starts a fake engine inside this process [$"+envEngineURL+"]")
	fs.StringVar(&cfg.EngineToken, "engine-token", getenv(envEngineToken),
		"bearer token sent to the graph engine, if it needs one [$"+envEngineToken+"]")
	fs.StringVar(&cfg.AdminToken, "admin-token", getenv(envAdminToken),
		"bearer token for /admin/outbox/; empty turns the admin API off [$"+envAdminToken+"]")
	fs.StringVar(&cfg.Advertise, "advertise", getenv(envAdvertise),
		"address other instances reach this one at, e.g. https://app-03.internal:8443; empty derives it from -listen [$"+envAdvertise+"]")
	fs.StringVar(&cfg.InstanceID, "instance-id", getenv(envInstanceID),
		"this instance's name in the lease table; empty is the host name plus a random suffix [$"+envInstanceID+"]")
	fs.DurationVar(&cfg.MaintenanceEvery, "maintenance-every", every,
		"pause between maintenance cycles [$"+envMaintenanceEvery+"]")
	fs.IntVar(&cfg.Partitions, "partitions", partitions,
		"size of the partition set \""+PartitionSet+"\" the instances share; 0 for none [$"+envPartitions+"]")
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q; every setting is a flag", fs.Args())
	}
	return cfg, cfg.Validate()
}
