package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/baton-go/baton/internal/cli"
)

// secret is the password in the connection strings below: it must never
// be printed.
const secret = "hunter2-s3cret"

func TestCLI_NeverPrintsADatabasePassword(t *testing.T) {
	t.Setenv(cli.EnvDatabaseURL, "")
	for _, tc := range []struct {
		name string
		conn string
		code int
	}{
		{"URL, bad port", "postgres://app:" + secret + "@db.invalid:notaport/app", exitUsage},
		{"URL, bad parameter", "postgres://app:" + secret + "@db.invalid:5432/app?sslmode=sometimes", exitUsage},
		{"keyword/value, bad port", "host=db.invalid port=notaport user=app password=" + secret, exitUsage},
		{"keyword/value, spaces around =", "host=db.invalid port = notaport user=app password = " + secret, exitUsage},
		{"keyword/value, quoted", "host=db.invalid port=x password='" + secret + " more'", exitUsage},
		{"keyword/value, unterminated quote", "host=db.invalid password='" + secret, exitUsage},
		{"URL, unreachable", "postgres://app:" + secret + "@127.0.0.1:1/app?connect_timeout=2", exitFailure},
		{"keyword/value, unreachable", "host=127.0.0.1 port=1 user=app password = " + secret + " connect_timeout=2", exitFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"leases", "--postgres", tc.conn},
				{"migrate", "--postgres", tc.conn},
				{"demo", "--postgres", tc.conn},
			} {
				r := runCLI(t, args...)
				if strings.Contains(r.stdout+r.stderr, secret) {
					t.Errorf("baton %s printed the password:\nstdout: %s\nstderr: %s", args[0], r.stdout, r.stderr)
				}
				if strings.Contains(r.stderr, "notaport") || strings.Contains(r.stderr, "db.invalid port") {
					t.Errorf("baton %s printed the connection string: %s", args[0], r.stderr)
				}
				if args[0] != "demo" && r.code != tc.code {
					t.Errorf("baton %s: exit status %d, want %d (stderr %q)", args[0], r.code, tc.code, r.stderr)
				}
			}
			t.Setenv(cli.EnvDatabaseURL, tc.conn)
			r := runCLI(t, "outbox", "status")
			if strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("baton outbox status with %s printed the password: %s", cli.EnvDatabaseURL, r.stderr)
			}
		})
	}
}

func TestRedact_HidesEverySecretAndKeepsTheChain(t *testing.T) {
	conn := "postgres://app:" + secret + "@db:5432/app"
	err := cli.Redact(fmt.Errorf("server said: bad login %s for %s: %w", secret, conn, context.DeadlineExceeded), conn, secret, "")
	if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "db:5432") {
		t.Errorf("redacted message %q still shows the secret or the connection string", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Redact broke the error chain: %v", err)
	}
	if cli.Redact(nil, secret) != nil {
		t.Error("Redact(nil) is not nil")
	}
}
