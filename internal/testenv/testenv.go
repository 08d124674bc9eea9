// Package testenv finds (or starts) the PostgreSQL and Redis servers that
// baton's tests run against, and gives each test an isolated schema or key
// prefix that is removed when the test ends.
//
// Servers are looked for, separately for PostgreSQL and Redis, in this order:
//
//  1. env: the server named by BATON_TEST_POSTGRES_URL / BATON_TEST_REDIS_ADDR;
//     when the variable is set but the server does not answer, the search
//     stops there with an error;
//  2. local: a server already listening on 127.0.0.1:5432 (user postgres,
//     trust auth) / 127.0.0.1:6379;
//  3. throwaway: a server started from the binaries on this machine (initdb
//     and postgres on PATH or under /usr/lib/postgresql/*/bin, redis-server
//     on PATH) in a temporary directory, on a free port;
//  4. docker: a container started through testcontainers-go, when a Docker
//     engine answers.
//
// BATON_TEST_SERVERS restricts the search to the listed tiers, in the given
// order (for example "throwaway" or "local,docker"); unset or "auto" means all
// four. When nothing is found the test is skipped, or failed when the CI
// environment variable is set.
//
// Throwaway servers and containers are shared by all tests of one test binary
// and stopped by [Main], which the test binary must call from its TestMain.
package testenv

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Environment variables that point the tests at servers of your own, or
// choose how servers are found.
const (
	EnvPostgresURL = "BATON_TEST_POSTGRES_URL"
	EnvRedisAddr   = "BATON_TEST_REDIS_ADDR"
	// EnvServers lists the tiers to try, comma separated, in order:
	// env, local, throwaway, docker. Unset or "auto" tries all of them.
	EnvServers = "BATON_TEST_SERVERS"
)

const (
	localPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	localRedisAddr   = "127.0.0.1:6379"
)

// PostgresEnv is one test's slice of a PostgreSQL server: its own schema.
type PostgresEnv struct {
	// ServerURL reaches the server with no schema selected.
	ServerURL string
	// URL reaches the server with search_path set to Schema.
	URL string
	// Schema is the test's own schema, dropped when the test ends.
	Schema string
	// Pool is connected with search_path set to Schema.
	Pool *pgxpool.Pool
}

// RedisEnv is one test's slice of a Redis server: its own key prefix.
type RedisEnv struct {
	Addr string
	// Prefix starts every key the test may use; keys under it are deleted
	// when the test ends.
	Prefix string
	Client *redis.Client
}

// server is what a search found: where it is, which tier found it, and for
// servers this binary started, how to stop them.
type server struct {
	addr string // URL for PostgreSQL, host:port for Redis
	tier string
	pid  int    // process id of a throwaway server, else 0
	dir  string // temporary directory of a throwaway server, else ""
}

type lookup struct {
	once sync.Once
	srv  server
	err  error
}

var (
	pgLookup    lookup
	redisLookup lookup
)

// PostgresURL returns the URL of a reachable PostgreSQL server, or skips the
// test (fails it when CI is set) when none can be found.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return find(t, &pgLookup, "PostgreSQL", EnvPostgresURL, findPostgres).addr
}

// RedisAddr returns the address of a reachable Redis server, or skips the
// test (fails it when CI is set) when none can be found.
func RedisAddr(t testing.TB) string {
	t.Helper()
	return find(t, &redisLookup, "Redis", EnvRedisAddr, findRedis).addr
}

func find(t testing.TB, l *lookup, what, env string, search func([]string) (server, error)) server {
	t.Helper()
	tiers, err := configuredTiers()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	l.once.Do(func() { l.srv, l.err = search(tiers) })
	if l.err != nil {
		unavailable(t, what, l.err, env)
	}
	return l.srv
}

func unavailable(t testing.TB, what string, err error, env string) {
	t.Helper()
	how := "run one on 127.0.0.1:5432 (user postgres, trust auth), install initdb and postgres"
	if strings.HasPrefix(what, "Redis") {
		how = "run one on 127.0.0.1:6379, install redis-server"
	}
	msg := fmt.Sprintf("no %s server for this test: %v\nSet %s, %s, or start a Docker engine (see docs/testing.md).", what, err, env, how)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Tier names, in the default search order.
const (
	tierEnv       = "env"
	tierLocal     = "local"
	tierThrowaway = "throwaway"
	tierDocker    = "docker"
)

var allTiers = []string{tierEnv, tierLocal, tierThrowaway, tierDocker}

// configuredTiers reads EnvServers.
func configuredTiers() ([]string, error) {
	return parseTiers(os.Getenv(EnvServers))
}

func parseTiers(v string) ([]string, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "auto" {
		return allTiers, nil
	}
	var tiers []string
	for _, name := range strings.Split(v, ",") {
		name = strings.TrimSpace(name)
		known := false
		for _, t := range allTiers {
			known = known || name == t
		}
		if !known {
			return nil, fmt.Errorf("%s=%q: unknown tier %q (want auto, or a comma-separated list of %s)", EnvServers, v, name, strings.Join(allTiers, ", "))
		}
		tiers = append(tiers, name)
	}
	return tiers, nil
}

// searchError collects why each tier gave no server.
type searchError []string

func (e searchError) Error() string { return strings.Join(e, "; ") }

func findPostgres(tiers []string) (server, error) {
	var why searchError
	for _, tier := range tiers {
		switch tier {
		case tierEnv:
			u := os.Getenv(EnvPostgresURL)
			if u == "" {
				why = append(why, "env: "+EnvPostgresURL+" not set")
				continue
			}
			if err := pingPostgres(u); err != nil {
				// An explicit choice that does not work is an error, not a
				// reason to try something else.
				return server{}, fmt.Errorf("%s: %w", EnvPostgresURL, err)
			}
			return server{addr: u, tier: tier}, nil
		case tierLocal:
			if err := pingPostgres(localPostgresURL); err != nil {
				why = append(why, "local: "+err.Error())
				continue
			}
			return server{addr: localPostgresURL, tier: tier}, nil
		case tierThrowaway:
			srv, err := ownedServer(startPostgresBinaries)
			if err != nil {
				why = append(why, "throwaway: "+err.Error())
				continue
			}
			return srv, nil
		case tierDocker:
			srv, err := ownedServer(startPostgresContainer)
			if err != nil {
				why = append(why, "docker: "+err.Error())
				continue
			}
			return srv, nil
		}
	}
	return server{}, why
}

func findRedis(tiers []string) (server, error) {
	var why searchError
	for _, tier := range tiers {
		switch tier {
		case tierEnv:
			a := os.Getenv(EnvRedisAddr)
			if a == "" {
				why = append(why, "env: "+EnvRedisAddr+" not set")
				continue
			}
			if err := pingRedis(a); err != nil {
				return server{}, fmt.Errorf("%s: %w", EnvRedisAddr, err)
			}
			return server{addr: a, tier: tier}, nil
		case tierLocal:
			if err := pingRedis(localRedisAddr); err != nil {
				why = append(why, "local: "+err.Error())
				continue
			}
			return server{addr: localRedisAddr, tier: tier}, nil
		case tierThrowaway:
			srv, err := ownedServer(startRedisBinary)
			if err != nil {
				why = append(why, "throwaway: "+err.Error())
				continue
			}
			return srv, nil
		case tierDocker:
			srv, err := ownedServer(startRedisContainer)
			if err != nil {
				why = append(why, "docker: "+err.Error())
				continue
			}
			return srv, nil
		}
	}
	return server{}, why
}

func pingPostgres(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pingPostgresCtx(ctx, url)
}

func pingPostgresCtx(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

func pingRedis(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return pingRedisCtx(ctx, addr)
}

// pingRedisCtx sends one PING over a plain connection: a client would retry
// dialing and log each failure while a server is still starting.
func pingRedisCtx(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if deadline, ok := ctx.Deadline(); ok {
		conn.SetDeadline(deadline)
	}
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	reply, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("PING %s: %w", addr, err)
	}
	if reply = strings.TrimSpace(reply); reply != "+PONG" {
		return fmt.Errorf("PING %s: %s", addr, reply)
	}
	return nil
}

// Postgres gives the test its own schema on the shared server and a pool
// whose connections use it. The schema is dropped when the test ends.
func Postgres(t testing.TB) *PostgresEnv {
	t.Helper()
	return schemaEnv(t, PostgresURL(t))
}

// schemaEnv gives the test a schema of its own on the server at serverURL.
func schemaEnv(t testing.TB, serverURL string) *PostgresEnv {
	t.Helper()
	schema := "baton_test_" + randomHex(6)

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema: %v", err)
	}

	url := withSearchPath(serverURL, schema)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testenv: pool: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
		}
	})
	return &PostgresEnv{ServerURL: serverURL, URL: url, Schema: schema, Pool: pool}
}

// withSearchPath adds search_path to a URL's parameters (pgx sends unknown
// URL parameters as run-time parameters).
func withSearchPath(url, schema string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "search_path=" + schema
}

// Redis gives the test a client and a key prefix of its own. Keys under the
// prefix are deleted when the test ends.
func Redis(t testing.TB) *RedisEnv {
	t.Helper()
	addr := RedisAddr(t)
	client := redis.NewClient(&redis.Options{Addr: addr})
	prefix := "baton-test:" + randomHex(6) + ":"
	t.Cleanup(func() {
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := deletePrefix(ctx, client, prefix); err != nil {
			t.Errorf("testenv: delete keys under %s: %v", prefix, err)
		}
	})
	return &RedisEnv{Addr: addr, Prefix: prefix, Client: client}
}

// deletePrefix deletes every key that starts with prefix. The prefix must
// hold no glob metacharacters (Redis's own prefixes are hex and colons).
func deletePrefix(ctx context.Context, c *redis.Client, prefix string) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
