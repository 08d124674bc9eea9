//go:build unix

package testenv

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// PostgresServer is a throwaway PostgreSQL server that belongs to one test,
// which may stop and restart it: for faults that must never touch the
// servers other tests share. It is stopped, and its files removed, when the
// test ends.
type PostgresServer struct {
	t testing.TB
	c *postgresCluster
}

// StartPostgresServer initialises a cluster in a temporary directory and
// starts it on a free port of 127.0.0.1, with settings ("name=value") added
// to its configuration. The test is skipped, or failed under CI, when this
// machine has no PostgreSQL binaries.
func StartPostgresServer(t testing.TB, settings ...string) *PostgresServer {
	t.Helper()
	c, err := newPostgresCluster(settings...)
	if err == nil {
		if err = c.start(); err != nil {
			os.RemoveAll(c.dir)
		}
	}
	if err != nil {
		unavailable(t, "PostgreSQL", err, EnvPostgresURL)
	}
	s := &PostgresServer{t: t, c: c}
	t.Cleanup(func() {
		if c.p != nil {
			if err := c.p.stop(); err != nil {
				t.Errorf("testenv: stop PostgreSQL: %v", err)
				return
			}
		}
		os.RemoveAll(c.dir)
	})
	return s
}

// URL reaches the server as user postgres; it stays the same across
// restarts.
func (s *PostgresServer) URL() string { return s.c.url() }

// Addr is the server's host:port.
func (s *PostgresServer) Addr() string {
	u, _ := url.Parse(s.c.url())
	return u.Host
}

// URLVia is URL with host:port replaced by addr, for example a FaultProxy's.
func (s *PostgresServer) URLVia(addr string) string {
	u, _ := url.Parse(s.c.url())
	u.Host = addr
	return u.String()
}

// Stop shuts the server down: immediate is "pg_ctl stop -m immediate"
// (SIGQUIT, no checkpoint, crash recovery at the next start), otherwise a
// fast shutdown. It returns once the server has exited.
func (s *PostgresServer) Stop(immediate bool) {
	s.t.Helper()
	sig := syscall.SIGINT
	if immediate {
		sig = syscall.SIGQUIT
	}
	s.c.p.stopSig = sig
	if err := s.c.p.stop(); err != nil {
		s.t.Fatalf("testenv: stop PostgreSQL: %v", err)
	}
	s.c.p = nil
}

// DataDir is the cluster's data directory, for tools that take -D.
func (s *PostgresServer) DataDir() string { return filepath.Join(s.c.dir, "data") }

// Tool runs one of the installation's programs (pg_resetwal, pg_dump,
// pg_restore, psql, …) with args, as the owner of the data directory, and
// returns its combined output; an error includes that output.
func (s *PostgresServer) Tool(name string, args ...string) ([]byte, error) {
	bin := s.c.postgres
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		bin = real // the installation's own directory, where its tools are
	}
	path := filepath.Join(filepath.Dir(bin), name)
	cmd := exec.Command(path, args...)
	cmd.Dir = s.c.dir
	cmd.SysProcAttr = procAttr(s.c.cred, 0)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w%s", path, err, tailSection("output", string(out)))
	}
	return out, nil
}

// Start starts a stopped server again on the same port and waits until it
// accepts connections.
func (s *PostgresServer) Start() {
	s.t.Helper()
	if err := s.c.start(); err != nil {
		s.t.Fatalf("testenv: restart PostgreSQL: %v", err)
	}
}

// RedisServer is a throwaway redis-server with no persistence that belongs
// to one test, which may stop and restart it; a restart starts it empty. It
// is stopped, and its files removed, when the test ends.
type RedisServer struct {
	t testing.TB
	r *redisInstance
}

// StartRedisServer starts redis-server on a free port of 127.0.0.1. The
// test is skipped, or failed under CI, when there is no redis-server.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	r, err := newRedisInstance()
	if err == nil {
		if err = r.start(); err != nil {
			os.RemoveAll(r.dir)
		}
	}
	if err != nil {
		unavailable(t, "Redis", err, EnvRedisAddr)
	}
	t.Cleanup(func() {
		if r.p != nil {
			if err := r.p.stop(); err != nil {
				t.Errorf("testenv: stop Redis: %v", err)
				return
			}
		}
		os.RemoveAll(r.dir)
	})
	return &RedisServer{t: t, r: r}
}

// Addr is the server's host:port; it stays the same across restarts.
func (s *RedisServer) Addr() string { return s.r.addr() }

// Host is Addr's host, for callers that join their own port.
func (s *RedisServer) Host() string {
	h, _, _ := net.SplitHostPort(s.r.addr())
	return h
}

// Stop ends the server at once (SIGKILL): whatever it held is gone.
func (s *RedisServer) Stop() {
	s.t.Helper()
	s.r.p.stopSig = syscall.SIGKILL
	if err := s.r.p.stop(); err != nil {
		s.t.Fatalf("testenv: stop Redis: %v", err)
	}
	s.r.p = nil
}

// Start starts a stopped server again, empty, on the same port.
func (s *RedisServer) Start() {
	s.t.Helper()
	if err := s.r.start(); err != nil {
		s.t.Fatalf("testenv: restart Redis: %v", err)
	}
}

// Restart is Stop then Start.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Stop()
	s.Start()
}
