package service

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
	"github.com/baton-go/baton/internal/testenv"
)

// Both instances, the one that leads and the one that stands by, are live
// and ready, with no token; each reports its outbox and lease roles.
func TestProfiles_ProbesAnswerWithoutATokenOnLeaderAndStandby(t *testing.T) {
	c := startCluster(t)
	leaders := 0
	for _, inst := range []*instance{c.a, c.b} {
		for _, probe := range []string{"/healthz/live", "/healthz/ready"} {
			var rep health.Report
			if code := c.do(t, inst, http.MethodGet, probe, "", nil, &rep); code != http.StatusOK || !rep.OK || len(rep.Components) != 2 {
				t.Fatalf("GET %s on %s: %d, %+v; want 200 for the outbox and the leases", probe, inst.name, code, rep)
			}
			if probe == "/healthz/ready" {
				for _, comp := range rep.Components {
					for _, r := range comp.Roles {
						if r.State == health.Leader && comp.Name == "outbox" {
							leaders++
						}
					}
				}
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d instances lead the outbox, want 1", leaders)
	}
}

// The leader's /metrics counts what it delivered, per lane, and every
// instance says which roles it holds.
func TestProfiles_MetricsCountDeliveriesAndRoles(t *testing.T) {
	c := startCluster(t)
	if code := c.do(t, c.a, http.MethodPost, "/profiles", aliceToken, createRequest{ID: "m1", Label: "Ada"}, nil); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	eventually(t, "both entries delivered", func() error {
		if n := len(c.engine.Deliveries()); n != 2 {
			return fmt.Errorf("%d deliveries", n)
		}
		return nil
	})
	held := 0
	eventually(t, "the leader counts its deliveries", func() error {
		held = 0
		sent := 0
		for _, inst := range []*instance{c.a, c.b} {
			code, raw := c.send(t, inst, http.MethodGet, "/metrics", adminToken, nil)
			body := string(raw)
			if code != http.StatusOK {
				return fmt.Errorf("GET /metrics on %s: %d", inst.name, code)
			}
			for _, line := range strings.Split(body, "\n") {
				switch {
				case strings.HasPrefix(line, "messaging_client_sent_messages_total{") &&
					strings.Contains(line, `messaging_destination_name="`+graph.LaneInit+`"`) && strings.HasSuffix(line, " 1"):
					sent++
				case strings.HasPrefix(line, "baton_role_held{") && strings.Contains(line, `baton_instance="`+inst.info.InstanceID+`"`) &&
					strings.HasSuffix(line, " 1"):
					held++
				}
			}
		}
		if sent != 1 {
			return fmt.Errorf("%d instances count one %s delivery, want 1", sent, graph.LaneInit)
		}
		return nil
	})
	// The maintenance role and the outbox leader lock, each held once;
	// retention's lock comes and goes.
	if held < 2 {
		t.Errorf("%d roles held across the instances, want at least the maintenance role and the outbox leader lock", held)
	}
}

// lockedBuffer is a bytes.Buffer the exporter writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// exportedSpan is what the stdout exporter writes of a span, as far as
// this test reads it.
type exportedSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Links       []struct {
		SpanContext struct{ TraceID, SpanID string }
	}
}

// A profile request has a span of its own, and the run that delivers the
// entries it enqueued links to that span: the request's handler enqueues
// with otelbaton.Inject.
func TestProfiles_TheDeliveryLinksToTheRequestThatEnqueued(t *testing.T) {
	env := testenv.Postgres(t)
	traces := &lockedBuffer{}
	c := &cluster{engine: graphtest.New(t), client: &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}}
	t.Cleanup(c.client.CloseIdleConnections)
	c.a = startInstance(t, "a", env.URL, c.engine.URL(), func(cfg *Config) { cfg.Traces = traces })
	if code := c.do(t, c.a, http.MethodPost, "/profiles", aliceToken, createRequest{ID: "t1", Label: "Ada"}, nil); code != http.StatusCreated {
		t.Fatalf("create: %d", code)
	}
	eventually(t, "both entries delivered", func() error {
		if n := len(c.engine.Deliveries()); n != 2 {
			return fmt.Errorf("%d deliveries", n)
		}
		return nil
	})
	c.a.stop(t) // flushes the spans

	var request *exportedSpan
	var deliveries []exportedSpan
	sc := bufio.NewScanner(strings.NewReader(traces.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s exportedSpan
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("an exported span is not JSON: %v: %s", err, sc.Bytes())
		}
		switch {
		case s.Name == "POST /profiles":
			request = &s
		case strings.HasPrefix(s.Name, "deliver "):
			deliveries = append(deliveries, s)
		}
	}
	if request == nil || len(deliveries) == 0 {
		t.Fatalf("no request span, or no delivery span (%d), among the exported:\n%s", len(deliveries), traces.String())
	}
	for _, d := range deliveries {
		if len(d.Links) != 1 || d.Links[0].SpanContext != request.SpanContext {
			t.Errorf("span %s links %+v, want only the request's span %+v", d.Name, d.Links, request.SpanContext)
		}
	}
}
