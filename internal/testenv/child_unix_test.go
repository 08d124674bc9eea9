//go:build unix

package testenv

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// childRoles are the roles this package's test binary runs as a child.
var childRoles = map[string]func([]string) int{
	// sleeper waits for SIGTERM.
	"sleeper": func([]string) int {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		<-ch
		return 0
	},
}

// takeOwned removes the owned server with this pid from the list Main
// stops, and returns it.
func takeOwned(t *testing.T, pid int) running {
	t.Helper()
	owned.Lock()
	defer owned.Unlock()
	for i, r := range owned.list {
		if r.srv.pid == pid {
			owned.list = append(owned.list[:i], owned.list[i+1:]...)
			return r
		}
	}
	t.Fatalf("no owned server with pid %d", pid)
	return running{}
}

func TestStartSharedChild_OutlivesTheTestThatStartedItUntilMainStopsIt(t *testing.T) {
	var c *Child
	t.Run("start", func(t *testing.T) {
		var err error
		if c, err = StartSharedChild("sleeper", "sleeper", nil); err != nil {
			t.Fatal(err)
		}
	})
	// A child of StartChild is killed, and waited for, by its test's
	// cleanup; a shared one is not.
	select {
	case <-c.Exited():
		t.Fatalf("the shared child exited with the test that started it:\n%s", c.Output())
	default:
	}
	r := takeOwned(t, c.Pid())
	if err := r.stop(); err != nil { // what Main does at the end
		t.Fatal(err)
	}
	select {
	case <-c.Exited():
	default:
		t.Fatal("the shared child still runs after its stop returned")
	}
	if _, err := os.Stat(r.srv.dir); !os.IsNotExist(err) {
		t.Errorf("the child's directory %s is still there: %v", r.srv.dir, err)
	}
}
