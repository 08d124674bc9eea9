package graphtest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
)

const initBody = `{"resourceType":"device","resourceId":"d1","relations":[],"requestedBy":"u1"}`

// send makes one request and returns its status (0 when the connection
// failed) and body.
func send(t *testing.T, e *graphtest.Engine, method, path, key, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(graph.IdempotencyKeyHeader, key)
	}
	resp, err := e.Client().Do(req)
	if err != nil {
		return 0, nil, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestEngine_RepeatedKeyIsAcknowledgedButAppliedOnce(t *testing.T) {
	e := graphtest.New(t)
	key := outbox.NewID().String()
	for i := range 3 {
		if status, _, body := send(t, e, http.MethodPost, graphtest.PathInit, key, initBody); status != http.StatusNoContent {
			t.Fatalf("request %d: %d %s; want 204", i, status, body)
		}
	}
	ds := e.Deliveries()
	if len(ds) != 1 || ds[0].Lane != graph.LaneInit || ds[0].IdempotencyKey != key || ds[0].EntryID.String() != key ||
		string(ds[0].Payload) != initBody || ds[0].Path != graph.PathInit || ds[0].At.IsZero() {
		t.Fatalf("deliveries = %+v; want one, for the key", ds)
	}
	reqs := e.Requests()
	if len(reqs) != 3 || reqs[0].Duplicate || !reqs[1].Duplicate || !reqs[2].Duplicate {
		t.Fatalf("requests = %+v; want three, the last two duplicates", reqs)
	}
}

func TestEngine_MetadataDeliveryCarriesTheLanePayload(t *testing.T) {
	e := graphtest.New(t)
	status, _, _ := send(t, e, http.MethodPut, graph.MetadataPath("device", "d/1"), "k1", `{"label":"Pump"}`)
	if status != http.StatusNoContent {
		t.Fatalf("status %d", status)
	}
	ds := e.Deliveries()
	if len(ds) != 1 || ds[0].Lane != graph.LaneMetadata || string(ds[0].Payload) != `{"entityType":"device","entityId":"d/1","label":"Pump"}` {
		t.Fatalf("deliveries = %+v", ds)
	}
	if ds[0].EntryID != outbox.NilID {
		t.Errorf("EntryID = %s for a key that is not a UUID; want the nil id", ds[0].EntryID)
	}
	if l, ok := e.Label("device", "d/1"); !ok || l != "Pump" {
		t.Errorf("Label = %q, %v", l, ok)
	}
}

func TestEngine_RefusesLaneRequestsWithoutKeyOrValidBody(t *testing.T) {
	e := graphtest.New(t)
	cases := []struct{ method, path, key, body, want string }{
		{http.MethodPost, graphtest.PathInit, "", initBody, "Idempotency-Key header is required"},
		{http.MethodPost, graphtest.PathInit, "k", `{"resourceType":"device"}`, "resourceId is empty"},
		{http.MethodPost, graphtest.PathInit, "k", `nope`, "does not decode"},
		{http.MethodPut, graph.MetadataPath("device", "d1"), "k", `{}`, "no label"},
		{http.MethodPut, graph.MetadataPath("device", "d1"), "", `{"label":"x"}`, "Idempotency-Key"},
	}
	for _, c := range cases {
		status, _, body := send(t, e, c.method, c.path, c.key, c.body)
		if status != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %s: %d %s; want 400 with %q", c.method, c.path, c.body, status, body, c.want)
		}
	}
	if n := len(e.Deliveries()); n != 0 {
		t.Errorf("%d deliveries", n)
	}
	// A refused key did not take effect, so the corrected request does.
	if status, _, _ := send(t, e, http.MethodPost, graphtest.PathInit, "k", initBody); status != http.StatusNoContent {
		t.Errorf("status %d; want 204", status)
	}
	if n := len(e.Deliveries()); n != 1 {
		t.Errorf("%d deliveries; want 1", n)
	}
}

func TestEngine_FailConsumesStatusesOnePerRequest(t *testing.T) {
	e := graphtest.New(t)
	e.Fail(graphtest.PathInit, 503, 503, 409)
	var got []int
	for range 4 {
		status, _, _ := send(t, e, http.MethodPost, graphtest.PathInit, "k", initBody)
		got = append(got, status)
	}
	if fmt.Sprint(got) != "[503 503 409 204]" {
		t.Errorf("statuses %v; want [503 503 409 204]", got)
	}
	reqs := e.Requests()
	if len(reqs) != 4 || reqs[3].Duplicate {
		t.Errorf("requests = %+v; the faulted ones must not count as taking effect", reqs)
	}
	if n := len(e.Deliveries()); n != 1 {
		t.Errorf("%d deliveries; want 1", n)
	}
}

func TestEngine_FaultsArePerPath(t *testing.T) {
	e := graphtest.New(t)
	e.Fail(graphtest.PathMetadata, 500)
	if status, _, _ := send(t, e, http.MethodPost, graphtest.PathInit, "a", initBody); status != http.StatusNoContent {
		t.Errorf("init answered %d; the fault was for metadata", status)
	}
	if status, _, _ := send(t, e, http.MethodPut, graph.MetadataPath("device", "x"), "b", `{"label":"x"}`); status != 500 {
		t.Errorf("metadata answered %d; want the injected 500", status)
	}
}

func TestEngine_InjectsRetryAfterAndBody(t *testing.T) {
	e := graphtest.New(t)
	e.Inject(graphtest.PathInit, graphtest.Fault{Status: 429, RetryAfter: "12", Body: "slow down"})
	status, h, body := send(t, e, http.MethodPost, graphtest.PathInit, "k", initBody)
	if status != 429 || h.Get("Retry-After") != "12" || body != "slow down" {
		t.Errorf("%d Retry-After=%q %q; want 429, 12, slow down", status, h.Get("Retry-After"), body)
	}
}

// TestEngine_LatencyDelaysTheAnswer: the latency is long enough that a
// second request answered within it cannot have waited for it, even on a
// loaded machine.
func TestEngine_LatencyDelaysTheAnswer(t *testing.T) {
	const latency = time.Second
	e := graphtest.New(t)
	e.Inject(graphtest.PathDefinitions, graphtest.Fault{Latency: latency})
	start := time.Now()
	if status, _, _ := send(t, e, http.MethodGet, graphtest.PathDefinitions, "", ""); status != 200 {
		t.Fatalf("status %d", status)
	}
	if d := time.Since(start); d < latency {
		t.Errorf("answered after %v; want at least the %v latency", d, latency)
	}
	start = time.Now()
	send(t, e, http.MethodGet, graphtest.PathDefinitions, "", "")
	if d := time.Since(start); d >= latency {
		t.Errorf("the second request took %v; a queued fault applies once", d)
	}
}

func TestEngine_FaultFuncDropsConnections(t *testing.T) {
	e := graphtest.New(t)
	var (
		mu    sync.Mutex
		calls int
	)
	e.FaultFunc(graphtest.PathInit, func(*http.Request) (graphtest.Fault, bool) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return graphtest.Fault{Drop: true}, true
	})
	status, _, msg := send(t, e, http.MethodPost, graphtest.PathInit, "k", initBody)
	if status != 0 {
		t.Fatalf("status %d; want no answer", status)
	}
	if !strings.Contains(msg, "EOF") {
		t.Logf("client error: %s", msg)
	}
	reqs := e.Requests()
	if len(reqs) == 0 || !reqs[0].Dropped || reqs[0].Status != 0 {
		t.Errorf("requests = %+v; want dropped ones", reqs)
	}
	e.FaultFunc(graphtest.PathInit, nil)
	if status, _, _ := send(t, e, http.MethodPost, graphtest.PathInit, "k", initBody); status != http.StatusNoContent {
		t.Errorf("after removing the FaultFunc: %d; want 204", status)
	}
	if n := len(e.Deliveries()); n != 1 {
		t.Errorf("%d deliveries; the dropped requests must have had no effect", n)
	}
}

func TestEngine_ClearFaults(t *testing.T) {
	e := graphtest.New(t)
	e.Fail(graphtest.PathInit, 500, 500)
	e.SetLatency(graphtest.PathInit, time.Hour)
	e.FaultFunc(graphtest.PathInit, func(*http.Request) (graphtest.Fault, bool) { return graphtest.Fault{Status: 418}, true })
	e.ClearFaults()
	if status, _, _ := send(t, e, http.MethodPost, graphtest.PathInit, "k", initBody); status != http.StatusNoContent {
		t.Errorf("status %d; want 204", status)
	}
}

func TestEngine_RequireBearer(t *testing.T) {
	e := graphtest.New(t)
	e.RequireBearer("s3cret")
	if status, _, _ := send(t, e, http.MethodGet, graphtest.PathDefinitions, "", ""); status != http.StatusUnauthorized {
		t.Errorf("without a token: %d; want 401", status)
	}
	req, _ := http.NewRequest(http.MethodGet, e.URL()+graphtest.PathDefinitions, nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := e.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("with the token: %d; want 200", resp.StatusCode)
	}
}

func TestEngine_UnknownPathIs404AndRecorded(t *testing.T) {
	e := graphtest.New(t)
	if status, _, _ := send(t, e, http.MethodGet, "/api/v3/graph/nothing", "", ""); status != 404 {
		t.Errorf("status %d; want 404", status)
	}
	if status, _, _ := send(t, e, http.MethodGet, graphtest.PathInit, "", ""); status != http.StatusMethodNotAllowed {
		t.Errorf("GET init: %d; want 405", status)
	}
	reqs := e.Requests()
	if len(reqs) != 2 || reqs[0].Route != "" || reqs[0].Status != 404 {
		t.Errorf("requests = %+v", reqs)
	}
}

func TestEngine_WaitDeliveries(t *testing.T) {
	e := graphtest.New(t)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 3 {
			time.Sleep(5 * time.Millisecond)
			b := strings.Replace(initBody, `"d1"`, fmt.Sprintf(`"d%d"`, i), 1)
			req, _ := http.NewRequest(http.MethodPost, e.URL()+graphtest.PathInit, strings.NewReader(b))
			req.Header.Set(graph.IdempotencyKeyHeader, fmt.Sprint(i))
			if resp, err := e.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})
	ds, err := e.WaitDeliveries(3, 5*time.Second)
	wg.Wait()
	if err != nil || len(ds) != 3 {
		t.Fatalf("WaitDeliveries = %d, %v; want 3", len(ds), err)
	}
	for i, d := range ds {
		if !strings.Contains(string(d.Payload), fmt.Sprintf(`"d%d"`, i)) {
			t.Errorf("delivery %d = %s; want arrival order", i, d.Payload)
		}
	}

	ds, err = e.WaitDeliveries(4, 30*time.Millisecond)
	if err == nil || len(ds) != 3 || !strings.Contains(err.Error(), "3 of 4 deliveries") {
		t.Errorf("WaitDeliveries(4) = %d, %v; want a timeout with 3", len(ds), err)
	}
}

func TestEngine_CloseEndsHeldRequestsAndWaits(t *testing.T) {
	e, err := graphtest.NewEngine()
	if err != nil {
		t.Fatal(err)
	}
	e.SetLatency(graphtest.PathInit, time.Hour)
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, e.URL()+graphtest.PathInit, strings.NewReader(initBody))
		req.Header.Set(graph.IdempotencyKeyHeader, "k")
		resp, err := e.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	waitErr := make(chan error, 1)
	go func() {
		_, err := e.WaitDeliveries(1, time.Hour)
		waitErr <- err
	}()
	for deadline := time.Now().Add(5 * time.Second); len(e.RequestsTo(graphtest.PathInit)) == 0 && e.MaxInFlight(graphtest.PathInit) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the request never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	e.Close()
	e.Close() // again: nothing
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v with a request held for an hour", d)
	}
	<-done
	if err := <-waitErr; err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("WaitDeliveries after Close: %v; want an error saying the engine closed", err)
	}
	if n := len(e.Deliveries()); n != 0 {
		t.Errorf("%d deliveries; a request cut short by Close has no effect", n)
	}
}

func TestEngine_AuthorizeAnswersFromGrantsAndDefinitions(t *testing.T) {
	e := graphtest.New(t)
	e.SetDefinitions(graph.Definitions{EntityTypes: []graph.EntityType{
		{Name: "device", Permissions: []graph.Permission{{Name: "read", Bit: 0}, {Name: "write", Bit: 40}}},
	}})
	e.SetGrants("user", "u1", []graph.Grant{{ResourceType: "device", ResourceID: "d1", Mask: 1 << 40}})
	ask := func(perm string) (int, string) {
		b, _ := json.Marshal(graph.PermissionCheck{SubjectType: "user", SubjectID: "u1", Permission: perm, ResourceType: "device", ResourceID: "d1"})
		status, _, body := send(t, e, http.MethodPost, graphtest.PathAuthorize, "", string(b))
		return status, strings.TrimSpace(body)
	}
	if s, b := ask("write"); s != 200 || b != `{"allowed":true}` {
		t.Errorf("write: %d %s", s, b)
	}
	if s, b := ask("read"); s != 200 || b != `{"allowed":false}` {
		t.Errorf("read: %d %s", s, b)
	}
	if s, _ := ask("fly"); s != 400 {
		t.Errorf("fly: %d; want 400", s)
	}
}

func TestEngine_SetDefinitionsPanicsOnInvalidModel(t *testing.T) {
	e := graphtest.New(t)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "bit 64") {
			t.Errorf("recover() = %v; want a panic naming bit 64", r)
		}
	}()
	e.SetDefinitions(graph.Definitions{EntityTypes: []graph.EntityType{{Name: "d", Permissions: []graph.Permission{{Name: "r", Bit: 64}}}}})
}

func TestEngine_SettersCopyTheirArguments(t *testing.T) {
	e := graphtest.New(t)
	grants := []graph.Grant{{ResourceType: "device", ResourceID: "d1", Mask: 1}}
	e.SetGrants("user", "u1", grants)
	grants[0].Mask = 2
	defs := graph.Definitions{EntityTypes: []graph.EntityType{{Name: "device", Permissions: []graph.Permission{{Name: "read", Bit: 0}}}}}
	e.SetDefinitions(defs)
	defs.EntityTypes[0].Permissions[0].Bit = 9

	_, _, body := send(t, e, http.MethodGet, graph.ProjectionPath("user", "u1"), "", "")
	if !strings.Contains(body, `"mask":"1"`) {
		t.Errorf("projection %s; want the grants as they were set", body)
	}
	_, _, body = send(t, e, http.MethodGet, graphtest.PathDefinitions, "", "")
	if !strings.Contains(body, `"bit":0`) || !strings.Contains(body, `"relations":[]`) {
		t.Errorf("definitions %s; want them as set, lists never null", body)
	}
}

func TestEngine_IsSafeForConcurrentUse(t *testing.T) {
	e := graphtest.New(t)
	e.SetLatency(graphtest.PathInit, time.Millisecond)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 10 {
				key := fmt.Sprintf("%d-%d", w, i%5) // every key twice
				req, _ := http.NewRequest(http.MethodPost, e.URL()+graphtest.PathInit, bytes.NewReader([]byte(initBody)))
				req.Header.Set(graph.IdempotencyKeyHeader, key)
				if resp, err := e.Client().Do(req); err == nil {
					resp.Body.Close()
				}
				e.SetGrants("user", key, nil)
				_ = e.Deliveries()
				_ = e.Requests()
			}
		})
	}
	wg.Go(func() {
		for range 10 {
			e.SetLatency(graphtest.PathInit, 2*time.Millisecond)
			e.Inject(graphtest.PathDefinitions, graphtest.Fault{Status: 500})
			e.ClearFaults()
		}
	})
	wg.Wait()
	if n := len(e.Deliveries()); n != 40 {
		t.Errorf("%d deliveries; want 40 (8 workers × 5 keys)", n)
	}
	dups := 0
	for _, r := range e.Requests() {
		if r.Duplicate {
			dups++
		}
	}
	if n := len(e.Requests()); n != 80 || dups != 40 {
		t.Errorf("%d requests, %d duplicates", n, dups)
	}
	if e.MaxInFlight(graphtest.PathInit) < 1 {
		t.Error("MaxInFlight not counted")
	}
}

func TestNew_ClosesWithTheTest(t *testing.T) {
	var url string
	t.Run("inner", func(t *testing.T) {
		url = graphtest.New(t).URL()
	})
	if resp, err := http.Get(url + graphtest.PathDefinitions); err == nil {
		resp.Body.Close()
		t.Fatal("the engine still answers after its test ended")
	}
}

// sendWithToken is send with a fencing token.
func sendWithToken(t *testing.T, e *graphtest.Engine, token, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.URL()+graphtest.PathInit, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(graph.IdempotencyKeyHeader, outbox.NewID().String())
	if token != "" {
		req.Header.Set(graph.FencingTokenHeader, token)
	}
	resp, err := e.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestEngine_RefusesAFencingTokenLowerThanTheHighestSeenWith409(t *testing.T) {
	e := graphtest.New(t)
	body := func(id string) string {
		return `{"resourceType":"device","resourceId":"` + id + `","relations":[],"requestedBy":"u1"}`
	}
	for _, tc := range []struct {
		token, resource string
		want            int
	}{
		{"5", "d1", http.StatusNoContent},
		{"7", "d2", http.StatusNoContent},
		{"7", "d3", http.StatusNoContent}, // the same leader again
		{"6", "d4", http.StatusConflict},  // a deposed leader
		{"", "d5", http.StatusNoContent},  // a sender that does not fence
		{"x", "d6", http.StatusBadRequest},
		{"0", "d7", http.StatusBadRequest},
	} {
		status, h, b := sendWithToken(t, e, tc.token, body(tc.resource))
		if status != tc.want {
			t.Errorf("token %q: %d %s; want %d", tc.token, status, b, tc.want)
		}
		if status == http.StatusConflict && h.Get(graph.FencingTokenHeader) != "7" {
			t.Errorf("the refusal of token %q carries %s %q; want the highest seen, 7", tc.token, graph.FencingTokenHeader, h.Get(graph.FencingTokenHeader))
		}
	}
	if _, ok := e.Resource("device", "d4"); ok {
		t.Error("the deposed leader's request took effect")
	}
	if got := e.HighestFencingToken(); got != 7 {
		t.Errorf("HighestFencingToken() = %d; want 7", got)
	}
	var tokens []uint64
	for _, d := range e.Deliveries() {
		tokens = append(tokens, d.FencingToken)
	}
	if fmt.Sprint(tokens) != "[5 7 7 0]" {
		t.Errorf("deliveries carried tokens %v; want [5 7 7 0]", tokens)
	}
	var refused []uint64
	for _, r := range e.Requests() {
		if r.Status == http.StatusConflict {
			refused = append(refused, r.FencingToken)
		}
	}
	if fmt.Sprint(refused) != "[6]" {
		t.Errorf("refused requests carried tokens %v; want [6]", refused)
	}
}
