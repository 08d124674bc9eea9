//go:build !unix

package testenv

import (
	"errors"
	"testing"
)

var errNoThrowaway = errors.New("throwaway servers are only started on Unix systems")

func startPostgresBinaries() (running, error) { return running{}, errNoThrowaway }

func startRedisBinary() (running, error) { return running{}, errNoThrowaway }

// RedisServer is a restartable redis-server of one test's own; see the
// Unix implementation. Elsewhere StartRedisServer skips the test.
type RedisServer struct {
	Addr string
}

// StartRedisServer skips the test (fails it when CI is set): throwaway
// servers are only started on Unix systems.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	unavailable(t, "Redis", errNoThrowaway, EnvRedisAddr)
	return nil
}

// Stop does nothing here.
func (s *RedisServer) Stop(t testing.TB) {}

// Start does nothing here.
func (s *RedisServer) Start(t testing.TB) {}

// Restart does nothing here.
func (s *RedisServer) Restart(t testing.TB) {}
