package service

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Environment variables: the default of each flag (a flag given on the
// command line wins), and the secrets, which have no flag: a command line
// shows in every process listing.
const (
	envListen           = "PROFILES_LISTEN"
	envDatabaseURL      = "DATABASE_URL"
	envEngineURL        = "GRAPH_ENGINE_URL"
	envEngineToken      = "GRAPH_ENGINE_TOKEN"   // secret: no flag
	envAdminToken       = "PROFILES_ADMIN_TOKEN" // secret: no flag
	envAdvertise        = "PROFILES_ADVERTISE"
	envPeers            = "PROFILES_PEERS"
	envUsers            = "PROFILES_USERS" // secret: no flag
	envInstanceID       = "PROFILES_INSTANCE_ID"
	envMaintenanceEvery = "PROFILES_MAINTENANCE_EVERY"
	envPartitions       = "PROFILES_PARTITIONS"
	envTraces           = "PROFILES_TRACES"
)

const (
	defaultListen           = "127.0.0.1:8080"
	defaultDatabaseURL      = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultMaintenanceEvery = 10 * time.Second
	// defaultPeers suits copies on one machine, as the README starts them.
	defaultPeers = "127.0.0.1,::1"
)

// ParseConfig reads args with fs, after adding the service's flags to it,
// with their defaults from the environment (getenv), and the secrets from
// the environment alone. A command that wires other stores adds its own
// flags to fs first.
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
	var usage strings.Builder // the flag package's messages go into the error
	fs.SetOutput(&usage)
	fs.StringVar(&cfg.Listen, "listen", or(envListen, defaultListen),
		"address to listen on; a wildcard host (\":8080\") advertises the first non-loopback IPv4 address [$"+envListen+"]")
	// No default shown from the environment: help output would print a
	// password the URL holds. Prefer the environment for a URL with one.
	fs.StringVar(&cfg.DatabaseURL, "database-url", "",
		"PostgreSQL URL; tables go to the connection's current schema (add search_path=... to choose it); "+
			"default $"+envDatabaseURL+", else "+defaultDatabaseURL)
	fs.StringVar(&cfg.EngineURL, "engine-url", getenv(envEngineURL),
		"graph engine delivery URL; empty starts a fake engine inside this process [$"+envEngineURL+"]")
	fs.StringVar(&cfg.Advertise, "advertise", getenv(envAdvertise),
		"address other instances reach this one at, e.g. https://app-03.internal:8443; empty derives it from -listen [$"+envAdvertise+"]")
	var peers string
	fs.StringVar(&peers, "peers", or(envPeers, defaultPeers),
		"comma-separated IP addresses, CIDR prefixes or host names of the other instances: the only addresses "+
			"/maintenance is forwarded to (loopback must be named) [$"+envPeers+"]")
	fs.StringVar(&cfg.InstanceID, "instance-id", getenv(envInstanceID),
		"this instance's name in the lease table; empty is the host name plus a random suffix [$"+envInstanceID+"]")
	fs.DurationVar(&cfg.MaintenanceEvery, "maintenance-every", every,
		"pause between maintenance cycles [$"+envMaintenanceEvery+"]")
	var traces bool
	fs.BoolVar(&traces, "traces", getenv(envTraces) == "1",
		"print the spans of the outbox's passes and deliveries to standard error, as JSON [$"+envTraces+"=1]")
	fs.IntVar(&cfg.Partitions, "partitions", partitions,
		"size of the partition set \""+PartitionSet+"\" the instances share; 0 for none [$"+envPartitions+"]")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Config{}, fmt.Errorf("usage:\n%s\nsecrets come from the environment only: %s, %s, %s",
				usage.String(), envAdminToken, envUsers, envEngineToken)
		}
		return Config{}, err
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = or(envDatabaseURL, defaultDatabaseURL)
	}
	if traces {
		cfg.Traces = os.Stderr
	}
	cfg.EngineToken = getenv(envEngineToken)
	cfg.AdminToken = getenv(envAdminToken)
	users, err := parseUsers(getenv(envUsers))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", envUsers, err)
	}
	cfg.Users = users
	for _, p := range strings.Split(peers, ",") {
		if p = strings.TrimSpace(p); p != "" {
			cfg.Peers = append(cfg.Peers, p)
		}
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q; every setting is a flag", fs.Args())
	}
	return cfg, cfg.Validate()
}

// parseUsers reads "name=token,name=token": the users the service knows and
// the bearer token each one authenticates with.
func parseUsers(v string) (map[string]string, error) {
	users := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, token, ok := strings.Cut(pair, "=")
		if !ok || name == "" || token == "" {
			return nil, fmt.Errorf("want name=token pairs separated by commas (the entry at position %d is not one)", len(users)+1)
		}
		if _, twice := users[name]; twice {
			return nil, fmt.Errorf("user %q is listed twice", name)
		}
		users[name] = token
	}
	return users, nil
}
