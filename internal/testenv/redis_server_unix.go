//go:build unix

package testenv

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"testing"
)

// RedisServer is a redis-server of one test's own, started from the binary
// on this machine, with persistence off, as a cache usually runs: whatever
// it held is gone after Restart. Tests of behaviour across a Redis restart
// use it; every other test uses Redis, which shares one server.
type RedisServer struct {
	// Addr is the server's host:port. It stays the same across restarts,
	// so clients reconnect to it on their own.
	Addr string

	bin, dir string
	port     int

	mu sync.Mutex
	p  *proc // nil while stopped
}

// StartRedisServer starts a redis-server for this test alone, on a free
// port, and stops it (removing its directory) when the test ends. The test
// is skipped, or failed when CI is set, when there is no redis-server on
// PATH.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "Redis", errors.New("a restartable server needs redis-server on PATH"), EnvRedisAddr)
	}
	dir, err := serverDir("redis", nil)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	s := &RedisServer{bin: bin, dir: dir}
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			t.Fatalf("testenv: %v", err)
		}
		p, addr, err := startRedisOn(bin, dir, port)
		if err == nil {
			s.Addr, s.port, s.p = addr, port, p
			break
		}
		if attempt < 3 && errors.Is(err, errPortTaken) {
			continue
		}
		os.RemoveAll(dir)
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		s.Stop(t)
		os.RemoveAll(dir)
	})
	return s
}

// Stop shuts the server down; its data is lost. Clients get errors until
// Start. Stopping a stopped server does nothing.
func (s *RedisServer) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return
	}
	if err := s.p.stop(); err != nil {
		t.Fatalf("testenv: stop redis-server at %s: %v", s.Addr, err)
	}
	s.p = nil
}

// Start starts a stopped server again, empty, on the same address.
// Starting a running server does nothing.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p != nil {
		return
	}
	p, _, err := startRedisOn(s.bin, s.dir, s.port)
	if err != nil {
		t.Fatalf("testenv: restart redis-server at %s: %v", s.Addr, err)
	}
	s.p = p
}

// Restart is Stop then Start: the server comes back empty on the same
// address, as a Redis without persistence does after a restart.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop(t)
	s.Start(t)
}
