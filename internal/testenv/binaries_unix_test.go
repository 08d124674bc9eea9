//go:build unix

package testenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// needThrowaway skips the test when this machine has no binaries to start
// throwaway servers from (fails it when CI is set).
func needThrowaway(t *testing.T) {
	t.Helper()
	var missing []string
	if _, _, err := postgresBinaries(); err != nil {
		missing = append(missing, err.Error())
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		missing = append(missing, "no redis-server on PATH")
	}
	if len(missing) == 0 {
		return
	}
	msg := "cannot start throwaway servers: " + strings.Join(missing, "; ")
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func TestThrowawayServers(t *testing.T) {
	needThrowaway(t)

	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		r, err := startPostgresBinaries()
		if err != nil {
			t.Fatal(err)
		}
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				r.stop()
			}
		})
		t.Logf("PostgreSQL at %s, pid %d, dir %s", r.srv.addr, r.srv.pid, r.srv.dir)

		ctx := t.Context()
		conn, err := pgx.Connect(ctx, r.srv.addr)
		if err != nil {
			t.Fatal(err)
		}
		var user, fsync, version string
		err = conn.QueryRow(ctx, "SELECT current_user, current_setting('fsync'), current_setting('server_version')").Scan(&user, &fsync, &version)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("server version %s", version)
		if user != "postgres" || fsync != "off" {
			t.Errorf("connected as %q with fsync=%s; want postgres with fsync=off", user, fsync)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE t (id int); INSERT INTO t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
		conn.Close(context.Background())

		if os.Geteuid() == 0 {
			if uid, ok := processUID(r.srv.pid); ok && uid == 0 {
				t.Errorf("the server runs as root")
			}
		}

		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		stopped = true
		assertGone(t, r.srv)
		if err := pingPostgres(r.srv.addr); err == nil {
			t.Errorf("%s still answers after stop", r.srv.addr)
		}
	})

	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		r, err := startRedisBinary()
		if err != nil {
			t.Fatal(err)
		}
		stopped := false
		t.Cleanup(func() {
			if !stopped {
				r.stop()
			}
		})
		t.Logf("Redis at %s, pid %d, dir %s", r.srv.addr, r.srv.pid, r.srv.dir)

		ctx := t.Context()
		c := redis.NewClient(&redis.Options{Addr: r.srv.addr})
		if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
			t.Errorf("GET k = %q, %v", v, err)
		}
		save, err := c.ConfigGet(ctx, "save").Result()
		if err != nil || save["save"] != "" {
			t.Errorf("CONFIG GET save = %v, %v; want persistence off", save, err)
		}
		c.Close()

		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		stopped = true
		assertGone(t, r.srv)
		if err := pingRedis(r.srv.addr); err == nil {
			t.Errorf("%s still answers after stop", r.srv.addr)
		}
	})
}

// TestForcedThrowawayTier runs the isolation tests in a child test binary
// that may only use throwaway servers, and checks that its Main stopped them.
func TestForcedThrowawayTier(t *testing.T) {
	needThrowaway(t)
	t.Parallel()
	out, err := runChild(t, "^(TestPostgresIsolation|TestRedisIsolation)$", EnvServers+"="+tierThrowaway)
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	servers := serverLines(out)
	for _, kind := range []string{"postgres", "redis"} {
		s := servers[kind]
		if s == nil || s["tier"] != tierThrowaway {
			t.Errorf("%s: tier %q, want %s\n%s", kind, s["tier"], tierThrowaway, out)
			continue
		}
		pid, _ := strconv.Atoi(s["pid"])
		assertGone(t, server{pid: pid, dir: s["dir"]})
	}
}

// TestServersDieWithTestBinary kills a child test binary that has started
// throwaway servers, and checks that the servers go with it and that their
// directories are swept away later.
func TestServersDieWithTestBinary(t *testing.T) {
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("the parent-death signal is Linux only")
	}
	needThrowaway(t)
	t.Parallel()

	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperStartAndHang$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "BATON_TESTENV_HELPER=hang")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()

	var started []server
	var lines []string
	scan := bufio.NewScanner(stdout)
	for len(started) < 2 && scan.Scan() {
		lines = append(lines, scan.Text())
		var pid int
		var dir string
		if _, err := fmt.Sscanf(strings.TrimSpace(scan.Text()), "started pid=%d dir=%s", &pid, &dir); err == nil {
			started = append(started, server{pid: pid, dir: dir})
		}
	}
	if len(started) < 2 {
		t.Fatalf("the child did not start two servers:\n%s", strings.Join(lines, "\n"))
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, s := range started {
		waitGone(t, s.pid)
	}
	cmd.Wait()
	sweepStaleDirs()
	for _, s := range started {
		if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
			t.Errorf("directory %s of a killed test binary was not swept (%v)", s.dir, err)
		}
	}
}

// TestHelperStartAndHang is run by TestServersDieWithTestBinary in a child
// test binary: it starts throwaway servers, reports them, and waits to be
// killed.
func TestHelperStartAndHang(t *testing.T) {
	if os.Getenv("BATON_TESTENV_HELPER") != "hang" {
		t.Skip("helper for TestServersDieWithTestBinary")
	}
	for _, start := range []func() (running, error){startPostgresBinaries, startRedisBinary} {
		r, err := start()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("started pid=%d dir=%s\n", r.srv.pid, r.srv.dir)
	}
	time.Sleep(time.Hour)
}

func TestCompareVersions(t *testing.T) {
	dirs := []string{"9.6", "15", "10", "16", "9.5"}
	for i := range dirs {
		for j := range dirs {
			a, b := dirs[i], dirs[j]
			fa, _ := strconv.ParseFloat(a, 64)
			fb, _ := strconv.ParseFloat(b, 64)
			got := compareVersions(a, b)
			if (got < 0) != (fa < fb) || (got == 0) != (fa == fb) {
				t.Errorf("compareVersions(%s, %s) = %d", a, b, got)
			}
		}
	}
}

// assertGone checks that a stopped server's process has exited, that none
// of its children (PostgreSQL backends keep their working directory inside
// the data directory) remain, and that its directory is removed.
func assertGone(t *testing.T, s server) {
	t.Helper()
	if s.pid <= 0 {
		t.Errorf("no pid")
		return
	}
	if alive(s.pid) {
		t.Errorf("process %d is still running", s.pid)
	}
	if s.dir == "" {
		return
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("directory %s still exists (%v)", s.dir, err)
	}
	if pids := processesIn(s.dir); len(pids) > 0 {
		t.Errorf("processes %v still run in %s", pids, s.dir)
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Errorf("process %d outlived the test binary that started it", pid)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid names a process that has not exited (a zombie
// waiting for its new parent to reap it counts as exited).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) == syscall.ESRCH {
		return false
	}
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return !os.IsNotExist(err)
	}
	return !strings.Contains(string(status), "\nState:\tZ") && !strings.Contains(string(status), "\nState:\tX")
}

// processUID reads a process's real uid from /proc (Linux).
func processUID(pid int) (int, bool) {
	status, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				uid, err := strconv.Atoi(f[0])
				return uid, err == nil
			}
		}
	}
	return 0, false
}

// processesIn lists live processes whose working directory is inside dir
// (Linux; nil elsewhere).
func processesIn(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/")) && alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestRedisServer_RestartComesBackEmptyOnTheSameAddress(t *testing.T) {
	needThrowaway(t)
	s := StartRedisServer(t)
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	if err := pingRedisCtx(ctx, s.Addr()); err != nil {
		t.Fatalf("not answering on %s after the restart: %v", s.Addr(), err)
	}
	var n int64
	var err error
	for range 3 { // the client's pooled connection died with the old server
		if n, err = c.Exists(ctx, "k").Result(); err == nil {
			break
		}
	}
	if err != nil || n != 0 {
		t.Fatalf("after the restart EXISTS k = %d, %v; want 0: the server must come back empty", n, err)
	}
	s.Stop()
	if err := pingRedisCtx(ctx, s.Addr()); err == nil {
		t.Fatal("still answering after Stop")
	}
}
