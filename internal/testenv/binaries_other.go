//go:build !unix

package testenv

import (
	"errors"
	"testing"
)

var errNoThrowaway = errors.New("throwaway servers are only started on Unix systems")

func startPostgresBinaries() (running, error) { return running{}, errNoThrowaway }

func startRedisBinary() (running, error) { return running{}, errNoThrowaway }

// Cluster is a throwaway PostgreSQL cluster; only on Unix systems.
type Cluster struct{}

// NewCluster skips the test: throwaway clusters need a Unix system.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	noCluster(t, errNoThrowaway)
	return nil
}

// URL is never reached.
func (c *Cluster) URL() string { return "" }

// Start is never reached.
func (c *Cluster) Start() error { return errNoThrowaway }

// Stop is never reached.
func (c *Cluster) Stop() error { return errNoThrowaway }

// DataDir is never reached.
func (c *Cluster) DataDir() string { return "" }

// Tool is never reached.
func (c *Cluster) Tool(string, ...string) ([]byte, error) { return nil, errNoThrowaway }
