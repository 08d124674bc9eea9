// Package testenv finds (or starts) the PostgreSQL and Redis servers that
// baton's tests run against, and gives each test an isolated schema or key
// prefix that is removed when the test ends.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Environment variables that point the tests at servers of your own.
const (
	EnvPostgresURL = "BATON_TEST_POSTGRES_URL"
	EnvRedisAddr   = "BATON_TEST_REDIS_ADDR"
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

var (
	pgOnce sync.Once
	pgURL  string
	pgErr  error

	redisOnce sync.Once
	redisAddr string
	redisErr  error
)

// PostgresURL returns the URL of a reachable PostgreSQL server, or skips the
// test (fails it when CI is set) when none can be found.
func PostgresURL(t testing.TB) string {
	t.Helper()
	pgOnce.Do(func() { pgURL, pgErr = findPostgres() })
	if pgErr != nil {
		unavailable(t, "PostgreSQL", pgErr, EnvPostgresURL)
	}
	return pgURL
}

// RedisAddr returns the address of a reachable Redis server, or skips the
// test (fails it when CI is set) when none can be found.
func RedisAddr(t testing.TB) string {
	t.Helper()
	redisOnce.Do(func() { redisAddr, redisErr = findRedis() })
	if redisErr != nil {
		unavailable(t, "Redis", redisErr, EnvRedisAddr)
	}
	return redisAddr
}

func unavailable(t testing.TB, what string, err error, env string) {
	t.Helper()
	msg := fmt.Sprintf("no %s server for this test: %v\nSet %s, run one on 127.0.0.1, install its binaries, or start a Docker engine (see docs/testing.md).", what, err, env)
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func findPostgres() (string, error) {
	if u := os.Getenv(EnvPostgresURL); u != "" {
		return u, pingPostgres(u)
	}
	if err := pingPostgres(localPostgresURL); err == nil {
		return localPostgresURL, nil
	} else {
		return "", err
	}
}

func findRedis() (string, error) {
	if a := os.Getenv(EnvRedisAddr); a != "" {
		return a, pingRedis(a)
	}
	if err := pingRedis(localRedisAddr); err == nil {
		return localRedisAddr, nil
	} else {
		return "", err
	}
}

func pingPostgres(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

func pingRedis(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	return c.Ping(ctx).Err()
}

// Postgres gives the test its own schema on the shared server and a pool
// whose connections use it. The schema is dropped when the test ends.
func Postgres(t testing.TB) *PostgresEnv {
	t.Helper()
	server := PostgresURL(t)
	schema := "baton_test_" + randomHex(6)

	ctx := context.Background()
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("testenv: create schema: %v", err)
	}

	url := withSearchPath(server, schema)
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
		c, err := pgx.Connect(ctx, server)
		if err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("testenv: drop schema %s: %v", schema, err)
		}
	})
	return &PostgresEnv{ServerURL: server, URL: url, Schema: schema, Pool: pool}
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
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			if err := client.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("testenv: delete keys under %s: %v", prefix, err)
			}
		}
		client.Close()
	})
	return &RedisEnv{Addr: addr, Prefix: prefix, Client: client}
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
