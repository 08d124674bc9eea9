//go:build unix

package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

// EnvChild names the child role a re-executed test binary runs; see
// StartChild and RunChild.
const EnvChild = "BATON_TEST_CHILD"

// RunChild makes a test binary usable as its own child process. Call it
// first in TestMain: in a process started by StartChild it runs the role's
// function with the child's flags (the arguments after "--") and exits with
// the code it returns; in any other process it returns at once.
//
//	func TestMain(m *testing.M) {
//		testenv.RunChild(map[string]func([]string) int{"holder": holderMain})
//		testenv.Main(m)
//	}
func RunChild(roles map[string]func(args []string) int) {
	role, ok := os.LookupEnv(EnvChild)
	if !ok {
		return
	}
	run, ok := roles[role]
	if !ok {
		fmt.Fprintf(os.Stderr, "testenv: no child role %q in this test binary\n", role)
		os.Exit(2)
	}
	var args []string
	if i := slices.Index(os.Args, "--"); i >= 0 {
		args = os.Args[i+1:]
	}
	os.Exit(run(args))
}

// Child is a copy of the test binary running one role, which the test can
// signal by PID. It is killed, if still running, when the test ends, and it
// dies with the test binary (parent-death signal on Linux).
type Child struct {
	Name    string
	p       *proc
	logPath string
}

// StartChild starts the test binary again as role, with args as its flags
// and env added to its environment. Its output goes to a log file, which
// the test prints when it fails.
func StartChild(t testing.TB, name, role string, env []string, args ...string) *Child {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatalf("testenv: child %s: %v", name, err)
	}
	logPath := filepath.Join(t.TempDir(), name+".log")
	cmd := exec.Command(bin, append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(append(os.Environ(), EnvChild+"="+role), env...)
	cmd.SysProcAttr = procAttr(nil, syscall.SIGKILL)
	p, err := launchLogged(cmd, logPath, syscall.SIGTERM)
	if err != nil {
		t.Fatalf("testenv: child %s: %v", name, err)
	}
	c := &Child{Name: name, p: p, logPath: logPath}
	t.Cleanup(func() {
		c.Signal(syscall.SIGKILL)
		<-p.exited
		if out := c.Output(); t.Failed() && out != "" {
			t.Logf("--- child %s (pid %d) output ---\n%s", name, c.Pid(), out)
		}
	})
	return c
}

// StartSharedChild is StartChild for a child that every test of the binary
// shares, such as a server: Main stops it (SIGTERM, then SIGKILL after a
// grace period) once the tests are done, and it dies with the test binary.
// Its output goes to a log file that Output reads.
func StartSharedChild(name, role string, env []string, args ...string) (*Child, error) {
	var c *Child
	_, err := ownedServer(func() (running, error) {
		bin, err := os.Executable()
		if err != nil {
			return running{}, err
		}
		dir, err := os.MkdirTemp("", "baton-child-")
		if err != nil {
			return running{}, err
		}
		logPath := filepath.Join(dir, name+".log")
		cmd := exec.Command(bin, append([]string{"-test.run=^$", "--"}, args...)...)
		cmd.Env = append(append(os.Environ(), EnvChild+"="+role), env...)
		cmd.SysProcAttr = procAttr(nil, syscall.SIGKILL)
		p, err := launchLogged(cmd, logPath, syscall.SIGTERM)
		if err != nil {
			os.RemoveAll(dir)
			return running{}, err
		}
		c = &Child{Name: name, p: p, logPath: logPath}
		return running{
			srv:  server{addr: name, tier: "child", pid: p.pid(), dir: dir},
			stop: func() error { return p.stopAndRemove(dir) },
		}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("testenv: child %s: %w", name, err)
	}
	return c, nil
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.p.pid() }

// Signal sends sig to the child; a child that has exited is not an error.
func (c *Child) Signal(sig syscall.Signal) {
	_ = syscall.Kill(c.Pid(), sig)
}

// Kill is kill -9: the child dies with no chance to clean up.
func (c *Child) Kill() { c.Signal(syscall.SIGKILL) }

// Pause is SIGSTOP: the child freezes, its connections stay open.
func (c *Child) Pause() { c.Signal(syscall.SIGSTOP) }

// Resume is SIGCONT after Pause.
func (c *Child) Resume() { c.Signal(syscall.SIGCONT) }

// Terminate is SIGTERM: the child is asked to shut down cleanly.
func (c *Child) Terminate() { c.Signal(syscall.SIGTERM) }

// Exited is closed once the child has exited and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.p.exited }

// Wait waits up to timeout for the child to exit and returns its exit code
// (-1 when it was ended by a signal), or an error when it is still running.
func (c *Child) Wait(timeout time.Duration) (int, error) {
	select {
	case <-c.p.exited:
		return c.p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return 0, fmt.Errorf("child %s (pid %d) still running after %v", c.Name, c.Pid(), timeout)
	}
}

// Output is what the child has written so far.
func (c *Child) Output() string {
	b, _ := os.ReadFile(c.logPath)
	return string(b)
}
