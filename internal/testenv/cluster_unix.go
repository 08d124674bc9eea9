//go:build unix

package testenv

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisClusterEnv is a Redis Cluster of one node that owns every hash
// slot: enough for the cluster's rules (a script's or a pipeline's keys
// must share a slot) to apply.
type RedisClusterEnv struct {
	Addr   string
	Client *redis.ClusterClient
}

// RedisCluster starts a throwaway single-node Redis Cluster from the
// redis-server binary on this machine, for this test alone, and stops it
// when the test ends. Without the binary the test is skipped, or failed
// when CI is set.
func RedisCluster(t testing.TB) *RedisClusterEnv {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "Redis Cluster", errors.New("no redis-server on PATH"), EnvRedisAddr)
	}
	dir, err := serverDir("redis-cluster", nil)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	port, err := freePort()
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("testenv: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--save", "", "--appendonly", "no", "--dir", dir, "--daemonize", "no")
	cmd.Dir = dir
	cmd.SysProcAttr = procAttr(nil, syscall.SIGKILL)
	logPath := filepath.Join(dir, "redis.log")
	p, err := launchLogged(cmd, logPath, syscall.SIGTERM)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("testenv: %s: %v", bin, err)
	}
	t.Cleanup(func() {
		if err := p.stopAndRemove(dir); err != nil {
			t.Errorf("testenv: stopping the Redis Cluster node: %v", err)
		}
	})
	if err := p.waitReady(redisStartTimeout, func(ctx context.Context) error { return pingRedisCtx(ctx, addr) }); err != nil {
		t.Fatalf("testenv: Redis Cluster node on %s: %v%s", addr, err, tailSection("server log", logTail(logPath)))
	}

	node := redis.NewClient(&redis.Options{Addr: addr})
	defer node.Close()
	ctx, cancel := context.WithTimeout(context.Background(), redisStartTimeout)
	defer cancel()
	if err := node.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
		t.Fatalf("testenv: CLUSTER ADDSLOTSRANGE: %v", err)
	}
	for {
		info, err := node.ClusterInfo(ctx).Result()
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: the one-node cluster on %s never reached cluster_state:ok (%v)", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}})
	t.Cleanup(func() { client.Close() })
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("testenv: cluster client: %v", err)
	}
	return &RedisClusterEnv{Addr: addr, Client: client}
}
