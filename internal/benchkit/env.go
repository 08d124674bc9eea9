package benchkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"
)

// Defaults for the servers a run uses.
const (
	DefaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedisAddr   = "127.0.0.1:6379"
)

// Env is one run's own corner of the servers: a schema of its own in the
// database, and a key prefix of its own in Redis. Nothing outside them is
// written, and no server setting is changed: every pool sets
// synchronous_commit=on for its own sessions, so each system is measured
// with the same durability whatever the server's default. Close drops both.
type Env struct {
	Schema string // this run's schema
	Prefix string // this run's Redis key prefix
	// Keep, if set, makes Close leave the schema (and the Redis keys) in
	// place, for a look at what the run left.
	Keep bool

	admin *pgxpool.Pool
	base  *pgxpool.Config
	redis *goredis.Client

	mu    sync.Mutex
	pools []*pgxpool.Pool
}

// Open creates the run's schema and connects to Redis (redisAddr "" for
// no Redis).
func Open(ctx context.Context, url, redisAddr string) (*Env, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	admin, err := newPool(ctx, cfg, 2, "")
	if err != nil {
		return nil, fmt.Errorf("benchkit: connect to PostgreSQL at %s: %w", url, err)
	}
	return open(ctx, admin, redisAddr)
}

// OpenOn creates the run's schema through admin, a pool outside it that
// the Env owns from then on (Close closes it, also when OpenOn fails):
// the pools of the run connect as admin does. No Redis.
func OpenOn(ctx context.Context, admin *pgxpool.Pool) (*Env, error) {
	return open(ctx, admin, "")
}

func open(ctx context.Context, admin *pgxpool.Pool, redisAddr string) (*Env, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		admin.Close()
		return nil, err
	}
	id := hex.EncodeToString(b)
	e := &Env{Schema: "baton_bench_" + id, Prefix: "baton-bench:" + id + ":", admin: admin, base: admin.Config()}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{e.Schema}.Sanitize()); err != nil {
		admin.Close()
		return nil, fmt.Errorf("benchkit: create schema %s: %w", e.Schema, err)
	}
	if redisAddr != "" {
		e.redis = goredis.NewClient(&goredis.Options{Addr: redisAddr, PoolSize: 8})
		if err := e.redis.Ping(ctx).Err(); err != nil {
			_ = e.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("benchkit: connect to Redis at %s: %w", redisAddr, err)
		}
	}
	return e, nil
}

// Pool returns a new pool of at most maxConns connections whose sessions
// work in the run's schema with synchronous_commit on. Close closes it.
func (e *Env) Pool(ctx context.Context, maxConns int) (*pgxpool.Pool, error) {
	p, err := newPool(ctx, e.base, maxConns, e.Schema)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.pools = append(e.pools, p)
	e.mu.Unlock()
	return p, nil
}

// newPool connects a pool of at most maxConns connections configured as
// base, whose sessions commit synchronously, and work in schema unless it
// is "".
func newPool(ctx context.Context, base *pgxpool.Config, maxConns int, schema string) (*pgxpool.Pool, error) {
	cfg := base.Copy()
	cfg.MaxConns = int32(maxConns)
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	if schema != "" {
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Admin is a pool outside the run's schema, for the server's version and
// such.
func (e *Env) Admin() *pgxpool.Pool { return e.admin }

// Redis is the run's Redis client; nil without Redis.
func (e *Env) Redis() *goredis.Client { return e.redis }

// Close closes every pool, drops the schema with everything in it and
// deletes the run's Redis keys (unless Keep).
func (e *Env) Close(ctx context.Context) error {
	var errs []error
	e.mu.Lock()
	pools := e.pools
	e.pools = nil
	e.mu.Unlock()
	for _, p := range pools {
		p.Close()
	}
	if e.admin != nil {
		if !e.Keep {
			if _, err := e.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.Schema}.Sanitize()+" CASCADE"); err != nil {
				errs = append(errs, fmt.Errorf("benchkit: drop schema %s: %w", e.Schema, err))
			}
		}
		e.admin.Close()
	}
	if e.redis != nil {
		if !e.Keep {
			errs = append(errs, e.deleteKeys(ctx))
		}
		errs = append(errs, e.redis.Close())
	}
	return errors.Join(errs...)
}

// deleteKeys deletes the run's Redis keys.
func (e *Env) deleteKeys(ctx context.Context) error {
	iter := e.redis.Scan(ctx, 0, e.Prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := e.redis.Del(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// Name is a name unique to this run, for locks and topics: prefix and the
// run's id.
func (e *Env) Name(prefix string, n int) string {
	return prefix + "_" + e.Schema + "_" + strconv.Itoa(n)
}
