package service

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/graph"
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
