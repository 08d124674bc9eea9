package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// EnvLogicalPostgresURL names a PostgreSQL server with wal_level =
// logical for the tests of the outbox's logical source. Unset, those tests
// start a throwaway server from the binaries on this machine.
const EnvLogicalPostgresURL = "BATON_TEST_LOGICAL_POSTGRES_URL"

// LogicalSettings are the settings of a server that the outbox's log can
// be read from: wal_level = logical and room for a slot and a WAL sender
// per test running at once. Pass them to StartPostgresServer for a server
// of a test's own.
var LogicalSettings = []string{
	"wal_level=logical",
	"max_replication_slots=64",
	"max_wal_senders=64",
	"wal_sender_timeout=60s",
}

var logicalLookup struct {
	once sync.Once
	url  string
	err  error
}

// LogicalPostgresURL returns the URL of a server with wal_level = logical:
// EnvLogicalPostgresURL, or one throwaway server per test binary, started
// the first time and stopped by Main. The shared servers run with
// wal_level = replica, so they do not serve. With neither, the test is
// skipped (failed when CI is set) with a message saying how to get one.
func LogicalPostgresURL(t testing.TB) string {
	t.Helper()
	logicalLookup.once.Do(func() {
		if u := os.Getenv(EnvLogicalPostgresURL); u != "" {
			if err := pingPostgres(u); err != nil {
				logicalLookup.err = fmt.Errorf("%s: %w", EnvLogicalPostgresURL, err)
				return
			}
			logicalLookup.url = u
			return
		}
		srv, err := ownedServer(func() (running, error) { return startThrowawayPostgres(LogicalSettings...) })
		logicalLookup.url, logicalLookup.err = srv.addr, err
	})
	if logicalLookup.err != nil {
		unavailable(t, "PostgreSQL with wal_level=logical", logicalLookup.err, EnvLogicalPostgresURL)
	}
	return logicalLookup.url
}

// LogicalPostgres gives the test a schema of its own on the server of
// LogicalPostgresURL, and a pool whose connections use it. Slots and
// publications are the server's and the database's, not the schema's:
// name them per test.
func LogicalPostgres(t testing.TB) *PostgresEnv {
	t.Helper()
	return schemaEnv(t, LogicalPostgresURL(t))
}

// ThrowawayPostgres starts a PostgreSQL server from the binaries on this
// machine, outside any test (the bench module uses it), with settings
// added to its configuration; stop stops it and removes its files. It
// fails when there are no binaries.
func ThrowawayPostgres(settings ...string) (url string, stop func() error, err error) {
	r, err := startThrowawayPostgres(settings...)
	if err != nil {
		return "", nil, err
	}
	return r.srv.addr, r.stop, nil
}
