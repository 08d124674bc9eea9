//go:build !unix

package testenv

import (
	"testing"

	"github.com/redis/go-redis/v9"
)

// RedisClusterEnv is a Redis Cluster of one node; see the Unix version.
type RedisClusterEnv struct {
	Addr   string
	Client *redis.ClusterClient
}

// RedisCluster skips the test (fails it when CI is set): throwaway servers
// are only started on Unix systems.
func RedisCluster(t testing.TB) *RedisClusterEnv {
	t.Helper()
	unavailable(t, "Redis Cluster", errNoThrowaway, EnvRedisAddr)
	return nil
}
