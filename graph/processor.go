package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

// Defaults for ProcessorOptions.
const (
	// DefaultMaxRetryAfter caps a Retry-After the engine sends with 429 or
	// 503. The whole outbox waits behind the entry, so one header asking
	// for an hour (or a clock-skewed HTTP-date) must not silence every lane
	// that long; asking again after five minutes costs one request.
	DefaultMaxRetryAfter = 5 * time.Minute
	// MinRetryAfter is the shortest pause a Retry-After produces: "0" or a
	// date already past means "now", and one second keeps that from
	// becoming a tight loop against an engine that is shedding load.
	MinRetryAfter = time.Second
)

// ProcessorOptions configures StandardProcessors.
type ProcessorOptions struct {
	// DeliveryURL is the engine's base address, such as
	// https://graph.internal or https://gateway.internal/graph; the lane
	// paths are appended to it. Required: absolute http or https, with a
	// host and no query, fragment or user information.
	DeliveryURL string
	// Client sends the requests. Required, because it carries this
	// service's credentials (a RoundTripper that sets Authorization):
	// without them every entry would answer 401 and stall the outbox. Pass
	// http.DefaultClient explicitly for an engine that needs none.
	// Redirects are not followed (a 3xx is a retry), whatever the client's
	// CheckRedirect says.
	Client *http.Client
	// Timeout bounds each request (default DefaultTimeout). A request that
	// times out is a retry.
	Timeout time.Duration
	// BodyExcerpt is how many bytes of a refused request's response body go
	// into the park or retry reason (default DefaultBodyExcerpt, at most
	// MaxBodyExcerpt). The excerpt is made one line with its control
	// characters escaped ("\u001b"), so a control byte of the body takes
	// six bytes of the reason.
	BodyExcerpt int
	// MaxRetryAfter caps the pause a 429 or 503 Retry-After asks for
	// (default DefaultMaxRetryAfter).
	MaxRetryAfter time.Duration
	// Logger receives refused and failed deliveries. nil discards.
	Logger *slog.Logger
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c ProcessorOptions) withDefaults() ProcessorOptions {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.BodyExcerpt == 0 {
		c.BodyExcerpt = DefaultBodyExcerpt
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks options that have their defaults.
func (c ProcessorOptions) validate() error {
	if _, err := checkURL("DeliveryURL", c.DeliveryURL, false); err != nil {
		return err
	}
	if c.Client == nil {
		return errNoClient
	}
	if err := checkTimeout("Timeout", c.Timeout); err != nil {
		return err
	}
	switch {
	case c.BodyExcerpt < 0 || c.BodyExcerpt > MaxBodyExcerpt:
		return invalidOptions("BodyExcerpt", "is %d; it must be between 1 and %d bytes", c.BodyExcerpt, MaxBodyExcerpt)
	case c.MaxRetryAfter < MinRetryAfter:
		return invalidOptions("MaxRetryAfter", "is %v; it must be at least %v", c.MaxRetryAfter, MinRetryAfter)
	}
	return nil
}

// StandardProcessors returns the processors of LaneInit and LaneMetadata,
// ready for outbox.Config.Processors. cfg is checked here, so a wrong
// DeliveryURL fails at startup instead of parking or stalling entries
// later.
func StandardProcessors(cfg ProcessorOptions) ([]outbox.Processor, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var err error
	if cfg.DeliveryURL, err = parseBaseURL("DeliveryURL", cfg.DeliveryURL); err != nil {
		return nil, err
	}
	cfg.Client = noRedirects(cfg.Client)
	return []outbox.Processor{
		&processor{lane: LaneInit, cfg: cfg, build: buildInit},
		&processor{lane: LaneMetadata, cfg: cfg, build: buildMetadata},
	}, nil
}

// request is one lane delivery: what to send for an entry.
type request struct {
	method, path string
	body         []byte
}

func buildInit(payload []byte) (request, error) {
	p, err := decodeInit(payload)
	if err != nil {
		return request{}, err
	}
	body, err := json.Marshal(p)
	return request{method: http.MethodPost, path: PathInit, body: body}, err
}

func buildMetadata(payload []byte) (request, error) {
	p, err := decodeMetadata(payload)
	if err != nil {
		return request{}, err
	}
	body, err := json.Marshal(metadataBody{Label: p.Label})
	return request{method: http.MethodPut, path: MetadataPath(p.EntityType, p.EntityID), body: body}, err
}

// processor delivers one standard lane over HTTP.
type processor struct {
	lane  string
	cfg   ProcessorOptions
	build func(payload []byte) (request, error)
}

// Lane implements outbox.Processor.
func (p *processor) Lane() string { return p.lane }

// Deliver implements outbox.Processor: in order, one request at a time,
// stopping at the first retry. Every expected failure is an outcome, one
// per entry; the one error is the engine refusing this leader's fencing
// token, which wraps outbox.ErrFenced.
func (p *processor) Deliver(ctx context.Context, run []outbox.Entry) ([]outbox.Outcome, error) {
	out := make([]outbox.Outcome, len(run))
	for i, e := range run {
		if err := ctx.Err(); err != nil {
			notAttempted(out[i:], "not attempted: "+err.Error())
			break
		}
		var err error
		if out[i], err = p.deliverOne(ctx, e); err != nil {
			return nil, err
		}
		if out[i].Kind == outbox.KindRetry {
			notAttempted(out[i+1:], "not attempted")
			break
		}
	}
	return out, nil
}

func notAttempted(out []outbox.Outcome, reason string) {
	for i := range out {
		out[i] = outbox.Retry(reason)
	}
}

func (p *processor) deliverOne(ctx context.Context, e outbox.Entry) (outbox.Outcome, error) {
	req, err := p.build(e.Payload)
	if err != nil {
		// It can never succeed as it is: only a requeue of a corrected
		// payload can.
		return outbox.Park(err.Error()), nil
	}
	rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(rctx, req.method, p.cfg.DeliveryURL+req.path, bytes.NewReader(req.body))
	if err != nil {
		// Only an entity type or id could make the URL invalid, and both
		// are escaped; treat it as a payload the engine cannot take.
		return outbox.Park(fmt.Sprintf("%s %s: %v", req.method, req.path, err)), nil
	}
	setJSONHeaders(hr.Header, true)
	hr.Header.Set(IdempotencyKeyHeader, e.ID.String())
	token, fenced := outbox.FencingToken(ctx)
	if fenced {
		hr.Header.Set(FencingTokenHeader, strconv.FormatUint(token, 10))
	}

	resp, err := p.cfg.Client.Do(hr)
	if err != nil {
		reason := requestError(req.method, req.path, p.cfg.Timeout, ctx.Err() != nil, err)
		p.cfg.Logger.Warn("graph: delivery failed; will retry", "lane", p.lane, "id", e.ID, "reason", reason)
		return outbox.Retry(reason), nil
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		drain(resp.Body)
		return outbox.Delivered(), nil
	}
	se := statusError(resp, req.method, req.path, p.cfg.BodyExcerpt)
	if newer, ok := refusedToken(resp, token); fenced && ok {
		p.cfg.Logger.Warn("graph: the engine refused this leader's fencing token", "lane", p.lane, "id", e.ID, "token", token, "engine_has", newer)
		return outbox.Outcome{}, fmt.Errorf("baton/graph: %s %s: the engine has seen fencing token %d, above this leader's %d: %w",
			req.method, req.path, newer, token, outbox.ErrFenced)
	}
	o := p.outcome(resp, se)
	p.cfg.Logger.Warn("graph: delivery refused", "lane", p.lane, "id", e.ID, "status", resp.StatusCode, "outcome", o.Kind, "reason", o.Reason)
	return o, nil
}

// refusedToken reports a 409 that refuses a fencing token: it carries
// FencingTokenHeader with a token above ours, the highest the engine saw.
func refusedToken(resp *http.Response, ours uint64) (newer uint64, ok bool) {
	if resp.StatusCode != http.StatusConflict {
		return 0, false
	}
	newer, err := strconv.ParseUint(resp.Header.Get(FencingTokenHeader), 10, 64)
	return newer, err == nil && newer > ours
}

// outcome maps a non-2xx answer to an outcome; see the package doc's table.
func (p *processor) outcome(resp *http.Response, se *StatusError) outbox.Outcome {
	reason := strings.TrimPrefix(se.Error(), "baton/graph: ")
	switch resp.StatusCode {
	case http.StatusBadRequest, http.StatusConflict:
		return outbox.Park(reason)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now(), p.cfg.MaxRetryAfter); ok {
			return outbox.RetryAfter(reason, d)
		}
	}
	return outbox.Retry(reason)
}

// parseRetryAfter reads a Retry-After value, delay-seconds or an HTTP-date,
// as a pause from now, clamped to [MinRetryAfter, ceiling]. ok is false when
// the header is absent or malformed; the driver's ErrorDelay then applies.
func parseRetryAfter(v string, now time.Time, ceiling time.Duration) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n > uint64(ceiling/time.Second) {
			return ceiling, true // more digits than a uint64 holds is "long"
		}
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	} else {
		return 0, false
	}
	return min(max(d, MinRetryAfter), ceiling), true
}
