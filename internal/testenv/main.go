package testenv

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

// Main runs the tests of a package that uses servers from this package:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// After the tests it stops the throwaway servers and containers this test
// binary started, then, if the tests passed, fails the run when goroutines
// started by the tests are still running (close your pools, clients and
// loops). It does not return.
func Main(m *testing.M) {
	before := goleak.IgnoreCurrent()
	mainActive.Store(true)
	code := m.Run()
	if err := stopOwned(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping servers: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code == 0 {
		opts := []goleak.Option{before}
		if dockerUsed.Load() {
			opts = append(opts, dockerLeakIgnores()...)
		}
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: goroutines still running after the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// mainActive is set once Main runs: servers this binary starts are stopped
// only by Main, so the throwaway and docker tiers require it.
var mainActive atomic.Bool

// running is a server this test binary started and must stop.
type running struct {
	srv  server
	stop func() error
}

var owned struct {
	sync.Mutex
	list []running
}

// ownedServer starts a server with start and records it so that Main stops
// it at the end of the test binary.
func ownedServer(start func() (running, error)) (server, error) {
	if !mainActive.Load() {
		return server{}, errors.New("servers started for a test binary are stopped by testenv.Main: add func TestMain(m *testing.M) { testenv.Main(m) } to this package's tests")
	}
	r, err := start()
	if err != nil {
		return server{}, err
	}
	owned.Lock()
	owned.list = append(owned.list, r)
	owned.Unlock()
	return r.srv, nil
}

// stopOwned stops every server recorded by ownedServer, newest first.
func stopOwned() error {
	owned.Lock()
	list := owned.list
	owned.list = nil
	owned.Unlock()
	var errs []error
	for i := len(list) - 1; i >= 0; i-- {
		if err := list[i].stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s server at %s: %w", list[i].srv.tier, list[i].srv.addr, err))
		}
	}
	return errors.Join(errs...)
}
