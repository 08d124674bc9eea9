//go:build unix

package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Throwaway servers: started from the binaries installed on this machine,
// in a temporary directory, on a free port of 127.0.0.1, with durability
// switched off. They die with the test binary (parent-death signal on Linux)
// and are stopped, and their directory removed, by Main.

const (
	// dirPrefix names the temporary directories of throwaway servers, so that
	// ones left behind by a killed test binary can be recognised and removed.
	dirPrefix = "baton-testenv-"
	// ownerFile in such a directory holds the pid of the test binary.
	ownerFile = "owner.pid"

	postgresStartTimeout = 60 * time.Second
	redisStartTimeout    = 20 * time.Second
	stopGrace            = 15 * time.Second
)

// postgresVersionDirs is where Debian and Ubuntu install PostgreSQL server
// binaries, one directory per major version.
const postgresVersionDirs = "/usr/lib/postgresql/*/bin"

func startPostgresBinaries() (running, error) { return startThrowawayPostgres() }

// startThrowawayPostgres starts a throwaway cluster with settings added
// to its configuration ("name=value").
func startThrowawayPostgres(settings ...string) (running, error) {
	pg, err := newPostgresCluster(settings...)
	if err != nil {
		return running{}, err
	}
	if err := pg.start(); err != nil {
		os.RemoveAll(pg.dir)
		return running{}, err
	}
	return running{
		srv:  server{addr: pg.url(), tier: tierThrowaway, pid: pg.p.pid(), dir: pg.dir},
		stop: func() error { return pg.p.stopAndRemove(pg.dir) },
	}, nil
}

// postgresCluster is a throwaway cluster: a data directory made by initdb
// in a temporary directory, and the server when it runs.
type postgresCluster struct {
	postgres string // the installation's server binary; its tools lie beside it
	cred     *syscall.Credential
	dir      string // temporary directory: data/, postgres.log, sockets
	port     int    // chosen at the first start, kept across restarts
	settings []string
	p        *proc
}

func newPostgresCluster(settings ...string) (*postgresCluster, error) {
	initdb, postgres, err := postgresBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := serverDir("pg", cred)
	if err != nil {
		return nil, err
	}
	init := exec.Command(initdb, "--pgdata="+filepath.Join(dir, "data"), "--username=postgres", "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	init.Dir = dir
	init.SysProcAttr = procAttr(cred, 0)
	if out, err := init.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("%s: %v%s", initdb, err, tailSection("initdb output", string(out)))
	}
	return &postgresCluster{postgres: postgres, cred: cred, dir: dir, settings: settings}, nil
}

func (c *postgresCluster) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// start runs the server: on a free port the first time, on the same port
// after that, so clients can reconnect to the address they had.
func (c *postgresCluster) start() error {
	// PostgreSQL limits a socket path to about 100 bytes; without a socket
	// directory it listens on TCP only, which is all the tests use.
	sockets := c.dir
	if len(c.dir)+len("/.s.PGSQL.65535") >= 100 {
		sockets = ""
	}
	logPath := filepath.Join(c.dir, "postgres.log")
	for attempt := 1; ; attempt++ {
		fixed := c.port != 0
		if !fixed {
			port, err := freePort()
			if err != nil {
				return err
			}
			c.port = port
		}
		args := []string{"-D", filepath.Join(c.dir, "data"), "-p", strconv.Itoa(c.port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + sockets,
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			"-c", "max_connections=200"}
		for _, kv := range c.settings {
			args = append(args, "-c", kv)
		}
		cmd := exec.Command(c.postgres, args...)
		cmd.Dir = c.dir
		// SIGQUIT is PostgreSQL's immediate shutdown: the postmaster takes
		// its backends down with it.
		cmd.SysProcAttr = procAttr(c.cred, syscall.SIGQUIT)
		p, err := launchLoggedAppend(cmd, logPath, syscall.SIGINT) // SIGINT: fast shutdown
		if err != nil {
			return fmt.Errorf("%s: %w", c.postgres, err)
		}
		url := c.url()
		err = p.waitReady(postgresStartTimeout, func(ctx context.Context) error { return pingPostgresCtx(ctx, url) })
		if err == nil {
			c.p = p
			return nil
		}
		p.stop()
		tail := logTail(logPath)
		if !fixed && attempt < 3 && strings.Contains(tail, "already in use") {
			c.port = 0
			continue // lost the port to someone else between choosing and binding it
		}
		return fmt.Errorf("%s on port %d: %v%s", c.postgres, c.port, err, tailSection("server log", tail))
	}
}

func startRedisBinary() (running, error) {
	r, err := newRedisInstance()
	if err != nil {
		return running{}, err
	}
	if err := r.start(); err != nil {
		os.RemoveAll(r.dir)
		return running{}, err
	}
	return running{
		srv:  server{addr: r.addr(), tier: tierThrowaway, pid: r.p.pid(), dir: r.dir},
		stop: func() error { return r.p.stopAndRemove(r.dir) },
	}, nil
}

// redisInstance is a throwaway redis-server with no persistence: a restart
// starts it empty, as a cache-configured server would.
type redisInstance struct {
	bin  string
	dir  string
	port int // chosen at the first start, kept across restarts
	p    *proc
}

func newRedisInstance() (*redisInstance, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("no redis-server on PATH")
	}
	dir, err := serverDir("redis", nil)
	if err != nil {
		return nil, err
	}
	return &redisInstance{bin: bin, dir: dir}, nil
}

func (r *redisInstance) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

func (r *redisInstance) start() error {
	logPath := filepath.Join(r.dir, "redis.log")
	for attempt := 1; ; attempt++ {
		fixed := r.port != 0
		if !fixed {
			port, err := freePort()
			if err != nil {
				return err
			}
			r.port = port
		}
		cmd := exec.Command(r.bin, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", r.dir, "--daemonize", "no")
		cmd.Dir = r.dir
		cmd.SysProcAttr = procAttr(nil, syscall.SIGKILL)
		p, err := launchLoggedAppend(cmd, logPath, syscall.SIGTERM)
		if err != nil {
			return fmt.Errorf("%s: %w", r.bin, err)
		}
		addr := r.addr()
		err = p.waitReady(redisStartTimeout, func(ctx context.Context) error { return pingRedisCtx(ctx, addr) })
		if err == nil {
			r.p = p
			return nil
		}
		p.stop()
		tail := logTail(logPath)
		if !fixed && attempt < 3 && strings.Contains(tail, "already in use") {
			r.port = 0
			continue
		}
		return fmt.Errorf("%s on port %d: %v%s", r.bin, r.port, err, tailSection("server log", tail))
	}
}

// postgresBinaries finds initdb and postgres of one installation: on PATH
// first, then under postgresVersionDirs, highest version first.
func postgresBinaries() (initdb, postgres string, err error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs := []string{filepath.Dir(p)}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(real))
		}
		for _, d := range dirs {
			if pg := filepath.Join(d, "postgres"); isExecutable(pg) {
				return p, pg, nil
			}
		}
	}
	dirs, _ := filepath.Glob(postgresVersionDirs)
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, d := range dirs {
		initdb, postgres := filepath.Join(d, "initdb"), filepath.Join(d, "postgres")
		if isExecutable(initdb) && isExecutable(postgres) {
			return initdb, postgres, nil
		}
	}
	return "", "", fmt.Errorf("no initdb and postgres on PATH or in %s", postgresVersionDirs)
}

// compareVersions compares dotted numeric versions ("9.6" < "15").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// serverCredential returns the user PostgreSQL runs as: nil (this process's
// user) unless this process is root, which PostgreSQL refuses to run as; then
// the postgres system user if there is one, else nobody.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, and there is neither a postgres nor a nobody user to run PostgreSQL as")
}

var sweepOnce sync.Once

// serverDir makes the temporary directory of one throwaway server, owned by
// cred's user when cred is set.
func serverDir(kind string, cred *syscall.Credential) (string, error) {
	sweepOnce.Do(sweepStaleDirs)
	dir, err := os.MkdirTemp("", dirPrefix+kind+"-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// sweepStaleDirs removes the directories of throwaway servers whose test
// binary is gone (killed before Main could clean up).
func sweepStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			os.RemoveAll(dir)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// proc is a server process this test binary started.
type proc struct {
	cmd     *exec.Cmd
	stopSig syscall.Signal
	exited  chan struct{} // closed once the process has exited and been reaped
}

// launchLogged starts cmd with its output going to a fresh file at logPath.
// stopSig asks the server to shut down cleanly.
//
// The parent-death signal (procAttr) is tied to the OS thread that started
// the child, not to the process, so the goroutine that starts it stays locked
// to its thread until the child has exited: that thread cannot end under it.
func launchLogged(cmd *exec.Cmd, logPath string, stopSig syscall.Signal) (*proc, error) {
	return launch(cmd, logPath, os.O_TRUNC, stopSig)
}

// launchLoggedAppend is launchLogged for a server that is restarted: its
// log keeps what the earlier runs wrote.
func launchLoggedAppend(cmd *exec.Cmd, logPath string, stopSig syscall.Signal) (*proc, error) {
	return launch(cmd, logPath, os.O_APPEND, stopSig)
}

func launch(cmd *exec.Cmd, logPath string, mode int, stopSig syscall.Signal) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|mode, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own copy
	cmd.Stdout, cmd.Stderr = logFile, logFile

	p := &proc{cmd: cmd, stopSig: stopSig, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.exited)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// waitReady polls ping until it succeeds, the process exits, or timeout.
func (p *proc) waitReady(timeout time.Duration, ping func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := ping(ctx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited before accepting connections (%v)", p.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections after %v: %w", timeout, err)
		}
	}
}

// stop asks the process to shut down, kills it after stopGrace, and waits
// until it is gone.
func (p *proc) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(p.stopSig)
	grace := time.NewTimer(stopGrace)
	defer grace.Stop()
	select {
	case <-p.exited:
		return nil
	case <-grace.C:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopGrace):
		return fmt.Errorf("process %d did not exit after SIGKILL", p.pid())
	}
}

func (p *proc) stopAndRemove(dir string) error {
	err := p.stop()
	if err != nil {
		return err // leave the directory of a process that may still use it
	}
	return os.RemoveAll(dir)
}

// logTail returns the last lines of a server's log.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return lastLines(string(b), 20)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func tailSection(title, text string) string {
	text = lastLines(text, 20)
	if strings.TrimSpace(text) == "" {
		return ""
	}
	return "\n--- " + title + " (last lines) ---\n" + text + "\n---"
}
