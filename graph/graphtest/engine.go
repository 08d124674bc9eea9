// Package graphtest is a fake graph engine on net/http/httptest, for tests
// and demos of package graph and of anything built on it.
//
// It serves every path of the engine contract (graph.PathInit and the
// others), keeps what it is told in memory, and answers the rest from it:
// authorize from the grants and definitions a test set; projections from
// those grants. It behaves like a well-behaved engine, including
// idempotency by IdempotencyKeyHeader, until a test injects faults: status
// sequences, latency, Retry-After values and dropped connections, per path.
//
// Every method is safe for concurrent use. Close (or the test's cleanup,
// with New) stops the server and every request it is holding.
package graphtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
)

// The paths the engine serves, as used by Fail, Inject, FaultFunc,
// SetLatency, MaxInFlight and Request.Route. They are the graph package's
// path templates: PathMetadata stands for every entity's metadata path.
const (
	PathInit        = graph.PathInit
	PathMetadata    = graph.PathMetadata
	PathAuthorize   = graph.PathAuthorize
	PathDefinitions = graph.PathDefinitions
	PathAuthorities = graph.PathAuthorities
	PathProjections = graph.PathProjections
)

// maxBody bounds a request body the engine reads.
const maxBody = 8 << 20

// Delivery is one lane request that took effect: the first request with
// its idempotency key that the engine accepted.
type Delivery struct {
	// Lane is graph.LaneInit or graph.LaneMetadata.
	Lane string
	// Path is the request path as sent (escaped).
	Path string
	// IdempotencyKey is the request's IdempotencyKeyHeader, and EntryID
	// the same key read as an outbox id (zero when it is not a UUID).
	IdempotencyKey string
	EntryID        outbox.ID
	// FencingToken is the request's graph.FencingTokenHeader: the token of
	// the outbox leader that sent it, 0 when it carried none.
	FencingToken uint64
	// Payload is the lane payload as the producer enqueued it: the init
	// body, or the metadata entity type, id (from the path) and label.
	Payload json.RawMessage
	// At is when the engine applied it.
	At time.Time
}

// Request is any request the engine received, including duplicates,
// refusals, injected faults and dropped connections.
type Request struct {
	Method string
	// Path is the request path as sent (escaped).
	Path string
	// Route is the Path constant the request matched, or "" for none.
	Route          string
	IdempotencyKey string
	// FencingToken is the graph.FencingTokenHeader it carried, 0 for none
	// (or one that is not a token).
	FencingToken uint64
	Header       http.Header
	Body         []byte
	// Status is the status answered; 0 when the connection was dropped or
	// the client gave up first.
	Status int
	// Duplicate marks a lane request whose idempotency key had already
	// taken effect: acknowledged, not applied again.
	Duplicate bool
	// Dropped marks a connection the engine closed without answering.
	Dropped bool
	// Start and End bound the engine's handling, latency included.
	Start, End time.Time
}

// Fault is what the engine does to one request instead of handling it
// normally.
type Fault struct {
	// Latency is a wait before anything else; the request is then handled
	// normally unless another field says otherwise. A client that gives
	// up during the wait leaves no effect.
	Latency time.Duration
	// Drop closes the connection without an answer.
	Drop bool
	// Status answers with this status (and Body, and RetryAfter as the
	// Retry-After header) without handling the request. 0: handle it.
	Status     int
	Body       string
	RetryAfter string
}

// Engine is a fake graph engine. Create it with New or NewEngine.
type Engine struct {
	srv     *httptest.Server
	mux     *http.ServeMux
	closing chan struct{}
	once    sync.Once

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced at every new delivery
	deliveries  []Delivery
	requests    []Request
	applied     map[string]bool // idempotency keys that took effect
	highest     uint64          // the highest fencing token a lane request carried
	queued      map[string][]Fault
	faultFuncs  map[string]func(*http.Request) (Fault, bool)
	latency     map[string]time.Duration
	inFlight    map[string]int
	maxInFlight map[string]int
	bearer      string
	defs        graph.Definitions
	grants      map[[2]string][]graph.Grant
	resources   map[[2]string]graph.InitPayload
	labels      map[[2]string]string
	authorities map[string]string
}

// New starts an engine that closes when the test ends.
func New(t testing.TB) *Engine {
	t.Helper()
	e, err := NewEngine()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// NewEngine starts an engine on a loopback port of its own; Close stops
// it. It fails when no port can be had.
func NewEngine() (*Engine, error) {
	e := &Engine{
		mux:         http.NewServeMux(),
		closing:     make(chan struct{}),
		changed:     make(chan struct{}),
		applied:     map[string]bool{},
		queued:      map[string][]Fault{},
		faultFuncs:  map[string]func(*http.Request) (Fault, bool){},
		latency:     map[string]time.Duration{},
		inFlight:    map[string]int{},
		maxInFlight: map[string]int{},
		grants:      map[[2]string][]graph.Grant{},
		resources:   map[[2]string]graph.InitPayload{},
		labels:      map[[2]string]string{},
		authorities: map[string]string{},
	}
	e.mux.HandleFunc("POST "+PathInit, e.handleInit)
	e.mux.HandleFunc("PUT "+PathMetadata, e.handleMetadata)
	e.mux.HandleFunc("POST "+PathAuthorize, e.handleAuthorize)
	e.mux.HandleFunc("GET "+PathDefinitions, e.handleDefinitions)
	e.mux.HandleFunc("POST "+PathAuthorities, e.handleAuthorities)
	e.mux.HandleFunc("GET "+PathProjections, e.handleProjections)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("baton/graphtest: NewEngine: %w", err)
	}
	// httptest.NewServer would panic where no port can be had.
	e.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(e.serve)}}
	e.srv.Start()
	return e, nil
}

// URL is the engine's base URL, for graph.ProcessorOptions.DeliveryURL and
// graph.ClientOptions.BaseURL.
func (e *Engine) URL() string { return e.srv.URL }

// Client is an *http.Client for the engine whose connections Close closes.
func (e *Engine) Client() *http.Client { return e.srv.Client() }

// Close stops the engine: requests it holds (latency) end at once, and
// Close returns when every handler has returned. Calling it again does
// nothing.
func (e *Engine) Close() {
	e.once.Do(func() {
		close(e.closing)
		e.srv.Close()
	})
}

// RequireBearer makes every request without "Authorization: Bearer token"
// answer 401, as an engine does for a service that attached no
// credentials. An empty token turns the check off.
func (e *Engine) RequireBearer(token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.bearer = token
}

// Fail queues statuses for path: each of the next requests to it is
// answered with the next status, without being handled.
func (e *Engine) Fail(path string, statuses ...int) {
	faults := make([]Fault, len(statuses))
	for i, s := range statuses {
		faults[i] = Fault{Status: s}
	}
	e.Inject(path, faults...)
}

// Inject queues faults for path, one per request, after any already
// queued. A request with no queued fault asks the FaultFunc, if any.
//
// A Go client resends a request that carries an Idempotency-Key on another
// connection when a reused connection is dropped before any answer, so a
// queued Drop may be absorbed by that resend (which then takes the next
// queued fault). To make a client see the failure, drop every request with
// FaultFunc.
func (e *Engine) Inject(path string, faults ...Fault) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queued[path] = append(e.queued[path], faults...)
}

// FaultFunc sets f to decide the fault of every request to path that has
// no queued fault; f returns false for "handle normally". nil removes it.
// f runs on the request's goroutine, without the engine's lock.
func (e *Engine) FaultFunc(path string, f func(r *http.Request) (Fault, bool)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f == nil {
		delete(e.faultFuncs, path)
	} else {
		e.faultFuncs[path] = f
	}
}

// SetLatency delays every request to path by d (on top of a fault's own
// Latency). 0 removes it.
func (e *Engine) SetLatency(path string, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.latency[path] = d
}

// ClearFaults removes every queued fault, FaultFunc and latency.
func (e *Engine) ClearFaults() {
	e.mu.Lock()
	defer e.mu.Unlock()
	clear(e.queued)
	clear(e.faultFuncs)
	clear(e.latency)
}

// SetDefinitions sets the model served at PathDefinitions and used by
// authorize. It panics when d is invalid (graph.Definitions.Validate): a
// test that sets an impossible model has a bug.
func (e *Engine) SetDefinitions(d graph.Definitions) {
	if err := d.Validate(); err != nil {
		panic("graphtest: SetDefinitions: " + err.Error())
	}
	b, _ := json.Marshal(d) // a deep copy, never shared with the test
	var cp graph.Definitions
	_ = json.Unmarshal(b, &cp)
	// Lists are served as [], never null, as the contract shows them.
	for i := range cp.EntityTypes {
		t := &cp.EntityTypes[i]
		if t.Relations == nil {
			t.Relations = []graph.RelationDefinition{}
		}
		for j := range t.Relations {
			if t.Relations[j].SubjectTypes == nil {
				t.Relations[j].SubjectTypes = []string{}
			}
		}
		if t.Permissions == nil {
			t.Permissions = []graph.Permission{}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.defs = cp
}

// SetGrants sets everything the subject may do, replacing what it had; the
// engine serves it at PathProjections and answers authorize from it.
func (e *Engine) SetGrants(subjectType, subjectID string, grants []graph.Grant) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.grants[[2]string{subjectType, subjectID}] = append([]graph.Grant(nil), grants...)
}

// Deliveries returns the lane requests that took effect, in arrival order.
func (e *Engine) Deliveries() []Delivery {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Delivery(nil), e.deliveries...)
}

// Requests returns every request received, duplicates and faults
// included, in the order the engine finished them.
func (e *Engine) Requests() []Request {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Request(nil), e.requests...)
}

// RequestsTo returns the requests whose Route is path.
func (e *Engine) RequestsTo(path string) []Request {
	var out []Request
	for _, r := range e.Requests() {
		if r.Route == path {
			out = append(out, r)
		}
	}
	return out
}

// MaxInFlight is the most requests to path the engine was handling at
// once. A processor that delivers a run one request at a time keeps it at 1.
func (e *Engine) MaxInFlight(path string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.maxInFlight[path]
}

// WaitDeliveries waits until at least n deliveries took effect and returns
// them, or fails after timeout (or when the engine closes) with what there
// was.
func (e *Engine) WaitDeliveries(n int, timeout time.Duration) ([]Delivery, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		e.mu.Lock()
		got, ch := len(e.deliveries), e.changed
		e.mu.Unlock()
		if got >= n {
			return e.Deliveries(), nil
		}
		select {
		case <-ch:
		case <-t.C:
			return e.Deliveries(), fmt.Errorf("graphtest: %d of %d deliveries after %v", got, n, timeout)
		case <-e.closing:
			return e.Deliveries(), fmt.Errorf("graphtest: the engine closed with %d of %d deliveries", got, n)
		}
	}
}

// HighestFencingToken is the highest graph.FencingTokenHeader a lane
// request that took effect carried: lane requests with a lower one are
// refused with 409, so no delivery by a deposed outbox leader takes
// effect after its successor's first. 0 until a request carried one.
func (e *Engine) HighestFencingToken() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.highest
}

// Resource returns the resource a graph.init delivery created.
func (e *Engine) Resource(resourceType, resourceID string) (graph.InitPayload, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.resources[[2]string{resourceType, resourceID}]
	return p, ok
}

// Label returns the label a graph.metadata delivery set.
func (e *Engine) Label(entityType, entityID string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l, ok := e.labels[[2]string{entityType, entityID}]
	return l, ok
}

// Authorities maps each registered entity type to its service.
func (e *Engine) Authorities() map[string]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]string, len(e.authorities))
	for k, v := range e.authorities {
		out[k] = v
	}
	return out
}

// info is a request's record, filled in as it is handled.
type info struct{ rec *Request }

type infoKey struct{}

// serve records the request, applies faults and latency, checks the
// bearer token, and hands the rest to the routes.
func (e *Engine) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
	_, pattern := e.mux.Handler(r)
	route := ""
	if _, p, ok := strings.Cut(pattern, " "); ok {
		route = p
	}
	rec := &Request{
		Method:         r.Method,
		Path:           r.URL.EscapedPath(),
		Route:          route,
		IdempotencyKey: r.Header.Get(graph.IdempotencyKeyHeader),
		FencingToken:   fencingToken(r),
		Header:         r.Header.Clone(),
		Body:           body,
		Start:          time.Now(),
	}

	e.mu.Lock()
	e.inFlight[route]++
	e.maxInFlight[route] = max(e.maxInFlight[route], e.inFlight[route])
	fault, faulted := e.nextFault(route)
	ff := e.faultFuncs[route]
	latency := e.latency[route]
	bearer := e.bearer
	e.mu.Unlock()
	// The record is complete before the client can see the answer: the
	// server sends a buffered response only after the handler returns, and
	// a dropped connection is closed after finish.
	finished := false
	finish := func() {
		if finished {
			return
		}
		finished = true
		rec.End = time.Now()
		e.mu.Lock()
		e.inFlight[route]--
		e.requests = append(e.requests, *rec)
		e.mu.Unlock()
	}
	defer finish()
	if !faulted && ff != nil {
		fault, faulted = ff(r)
	}
	if !faulted {
		fault = Fault{}
	}

	if !e.wait(r.Context(), latency+fault.Latency) {
		return // the client gave up or the engine is closing: no effect
	}
	switch {
	case fault.Drop:
		rec.Dropped = true
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				finish()
				_ = conn.Close()
				return
			}
		}
		finish()
		panic(http.ErrAbortHandler) // the server closes the connection
	case fault.Status != 0:
		if fault.RetryAfter != "" {
			w.Header().Set("Retry-After", fault.RetryAfter)
		}
		rec.Status = fault.Status
		w.WriteHeader(fault.Status)
		_, _ = io.WriteString(w, fault.Body)
		return
	case bearer != "" && r.Header.Get("Authorization") != "Bearer "+bearer:
		rec.Status = http.StatusUnauthorized
		writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
		return
	}

	r.Body = io.NopCloser(bytes.NewReader(body))
	r = r.WithContext(context.WithValue(r.Context(), infoKey{}, &info{rec: rec}))
	sw := &statusWriter{ResponseWriter: w}
	e.mux.ServeHTTP(sw, r)
	rec.Status = sw.status()
}

// nextFault pops path's next queued fault. Called with e.mu held.
func (e *Engine) nextFault(path string) (Fault, bool) {
	q := e.queued[path]
	if len(q) == 0 {
		return Fault{}, false
	}
	f := q[0]
	if len(q) == 1 {
		delete(e.queued, path)
	} else {
		e.queued[path] = q[1:]
	}
	return f, true
}

// wait sleeps d unless the request or the engine ends first (false).
func (e *Engine) wait(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-e.closing:
	}
	return false
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// errorBody is the engine's error answer.
type errorBody struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, errorBody{Error: fmt.Sprintf(format, args...)})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func requestInfo(r *http.Request) *info {
	i, _ := r.Context().Value(infoKey{}).(*info)
	if i == nil {
		i = &info{rec: &Request{}}
	}
	return i
}
