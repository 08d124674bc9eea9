//go:build unix

package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// Cluster is a PostgreSQL cluster of one test's own, started from the
// binaries on this machine in a temporary directory, which the test may
// stop, change with the server's own tools (pg_resetwal) and start again,
// and serve as the source or the target of pg_dump and pg_restore. Unlike
// the shared servers it is never reused: it is stopped and removed when
// the test ends.
type Cluster struct {
	t testing.TB
	c *cluster

	mu  sync.Mutex
	url string
	p   *proc
}

// NewCluster initializes and starts a throwaway cluster for t. It skips
// the test when this machine has no PostgreSQL binaries (fails it when CI
// is set).
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := initCluster()
	if err != nil {
		noCluster(t, err)
	}
	cl := &Cluster{t: t, c: c}
	t.Cleanup(func() {
		if err := cl.Stop(); err != nil {
			t.Errorf("testenv: stopping the cluster in %s: %v", c.dir, err)
			return
		}
		os.RemoveAll(c.dir)
	})
	if err := cl.Start(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return cl
}

// URL reaches the running server as the superuser postgres, database
// postgres. It changes with every Start.
func (c *Cluster) URL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p == nil {
		c.t.Fatal("testenv: the cluster is stopped")
	}
	return c.url
}

// Start starts the server on a free port; it does nothing when it runs.
func (c *Cluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p != nil {
		return nil
	}
	url, p, err := c.c.launch()
	if err != nil {
		return err
	}
	c.url, c.p = url, p
	return nil
}

// Stop shuts the server down cleanly (a fast shutdown, with a checkpoint,
// as pg_resetwal requires); it does nothing when it is stopped.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.p == nil {
		return nil
	}
	err := c.p.stop()
	c.p = nil
	return err
}

// DataDir is the cluster's data directory, for tools that take -D.
func (c *Cluster) DataDir() string { return c.c.data }

// Tool runs one of the installation's programs (pg_resetwal, pg_dump,
// pg_restore, psql, …) with args, as the owner of the data directory, and
// returns its combined output; an error includes that output.
func (c *Cluster) Tool(name string, args ...string) ([]byte, error) {
	out, err := c.c.tool(name, args...)
	if err != nil {
		return out, fmt.Errorf("%s: %w%s", filepath.Join(c.c.bin, name), err, tailSection("output", string(out)))
	}
	return out, nil
}
