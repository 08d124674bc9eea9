package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
)

// processors returns the init and metadata processors for the engine.
func processors(t *testing.T, e *graphtest.Engine, edit ...func(*graph.ProcessorOptions)) (initP, metaP outbox.Processor) {
	t.Helper()
	cfg := graph.ProcessorOptions{DeliveryURL: e.URL(), Client: e.Client()}
	for _, f := range edit {
		f(&cfg)
	}
	procs, err := graph.StandardProcessors(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) != 2 || procs[0].Lane() != graph.LaneInit || procs[1].Lane() != graph.LaneMetadata {
		t.Fatalf("StandardProcessors returned lanes %v; want [%s %s]", lanes(procs), graph.LaneInit, graph.LaneMetadata)
	}
	return procs[0], procs[1]
}

func lanes(procs []outbox.Processor) []string {
	var out []string
	for _, p := range procs {
		out = append(out, p.Lane())
	}
	return out
}

func initEntry(t *testing.T, resourceID string) outbox.Entry {
	t.Helper()
	b, err := json.Marshal(graph.InitPayload{
		ResourceType: "device",
		ResourceID:   resourceID,
		Relations:    []graph.Relation{{Relation: "owner", SubjectType: "user", SubjectID: "u1"}},
		RequestedBy:  "u1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return outbox.Entry{ID: outbox.NewID(), Lane: graph.LaneInit, Payload: b, CreatedAt: time.Now()}
}

func metadataEntry(t *testing.T, entityType, entityID, label string) outbox.Entry {
	t.Helper()
	b, err := json.Marshal(graph.MetadataPayload{EntityType: entityType, EntityID: entityID, Label: label})
	if err != nil {
		t.Fatal(err)
	}
	return outbox.Entry{ID: outbox.NewID(), Lane: graph.LaneMetadata, Payload: b, CreatedAt: time.Now()}
}

func deliver(t *testing.T, p outbox.Processor, run ...outbox.Entry) []outbox.Outcome {
	t.Helper()
	out, err := p.Deliver(context.Background(), run)
	if err != nil {
		t.Fatalf("Deliver returned an error (it must return outcomes): %v", err)
	}
	if len(out) != len(run) {
		t.Fatalf("Deliver returned %d outcomes for %d entries", len(out), len(run))
	}
	return out
}

func deliverOne(t *testing.T, p outbox.Processor, e outbox.Entry) outbox.Outcome {
	t.Helper()
	return deliver(t, p, e)[0]
}

func wantKind(t *testing.T, o outbox.Outcome, k outbox.OutcomeKind) {
	t.Helper()
	if o.Kind != k {
		t.Fatalf("outcome %v (%q); want %v", o.Kind, o.Reason, k)
	}
}

func TestProcessor_DeliversBothLanesOn2xx(t *testing.T) {
	e := graphtest.New(t)
	initP, metaP := processors(t, e)

	wantKind(t, deliverOne(t, initP, initEntry(t, "d1")), outbox.KindDelivered)
	wantKind(t, deliverOne(t, metaP, metadataEntry(t, "device", "d1", "Boiler room")), outbox.KindDelivered)

	if p, ok := e.Resource("device", "d1"); !ok || p.RequestedBy != "u1" || len(p.Relations) != 1 {
		t.Errorf("engine resource = %+v, %v; want device d1 with one relation, requested by u1", p, ok)
	}
	if l, _ := e.Label("device", "d1"); l != "Boiler room" {
		t.Errorf("engine label = %q; want %q", l, "Boiler room")
	}
	reqs := e.Requests()
	if len(reqs) != 2 || reqs[0].Method != http.MethodPost || reqs[0].Path != graph.PathInit ||
		reqs[1].Method != http.MethodPut || reqs[1].Path != "/api/v3/graph/entities/device/d1/metadata" {
		t.Fatalf("requests = %+v", reqs)
	}
	if got := string(reqs[1].Body); got != `{"label":"Boiler room"}` {
		t.Errorf("metadata body = %s; want {\"label\":\"Boiler room\"}", got)
	}
	for _, r := range reqs {
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s Content-Type = %q; want application/json", r.Path, ct)
		}
	}
}

func TestProcessor_DeliversOnEvery2xxStatus(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	for _, status := range []int{200, 201, 202, 204, 299} {
		e.Fail(graphtest.PathInit, status)
		if o := deliverOne(t, initP, initEntry(t, "d1")); o.Kind != outbox.KindDelivered {
			t.Errorf("status %d: outcome %v (%q); want delivered", status, o.Kind, o.Reason)
		}
	}
}

func TestProcessor_SendsEntryIDAsIdempotencyKey(t *testing.T) {
	e := graphtest.New(t)
	initP, metaP := processors(t, e)
	in, md := initEntry(t, "d1"), metadataEntry(t, "device", "d1", "x")
	deliver(t, initP, in)
	deliver(t, metaP, md)

	reqs := e.Requests()
	for i, want := range []outbox.ID{in.ID, md.ID} {
		if got := reqs[i].Header.Get(graph.IdempotencyKeyHeader); got != want.String() {
			t.Errorf("request %d %s = %q; want the entry id %s", i, graph.IdempotencyKeyHeader, got, want)
		}
	}
	ds := e.Deliveries()
	if len(ds) != 2 || ds[0].EntryID != in.ID || ds[1].EntryID != md.ID {
		t.Errorf("deliveries = %+v; want the two entry ids in order", ds)
	}
}

func TestProcessor_RedeliveryIsAcknowledgedOnce(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	en := initEntry(t, "d1")
	wantKind(t, deliverOne(t, initP, en), outbox.KindDelivered)
	wantKind(t, deliverOne(t, initP, en), outbox.KindDelivered) // after a crash, say

	if n := len(e.Deliveries()); n != 1 {
		t.Errorf("%d deliveries; want 1 (the repeat has the same idempotency key)", n)
	}
	reqs := e.Requests()
	if len(reqs) != 2 || reqs[0].Duplicate || !reqs[1].Duplicate {
		t.Errorf("requests = %+v; want two, the second a duplicate", reqs)
	}
}

func TestProcessor_ParksOn409WithBodyExcerpt(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e, func(c *graph.ProcessorOptions) { c.BodyExcerpt = 40 })
	body := `{"error":"resource device/d1 exists"}` + strings.Repeat("x", 1000)
	e.Inject(graphtest.PathInit, graphtest.Fault{Status: 409, Body: body})

	o := deliverOne(t, initP, initEntry(t, "d1"))
	wantKind(t, o, outbox.KindPark)
	for _, want := range []string{"409 Conflict", graph.PathInit, `{"error":"resource device/d1 exists"}`, "(cut)"} {
		if !strings.Contains(o.Reason, want) {
			t.Errorf("reason %q does not contain %q", o.Reason, want)
		}
	}
	if strings.Contains(o.Reason, "xxxxx") {
		t.Errorf("reason %q holds more than the 40-byte excerpt", o.Reason)
	}
}

func TestProcessor_ReasonExcerptHoldsNoControlCharacters(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	// An engine's error body, quoted into the reason that a dead letter
	// keeps and the CLI and admin API show.
	body := "conflict \x1b]0;pwned\x07\x1b[2J\r\x00OK\u009b31m\x7f\u202etxt"
	e.Inject(graphtest.PathInit, graphtest.Fault{Status: 409, Body: body})

	o := deliverOne(t, initP, initEntry(t, "d1"))
	wantKind(t, o, outbox.KindPark)
	for i, r := range o.Reason {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x202e {
			t.Fatalf("reason %q holds the control character %U at byte %d", o.Reason, r, i)
		}
	}
	if !strings.Contains(o.Reason, `conflict \u001b]0;pwned`) {
		t.Errorf("reason %q does not show the body's text, escaped", o.Reason)
	}
}

func TestProcessor_ParksOn400(t *testing.T) {
	e := graphtest.New(t)
	_, metaP := processors(t, e)
	e.Inject(graphtest.PathMetadata, graphtest.Fault{Status: 400, Body: "unknown entity type"})
	o := deliverOne(t, metaP, metadataEntry(t, "gadget", "g1", "x"))
	wantKind(t, o, outbox.KindPark)
	if !strings.Contains(o.Reason, "400 Bad Request: unknown entity type") {
		t.Errorf("reason %q; want the status and the body", o.Reason)
	}
}

func TestProcessor_RetriesOnOtherStatuses(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	for _, status := range []int{401, 403, 404, 408, 422, 429, 500, 502, 503, 504, 302} {
		e.Inject(graphtest.PathInit, graphtest.Fault{Status: status, Body: "nope"})
		o := deliverOne(t, initP, initEntry(t, "d1"))
		if o.Kind != outbox.KindRetry || o.RetryAfter != 0 {
			t.Errorf("status %d: outcome %v after %v; want a plain retry", status, o.Kind, o.RetryAfter)
		}
		if !strings.Contains(o.Reason, http.StatusText(status)) || !strings.Contains(o.Reason, "nope") {
			t.Errorf("status %d: reason %q; want the status and the body", status, o.Reason)
		}
	}
	if n := len(e.Deliveries()); n != 0 {
		t.Errorf("%d deliveries took effect; want 0", n)
	}
}

func TestProcessor_RetryUsesRetryAfterSecondsOn429(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	e.Inject(graphtest.PathInit, graphtest.Fault{Status: 429, RetryAfter: "7"})
	o := deliverOne(t, initP, initEntry(t, "d1"))
	if o.Kind != outbox.KindRetry || o.RetryAfter != 7*time.Second {
		t.Fatalf("outcome %v after %v; want a retry after 7s", o.Kind, o.RetryAfter)
	}
}

func TestProcessor_RetryUsesRetryAfterHTTPDateOn503(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	at := time.Now().Add(2 * time.Minute).UTC().Format(http.TimeFormat)
	e.Inject(graphtest.PathInit, graphtest.Fault{Status: 503, RetryAfter: at})
	o := deliverOne(t, initP, initEntry(t, "d1"))
	// The date has whole seconds: 2m minus up to one second, minus the
	// time the request took.
	if o.Kind != outbox.KindRetry || o.RetryAfter < 115*time.Second || o.RetryAfter > 2*time.Minute {
		t.Fatalf("outcome %v after %v; want a retry after about 2m", o.Kind, o.RetryAfter)
	}
}

func TestProcessor_RetryAfterIsCappedAndFloored(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e, func(c *graph.ProcessorOptions) { c.MaxRetryAfter = time.Minute })
	cases := []struct {
		header string
		want   time.Duration
	}{
		{"86400", time.Minute},
		{"99999999999999999999", time.Minute},
		{time.Now().Add(time.Hour).UTC().Format(http.TimeFormat), time.Minute},
		{"0", graph.MinRetryAfter},
		{time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), graph.MinRetryAfter},
		{"soon", 0}, // malformed: the driver's ErrorDelay applies
		{"-5", 0},
	}
	for _, c := range cases {
		e.Inject(graphtest.PathInit, graphtest.Fault{Status: 503, RetryAfter: c.header})
		o := deliverOne(t, initP, initEntry(t, "d1"))
		if o.Kind != outbox.KindRetry || o.RetryAfter != c.want {
			t.Errorf("Retry-After %q: outcome %v after %v; want a retry after %v", c.header, o.Kind, o.RetryAfter, c.want)
		}
	}
}

func TestProcessor_IgnoresRetryAfterOnOtherStatuses(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	e.Inject(graphtest.PathInit, graphtest.Fault{Status: 500, RetryAfter: "30"})
	if o := deliverOne(t, initP, initEntry(t, "d1")); o.RetryAfter != 0 {
		t.Errorf("a 500's Retry-After gave RetryAfter %v; want 0", o.RetryAfter)
	}
}

func TestProcessor_RetriesOnConnectionDrop(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	e.FaultFunc(graphtest.PathInit, func(*http.Request) (graphtest.Fault, bool) {
		return graphtest.Fault{Drop: true}, true
	})
	o := deliverOne(t, initP, initEntry(t, "d1"))
	wantKind(t, o, outbox.KindRetry)
	if !strings.Contains(o.Reason, graph.PathInit) {
		t.Errorf("reason %q does not name the path", o.Reason)
	}
	if reqs := e.Requests(); len(reqs) == 0 || !reqs[0].Dropped {
		t.Errorf("requests = %+v; want dropped ones", reqs)
	}

	e.FaultFunc(graphtest.PathInit, nil)
	wantKind(t, deliverOne(t, initP, initEntry(t, "d1")), outbox.KindDelivered)
}

func TestProcessor_RetriesOnTimeout(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e, func(c *graph.ProcessorOptions) { c.Timeout = 50 * time.Millisecond })
	e.SetLatency(graphtest.PathInit, 10*time.Second)
	start := time.Now()
	o := deliverOne(t, initP, initEntry(t, "d1"))
	wantKind(t, o, outbox.KindRetry)
	if !strings.Contains(o.Reason, "no response within 50ms") {
		t.Errorf("reason %q; want it to say the request timed out", o.Reason)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Deliver took %v; want it bounded by the 50ms timeout", d)
	}
	if n := len(e.Deliveries()); n != 0 {
		t.Errorf("%d deliveries; the engine must not apply a request whose client gave up", n)
	}
}

func TestProcessor_DeliversRunInOrderOneAtATime(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	e.SetLatency(graphtest.PathInit, 20*time.Millisecond)
	var run []outbox.Entry
	for _, id := range []string{"d1", "d2", "d3", "d4", "d5"} {
		run = append(run, initEntry(t, id))
	}
	for i, o := range deliver(t, initP, run...) {
		if o.Kind != outbox.KindDelivered {
			t.Fatalf("entry %d: outcome %v (%q)", i, o.Kind, o.Reason)
		}
	}
	ds := e.Deliveries()
	for i := range run {
		if ds[i].EntryID != run[i].ID {
			t.Fatalf("delivery %d is entry %s; want %s (run order)", i, ds[i].EntryID, run[i].ID)
		}
	}
	if n := e.MaxInFlight(graphtest.PathInit); n != 1 {
		t.Errorf("the engine saw %d requests of the run at once; want 1", n)
	}
	reqs := e.Requests()
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Start.Before(reqs[i-1].End) {
			t.Errorf("request %d started at %v, before request %d ended at %v", i, reqs[i].Start, i-1, reqs[i-1].End)
		}
	}
}

func TestProcessor_StopsRunAtFirstRetry(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	// The first request is handled normally, the second answered 500.
	e.Inject(graphtest.PathInit, graphtest.Fault{}, graphtest.Fault{Status: 500})
	run := []outbox.Entry{initEntry(t, "d1"), initEntry(t, "d2"), initEntry(t, "d3"), initEntry(t, "d4")}
	out := deliver(t, initP, run...)

	wantKind(t, out[0], outbox.KindDelivered)
	wantKind(t, out[1], outbox.KindRetry)
	for i := 2; i < len(run); i++ {
		if out[i].Kind != outbox.KindRetry || out[i].Reason != "not attempted" {
			t.Errorf("entry %d: outcome %v (%q); want a retry, \"not attempted\"", i, out[i].Kind, out[i].Reason)
		}
	}
	if n := len(e.Requests()); n != 2 {
		t.Errorf("%d requests; want 2 (nothing after the retry is sent)", n)
	}
}

func TestProcessor_ParkDoesNotStopTheRun(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	e.Inject(graphtest.PathInit, graphtest.Fault{}, graphtest.Fault{Status: 409})
	out := deliver(t, initP, initEntry(t, "d1"), initEntry(t, "d2"), initEntry(t, "d3"))
	for i, want := range []outbox.OutcomeKind{outbox.KindDelivered, outbox.KindPark, outbox.KindDelivered} {
		if out[i].Kind != want {
			t.Errorf("entry %d: outcome %v (%q); want %v", i, out[i].Kind, out[i].Reason, want)
		}
	}
}

func TestProcessor_ParksMalformedPayloadWithoutSending(t *testing.T) {
	e := graphtest.New(t)
	initP, metaP := processors(t, e)
	cases := []struct {
		p       outbox.Processor
		payload string
		reason  string
	}{
		{initP, `{"resourceType": 5}`, "does not decode"},
		{initP, `[1, 2]`, "does not decode"},
		{initP, `{}`, "resourceType is empty"},
		{initP, `{"resourceType":"device","resourceId":"d1","requestedBy":"u1","relations":[{"relation":"owner"}]}`, "relations[0].subjectType is empty"},
		{metaP, `"label"`, "does not decode"},
		{metaP, `{"entityType":"device","label":"x"}`, "entityId is empty"},
	}
	for _, c := range cases {
		en := outbox.Entry{ID: outbox.NewID(), Lane: c.p.Lane(), Payload: json.RawMessage(c.payload)}
		o := deliverOne(t, c.p, en)
		if o.Kind != outbox.KindPark || !strings.Contains(o.Reason, c.reason) {
			t.Errorf("%s %s: outcome %v (%q); want parked, %q", c.p.Lane(), c.payload, o.Kind, o.Reason, c.reason)
		}
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests were sent for malformed payloads; want 0", n)
	}
}

func TestProcessor_DoesNotAttemptAfterContextEnds(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, err := initP.Deliver(ctx, []outbox.Entry{initEntry(t, "d1"), initEntry(t, "d2")})
	if err != nil || len(out) != 2 {
		t.Fatalf("Deliver = %d outcomes, %v; want 2, nil", len(out), err)
	}
	for i, o := range out {
		if o.Kind != outbox.KindRetry || !strings.HasPrefix(o.Reason, "not attempted") {
			t.Errorf("entry %d: outcome %v (%q); want not attempted", i, o.Kind, o.Reason)
		}
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests; want 0", n)
	}
}

func TestProcessor_EscapesMetadataPathSegments(t *testing.T) {
	e := graphtest.New(t)
	_, metaP := processors(t, e)
	for _, c := range []struct{ typ, id, path string }{
		{"device", "a/b c?d#e", "/api/v3/graph/entities/device/a%2Fb%20c%3Fd%23e/metadata"},
		{"..", ".", "/api/v3/graph/entities/%2E%2E/%2E/metadata"},
		{"gerät", "ü", "/api/v3/graph/entities/ger%C3%A4t/%C3%BC/metadata"},
	} {
		wantKind(t, deliverOne(t, metaP, metadataEntry(t, c.typ, c.id, "L")), outbox.KindDelivered)
		if l, ok := e.Label(c.typ, c.id); !ok || l != "L" {
			t.Errorf("entity %q/%q: engine label %q, %v; want it set", c.typ, c.id, l, ok)
		}
		if got := graph.MetadataPath(c.typ, c.id); got != c.path {
			t.Errorf("MetadataPath(%q, %q) = %s; want %s", c.typ, c.id, got, c.path)
		}
		reqs := e.Requests()
		if got := reqs[len(reqs)-1].Path; got != c.path {
			t.Errorf("entity %q/%q: path sent %s; want %s", c.typ, c.id, got, c.path)
		}
	}
}

func TestProcessor_AppendsPathsToBaseURLPath(t *testing.T) {
	var (
		mu    sync.Mutex
		paths []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.EscapedPath())
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	procs, err := graph.StandardProcessors(graph.ProcessorOptions{DeliveryURL: srv.URL + "/engine/", Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	deliver(t, procs[0], initEntry(t, "d1"))
	deliver(t, procs[1], metadataEntry(t, "device", "d1", "x"))
	mu.Lock()
	defer mu.Unlock()
	want := []string{"/engine" + graph.PathInit, "/engine/api/v3/graph/entities/device/d1/metadata"}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("paths %v; want %v", paths, want)
	}
}

func TestStandardProcessors_ValidatesConfig(t *testing.T) {
	ok := graph.ProcessorOptions{DeliveryURL: "https://graph.internal", Client: http.DefaultClient}
	cases := []struct {
		name string
		edit func(*graph.ProcessorOptions)
		want string
	}{
		{"empty url", func(c *graph.ProcessorOptions) { c.DeliveryURL = "" }, "DeliveryURL is empty"},
		{"no scheme", func(c *graph.ProcessorOptions) { c.DeliveryURL = "graph.internal" }, "DeliveryURL"},
		{"relative", func(c *graph.ProcessorOptions) { c.DeliveryURL = "/api" }, "scheme http or https"},
		{"ftp", func(c *graph.ProcessorOptions) { c.DeliveryURL = "ftp://graph.internal" }, "scheme http or https"},
		{"no host", func(c *graph.ProcessorOptions) { c.DeliveryURL = "https://" }, "has no host"},
		{"opaque", func(c *graph.ProcessorOptions) { c.DeliveryURL = "https:graph.internal" }, "has no host"},
		{"query", func(c *graph.ProcessorOptions) { c.DeliveryURL = "https://graph.internal/?tenant=1" }, "has a query"},
		{"empty query", func(c *graph.ProcessorOptions) { c.DeliveryURL = "https://graph.internal/?" }, "has a query"},
		{"fragment", func(c *graph.ProcessorOptions) { c.DeliveryURL = "https://graph.internal/#x" }, "has a fragment"},
		{"user info", func(c *graph.ProcessorOptions) { c.DeliveryURL = "https://svc:hunter2@graph.internal" }, "RoundTripper"},
		{"unparsable", func(c *graph.ProcessorOptions) { c.DeliveryURL = "https://graph internal:x" }, "DeliveryURL is not a URL"},
		{"nil client", func(c *graph.ProcessorOptions) { c.Client = nil }, "Client is nil"},
		{"negative timeout", func(c *graph.ProcessorOptions) { c.Timeout = -time.Second }, "Timeout is -1s"},
		{"negative excerpt", func(c *graph.ProcessorOptions) { c.BodyExcerpt = -1 }, "BodyExcerpt is -1"},
		{"huge excerpt", func(c *graph.ProcessorOptions) { c.BodyExcerpt = graph.MaxBodyExcerpt + 1 }, "BodyExcerpt"},
		{"tiny max retry after", func(c *graph.ProcessorOptions) { c.MaxRetryAfter = time.Millisecond }, "MaxRetryAfter"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok
			c.edit(&cfg)
			procs, err := graph.StandardProcessors(cfg)
			if !errors.Is(err, graph.ErrInvalidOptions) || procs != nil {
				t.Fatalf("StandardProcessors = %v, %v; want ErrInvalidOptions", procs, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not contain %q", err, c.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error %q shows the password", err)
			}
		})
	}
	for _, u := range []string{"http://graph", "https://graph.internal:8443/base/", "HTTPS://Graph.Internal"} {
		cfg := ok
		cfg.DeliveryURL = u
		if _, err := graph.StandardProcessors(cfg); err != nil {
			t.Errorf("DeliveryURL %q: %v; want it accepted", u, err)
		}
	}
}

func TestProcessor_RetriesOnRedirectWithoutFollowingIt(t *testing.T) {
	var (
		mu   sync.Mutex
		gets int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet { // a login page, say
			mu.Lock()
			gets++
			mu.Unlock()
			_, _ = w.Write([]byte("<html>sign in</html>"))
			return
		}
		http.Redirect(w, r, "/login", http.StatusFound)
	}))
	defer srv.Close()
	procs, err := graph.StandardProcessors(graph.ProcessorOptions{DeliveryURL: srv.URL, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	o := deliverOne(t, procs[0], initEntry(t, "d1"))
	wantKind(t, o, outbox.KindRetry)
	if !strings.Contains(o.Reason, "302 Found: redirect to /login (not followed)") {
		t.Errorf("reason %q; want the 302 and its Location", o.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if gets != 0 {
		t.Errorf("the redirect was followed (%d GETs); a followed 302 turns the POST into a GET", gets)
	}
	if srv.Client().CheckRedirect != nil {
		t.Error("the caller's client was modified")
	}
}

func TestProcessor_SendsTheLeadersFencingToken(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	ctx := outbox.WithFencingToken(context.Background(), 42)
	if _, err := initP.Deliver(ctx, []outbox.Entry{initEntry(t, "d1")}); err != nil {
		t.Fatal(err)
	}
	deliver(t, initP, initEntry(t, "d2")) // no leader: no token
	reqs := e.Requests()
	if got := reqs[0].Header.Get(graph.FencingTokenHeader); got != "42" {
		t.Errorf("%s = %q; want the leader's 42", graph.FencingTokenHeader, got)
	}
	if got, ok := reqs[1].Header[graph.FencingTokenHeader]; ok {
		t.Errorf("a delivery without a leader's token sent %s %q", graph.FencingTokenHeader, got)
	}
}

func TestProcessor_RefusedFencingTokenIsErrFencedNotAPark(t *testing.T) {
	e := graphtest.New(t)
	initP, _ := processors(t, e)
	successor := outbox.WithFencingToken(context.Background(), 8)
	if _, err := initP.Deliver(successor, []outbox.Entry{initEntry(t, "d1")}); err != nil {
		t.Fatal(err)
	}
	deposed := outbox.WithFencingToken(context.Background(), 7)
	out, err := initP.Deliver(deposed, []outbox.Entry{initEntry(t, "d2"), initEntry(t, "d3")})
	if !errors.Is(err, outbox.ErrFenced) {
		t.Fatalf("Deliver by a deposed leader = %v, %v; want an error wrapping outbox.ErrFenced", out, err)
	}
	if len(e.Deliveries()) != 1 || len(e.RequestsTo(graphtest.PathInit)) != 2 {
		t.Errorf("%d deliveries of %d requests; want the successor's one, and the deposed leader to stop at its first refusal",
			len(e.Deliveries()), len(e.RequestsTo(graphtest.PathInit)))
	}
}
