package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// ClientOptions configures AuthorizationClient, DefinitionsClient,
// RegistrationClient and GrantsClient.
type ClientOptions struct {
	// BaseURL is the engine's base address, checked like
	// ProcessorOptions.DeliveryURL. Required.
	BaseURL string
	// Client sends the requests and carries this service's credentials.
	// Required; pass http.DefaultClient explicitly for an engine that needs
	// none. Redirects are not followed: a 3xx is a *StatusError.
	Client *http.Client
	// Timeout bounds each call (default DefaultTimeout), on top of the
	// caller's context.
	Timeout time.Duration
}

// client is what the typed clients share: the checked config and one call.
type client struct {
	base    string
	hc      *http.Client
	timeout time.Duration
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c ClientOptions) withDefaults() ClientOptions {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// validate checks options that have their defaults.
func (c ClientOptions) validate() error {
	if _, err := checkURL("BaseURL", c.BaseURL, false); err != nil {
		return err
	}
	if c.Client == nil {
		return errNoClient
	}
	return checkTimeout("Timeout", c.Timeout)
}

// errNoClient refuses a nil Client, of clients and processors alike.
var errNoClient = invalidOptions("Client", "is nil; pass the *http.Client that carries this service's credentials (http.DefaultClient if the engine needs none)")

func newClient(cfg ClientOptions) (*client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	base, err := parseBaseURL("BaseURL", cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	return &client{base: base, hc: noRedirects(cfg.Client), timeout: cfg.Timeout}, nil
}

// call sends in (when not nil) as JSON and decodes a 2xx body into out
// (when not nil). A non-2xx answer is a *StatusError.
func (c *client) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("baton/graph: encoding the %s %s request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("baton/graph: %s %s: %w", method, path, err)
	}
	setJSONHeaders(req.Header, in != nil)
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil && isTimeout(err) {
			return fmt.Errorf("baton/graph: %s %s: no response within %v: %w", method, path, c.timeout, unwrapURLError(err))
		}
		return fmt.Errorf("baton/graph: %s %s: %w", method, path, unwrapURLError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(resp, method, path, DefaultBodyExcerpt)
	}
	if out == nil {
		drain(resp.Body)
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return fmt.Errorf("baton/graph: %s %s: reading the response: %w", method, path, err)
	}
	if len(b) > maxResponseBytes {
		return invalidResponse("%s %s: the response is larger than %d bytes", method, path, maxResponseBytes)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return invalidResponse("%s %s: the response does not decode: %v", method, path, err)
	}
	return nil
}
