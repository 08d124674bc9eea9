package benchkit

import (
	"context"
	"errors"
	"time"

	"github.com/bsm/redislock"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/baton-go/baton/backends/pgxstore"
	"github.com/baton-go/baton/core/lock"
	"github.com/baton-go/baton/locks/pglock"
	batonredis "github.com/baton-go/baton/locks/redis"
)

// The lock cells time one uncontended acquire and release at a time, for
// d: each system on its own lock name, so none ever waits for another.

// RedisLock is baton's Redis provider: Acquire (the lock with its fencing
// token, and the fail-closed keepalive started) then Release.
func RedisLock(rdb goredis.UniversalClient, prefix, name string, d time.Duration) (System, error) {
	p, err := batonredis.NewProvider(rdb, batonredis.Options{Prefix: prefix})
	if err != nil {
		return System{}, err
	}
	return System{Name: "baton Redis lock", Run: func(ctx context.Context) (Sample, error) {
		return Loop(ctx, 1, d, func(ctx context.Context) error {
			l, err := p.Acquire(ctx, name, lock.AcquireOptions{})
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	}}, nil
}

// RawRedislock is bsm/redislock on its own: Obtain then Release, with the
// same TTL, no token and no keepalive.
func RawRedislock(rdb goredis.UniversalClient, key string, d time.Duration) System {
	c := redislock.New(rdb)
	return System{Name: "raw redislock", Run: func(ctx context.Context) (Sample, error) {
		return Loop(ctx, 1, d, func(ctx context.Context) error {
			l, err := c.Obtain(ctx, key, batonredis.DefaultTTL, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	}}
}

// PostgresLock is baton's PostgreSQL provider: Acquire (advisory lock and
// fence increment in one statement, a connection pinned, its watcher
// started) then Release. namespace keeps the run's advisory keys apart
// from anyone else's on the same database.
func PostgresLock(ctx context.Context, pool *pgxpool.Pool, namespace, name string, d time.Duration) (System, error) {
	if err := pgxstore.Migrate(ctx, pool, pgxstore.MigrateOptions{}); err != nil {
		return System{}, err
	}
	p, err := pglock.NewProvider(pool, pglock.Options{Namespace: namespace})
	if err != nil {
		return System{}, err
	}
	return System{Name: "baton PostgreSQL lock", Run: func(ctx context.Context) (Sample, error) {
		return Loop(ctx, 1, d, func(ctx context.Context) error {
			l, err := p.Acquire(ctx, name, lock.AcquireOptions{})
			if err != nil {
				return err
			}
			return l.Release(ctx)
		})
	}}, nil
}

// BareAdvisoryLock is the fair peer of the PostgreSQL provider: a pooled
// connection, one statement that takes a session advisory lock and bumps
// a fence counter of its own table when granted (the fence costs a WAL
// flush, which a bare advisory lock alone would not pay), then the unlock.
func BareAdvisoryLock(ctx context.Context, pool *pgxpool.Pool, namespace, name string, d time.Duration) (System, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_fences (name text PRIMARY KEY, token bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return System{}, err
	}
	const acquire = `WITH got AS (SELECT pg_try_advisory_lock($1) AS ok)
INSERT INTO bench_fences AS f (name, token) SELECT $2, 1 FROM got WHERE got.ok
ON CONFLICT (name) DO UPDATE SET token = f.token + 1, updated_at = now()
RETURNING token`
	key := pglock.KeyIn(namespace, name+"-bare")
	return System{Name: "advisory lock + fence upsert", Run: func(ctx context.Context) (Sample, error) {
		return Loop(ctx, 1, d, func(ctx context.Context) error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			var token int64
			if err := conn.QueryRow(ctx, acquire, key, name).Scan(&token); err != nil {
				if errors.Is(err, pgx.ErrNoRows) {
					return errors.New("the bare advisory lock was not granted; someone else holds its key")
				}
				return err
			}
			var ok bool
			return conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, key).Scan(&ok)
		})
	}}, nil
}
