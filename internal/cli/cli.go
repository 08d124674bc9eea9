// Package cli holds what the commands share (the baton command's parts,
// the demo, and the nested modules' commands): running a command tree with
// its exit statuses, the error that means bad input (exit status 2) and the
// one that means interrupted (130), connecting to PostgreSQL without ever
// printing a password, and how durations and table cells are printed.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// UsageError is bad input: a flag, an argument, an id, a schema that does
// not hold baton's tables. It exits 2, with its message on one line.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Usagef is a UsageError with the message formatted, on one line.
func Usagef(format string, args ...any) error {
	return &UsageError{msg: OneLine(fmt.Sprintf(format, args...))}
}

// ErrInterrupted is returned when the context ended (Ctrl-C, SIGTERM).
var ErrInterrupted = errors.New("interrupted")

// OneLine folds a message onto one line.
func OneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// Message is err's message on one line, each part said once. A driver's
// message may span lines, one per attempt, and repeat itself: pgx tries a
// host with TLS and then without, and reports both identical dial errors.
// A line equal to the end of one already kept is dropped; the lines left
// are joined with "; " (or a space after a line ending in a colon, which
// introduces the next).
func Message(err error) string {
	var kept []string
	for _, l := range strings.Split(err.Error(), "\n") {
		l = OneLine(l)
		if l == "" || slices.ContainsFunc(kept, func(k string) bool { return strings.HasSuffix(k, l) }) {
			continue
		}
		kept = append(kept, l)
	}
	var b strings.Builder
	for i, l := range kept {
		if i > 0 {
			if strings.HasSuffix(kept[i-1], ":") {
				b.WriteString(" ")
			} else {
				b.WriteString("; ")
			}
		}
		b.WriteString(l)
	}
	return b.String()
}

// EnvDatabaseURL is read when --postgres is not given.
const EnvDatabaseURL = "BATON_DATABASE_URL"

// ConnectTimeout bounds connecting and the first round trip.
const ConnectTimeout = 10 * time.Second

// OpenPool connects to the database named by --postgres or
// BATON_DATABASE_URL. A missing or malformed URL is a usage error; a server
// that does not answer is a failure.
func OpenPool(ctx context.Context, flagURL, flagName string) (*pgxpool.Pool, error) {
	url, source := flagURL, flagName
	if url == "" {
		url, source = os.Getenv(EnvDatabaseURL), EnvDatabaseURL
	}
	if url == "" {
		return nil, Usagef("no database given: pass %s URL or set %s", flagName, EnvDatabaseURL)
	}
	cfg, err := ParseConnString(url, source)
	if err != nil {
		return nil, err
	}
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "baton-cli"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, Usagef("%s: %v", source, Redact(err, url, cfg.ConnConfig.Password))
	}
	pctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, ErrInterrupted
		}
		return nil, fmt.Errorf("cannot connect to PostgreSQL at %s:%d (database %q): %w",
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, Redact(err, url, cfg.ConnConfig.Password))
	}
	return pool, nil
}

// ParseConnString parses a PostgreSQL connection string, a URL or
// keyword/value pairs. A bad one is a usage error that shows neither the
// string nor the driver's message about it: both may hold the password,
// and pgx masks it in some spellings only ("password = x", with spaces,
// passes its redaction).
func ParseConnString(conn, source string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(conn)
	if err != nil {
		return nil, Usagef("%s: not a valid PostgreSQL connection string; want a URL such as "+
			"postgres://user@host:5432/db or keywords such as \"host=db port=5432 dbname=app\" "+
			"(the value and the parser's message are not shown: they may hold a password)", source)
	}
	return cfg, nil
}

// redactedError is an error whose message has the connection string and
// the password taken out; errors.Is and errors.As still see the original.
type redactedError struct {
	err error
	msg string
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Redact hides every non-empty secret in err's message. Driver errors are
// not known to quote the connection string or the password, but a message
// that did would reach the operator's terminal and their logs.
func Redact(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return &redactedError{err: err, msg: msg}
}

// Cut shortens s to n runes for a table cell.
func Cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// FormatDuration prints d rounded for people: 1.52s, 350ms.
func FormatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + FormatDuration(-d)
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	default:
		return d.Round(time.Second).String()
	}
}
