package graph

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-go/baton/internal/printable"
)

// Defaults shared by the processors, the clients and the notifier.
const (
	// DefaultTimeout bounds one request, from sending it to reading the
	// whole response. The engine answers these calls in milliseconds; a
	// request still open after 10 s is treated as failed (a retry for a
	// processor), rather than holding the outbox walk indefinitely.
	DefaultTimeout = 10 * time.Second
	// DefaultBodyExcerpt is how much of a refused request's response body
	// is kept in a StatusError and a park or retry reason: enough for the
	// engine's error message, small enough for a dead letter's error column.
	DefaultBodyExcerpt = 512
	// MaxBodyExcerpt bounds ProcessorOptions.BodyExcerpt.
	MaxBodyExcerpt = 64 << 10
)

// IdempotencyKeyHeader carries the outbox entry id on every lane request.
// Delivery is at least once, so the engine sees a repeat after a crash or a
// leader change; the same key tells it the request was already applied.
const IdempotencyKeyHeader = "Idempotency-Key"

// FencingTokenHeader carries the outbox leader's fencing token, in
// decimal, on every lane request sent under a leader that has one
// (outbox.FencingToken). An engine that fences refuses a token lower than
// the highest it has seen with 409 and this header holding that highest
// token; the processor then reports outbox.ErrFenced instead of parking,
// and the deposed leader steps down. See docs/graph-engine-api.md.
const FencingTokenHeader = "Baton-Fencing-Token"

// The request paths, relative to the engine's base URL. The two lane paths
// are the engine's; the others are baton's contract for them (see
// docs/graph-engine-api.md). Braces mark path segments, which are escaped.
const (
	PathInit        = "/api/v3/graph/resources/init"
	PathMetadata    = "/api/v3/graph/entities/{type}/{id}/metadata"
	PathAuthorize   = "/api/v3/graph/authorize"
	PathDefinitions = "/api/v3/graph/definitions"
	PathAuthorities = "/api/v3/graph/authorities"
	PathProjections = "/api/v3/graph/projections/{subjectType}/{subjectId}"
)

// maxResponseBytes bounds a 2xx body a client decodes. A subject's grants
// are the largest answer; 64 MiB is far beyond any sane projection and still
// stops a misbehaving endpoint from exhausting memory.
const maxResponseBytes = 64 << 20

// drainLimit is how much of an unread body is discarded before closing, so
// the connection can be reused; a larger rest is cheaper to drop with the
// connection.
const drainLimit = 64 << 10

// checkURL checks an engine (or webhook) address: absolute http or
// https, a host, no user information (credentials belong in the client's
// RoundTripper, and URLs end up in logs), no fragment, and a query only when
// allowQuery.
func checkURL(field, s string, allowQuery bool) (*url.URL, error) {
	if s == "" {
		return nil, invalidOptions(field, "is empty; set it to an absolute http or https URL such as https://graph.internal")
	}
	u, err := url.Parse(s)
	if err != nil {
		// Not the whole *url.Error: it repeats the URL, which may hold a
		// secret.
		return nil, invalidOptions(field, "is not a URL: %v", unwrapURLError(err))
	}
	shown := redacted(u)
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, invalidOptions(field, "%q must be an absolute URL with scheme http or https", shown)
	case u.Opaque != "" || u.Host == "":
		return nil, invalidOptions(field, "%q has no host", shown)
	case u.User != nil:
		return nil, invalidOptions(field, "%q carries user information; attach credentials with the http.Client's RoundTripper instead", shown)
	case u.Fragment != "" || strings.Contains(s, "#"):
		return nil, invalidOptions(field, "%q has a fragment; remove it", shown)
	case !allowQuery && (u.RawQuery != "" || u.ForceQuery):
		return nil, invalidOptions(field, "%q has a query; it must be a base address only (request paths are appended to it)", shown)
	}
	return u, nil
}

// redacted is u for an error message: without a password, a query or a
// fragment, any of which may be a secret (the query is shown as "…").
func redacted(u *url.URL) string {
	c := *u
	if c.RawQuery != "" || c.ForceQuery {
		c.RawQuery, c.ForceQuery = "…", false
	}
	c.Fragment, c.RawFragment = "", ""
	return c.Redacted()
}

// parseBaseURL checks an engine address (no query) and returns it as a
// prefix for request paths: without a trailing slash.
func parseBaseURL(field, s string) (string, error) {
	u, err := checkURL(field, s, false)
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(u.String(), "/"), nil
}

// segment escapes one path segment. "." and ".." are escaped too: left
// as they are, a server or proxy that cleans paths would read them as
// "this directory" and "the parent".
func segment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// excerpt reads at most n bytes of body as text for an error message: cut
// at a character boundary, marked when cut, on one line, with every control
// character escaped (the message ends up in a dead letter, which operators
// read on a terminal). It then drains a bounded rest so the connection may
// be reused. The caller closes body.
func excerpt(body io.Reader, n int) string {
	buf, _ := io.ReadAll(io.LimitReader(body, int64(n)+1))
	cut := len(buf) > n
	if cut {
		buf = buf[:n]
		// Drop a character the cut split in two.
		for range utf8.UTFMax - 1 {
			if r, size := utf8.DecodeLastRune(buf); len(buf) == 0 || r != utf8.RuneError || size != 1 {
				break
			}
			buf = buf[:len(buf)-1]
		}
	}
	_, _ = io.CopyN(io.Discard, body, drainLimit)
	s := printable.Line(strings.TrimSpace(strings.ToValidUTF8(string(buf), "\uFFFD")))
	if cut {
		s += " …(cut)"
	}
	return s
}

// drain discards a bounded rest of a body before it is closed, so the
// connection can be reused.
func drain(body io.Reader) { _, _ = io.CopyN(io.Discard, body, drainLimit) }

// checkTimeout rejects a negative timeout.
func checkTimeout(field string, d time.Duration) error {
	if d < 0 {
		return invalidOptions(field, "is %v; it must be positive (zero means DefaultTimeout, %v)", d, DefaultTimeout)
	}
	return nil
}

// requestError describes a request that got no usable answer.
func requestError(method, path string, timeout time.Duration, parentDone bool, err error) string {
	if !parentDone && isTimeout(err) {
		return fmt.Sprintf("%s %s: no response within %v", method, path, timeout)
	}
	return fmt.Sprintf("%s %s: %v", method, path, unwrapURLError(err))
}

func isTimeout(err error) bool {
	t, ok := err.(interface{ Timeout() bool })
	return ok && t.Timeout()
}

// unwrapURLError drops *url.Error's "Post \"https://…\":" prefix: the
// caller already names the method and path, and the base URL is config.
func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

// noRedirects returns a copy of c that answers a redirect with the 3xx
// itself. The engine's API does not redirect; a redirect means something in
// between is misconfigured (plain http to https, a login gateway), and a
// client following a 302 turns a POST into a GET, which a login page may
// well answer 200: a delivery that never happened, counted as delivered.
// The copy shares c's Transport, so credentials and connections are the
// caller's as before.
func noRedirects(c *http.Client) *http.Client {
	cp := *c
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// statusError reads a non-2xx response into a StatusError. A redirect's
// Location goes first in Body, since that is what needs fixing.
func statusError(resp *http.Response, method, path string, n int) *StatusError {
	body := excerpt(resp.Body, n)
	if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode <= 399 {
		body = strings.TrimSpace("redirect to " + printable.Line(loc) + " (not followed) " + body)
	}
	return &StatusError{StatusCode: resp.StatusCode, Body: body, Path: path, Method: method}
}

// setJSONHeaders sets the headers every engine request carries.
func setJSONHeaders(h http.Header, hasBody bool) {
	h.Set("Accept", "application/json")
	if hasBody {
		h.Set("Content-Type", "application/json")
	}
}
