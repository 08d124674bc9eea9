package graph_test

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
)

var model = graph.Definitions{EntityTypes: []graph.EntityType{
	{
		Name:        "device",
		Relations:   []graph.RelationDefinition{{Name: "owner", SubjectTypes: []string{"user"}}},
		Permissions: []graph.Permission{{Name: "read", Bit: 0}, {Name: "write", Bit: 1}, {Name: "reboot", Bit: 63}},
	},
	{Name: "tenant", Permissions: []graph.Permission{{Name: "read", Bit: 5}}},
}}

func clientConfig(e *graphtest.Engine) graph.ClientOptions {
	return graph.ClientOptions{BaseURL: e.URL(), Client: e.Client()}
}

func TestAuthorizationClient_AnswersFromGrantsAndDefinitions(t *testing.T) {
	e := graphtest.New(t)
	e.SetDefinitions(model)
	e.SetGrants("user", "u1", []graph.Grant{{ResourceType: "device", ResourceID: "d1", Mask: 1<<0 | 1<<63}})
	c, err := graph.NewAuthorizationClient(clientConfig(e))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		subject, permission, resource string
		want                          bool
	}{
		{"u1", "read", "d1", true},
		{"u1", "reboot", "d1", true},
		{"u1", "write", "d1", false},
		{"u1", "read", "d2", false},
		{"u2", "read", "d1", false},
	}
	for _, q := range cases {
		got, err := c.Check(context.Background(), graph.PermissionCheck{
			SubjectType: "user", SubjectID: q.subject, Permission: q.permission, ResourceType: "device", ResourceID: q.resource,
		})
		if err != nil || got != q.want {
			t.Errorf("%s %s %s = %v, %v; want %v", q.subject, q.permission, q.resource, got, err, q.want)
		}
	}
}

func TestAuthorizationClient_UnknownPermissionIsStatusError(t *testing.T) {
	e := graphtest.New(t)
	e.SetDefinitions(model)
	c, _ := graph.NewAuthorizationClient(clientConfig(e))
	_, err := c.Check(context.Background(), graph.PermissionCheck{
		SubjectType: "user", SubjectID: "u1", Permission: "fly", ResourceType: "device", ResourceID: "d1",
	})
	var se *graph.StatusError
	if !errors.As(err, &se) || se.StatusCode != 400 || se.Path != graph.PathAuthorize || se.Method != http.MethodPost {
		t.Fatalf("err = %v; want a *StatusError 400 for POST %s", err, graph.PathAuthorize)
	}
	if !strings.Contains(se.Body, `no permission \"fly\"`) {
		t.Errorf("Body = %q; want the engine's message", se.Body)
	}
}

func TestAuthorizationClient_RefusesEmptyArgumentsWithoutSending(t *testing.T) {
	e := graphtest.New(t)
	c, _ := graph.NewAuthorizationClient(clientConfig(e))
	_, err := c.Check(context.Background(), graph.PermissionCheck{SubjectType: "user", SubjectID: "u1", Permission: "read", ResourceType: "device"})
	if !errors.Is(err, graph.ErrInvalidArgument) || !strings.Contains(err.Error(), "resourceId is empty") {
		t.Errorf("err = %v; want ErrInvalidArgument naming resourceId", err)
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func TestAuthorizationClient_AnswerWithoutAllowedIsInvalid(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"allow": true}`)
	}))
	defer srv.Close()
	c, _ := graph.NewAuthorizationClient(graph.ClientOptions{BaseURL: srv.URL, Client: srv.Client()})
	allowed, err := c.Check(context.Background(), graph.PermissionCheck{SubjectType: "u", SubjectID: "1", Permission: "p", ResourceType: "r", ResourceID: "1"})
	if !errors.Is(err, graph.ErrInvalidResponse) || allowed {
		t.Errorf("Check = %v, %v; want false, ErrInvalidResponse", allowed, err)
	}
}

func TestDefinitionsClient_ReturnsModelAndBits(t *testing.T) {
	e := graphtest.New(t)
	e.SetDefinitions(model)
	c, err := graph.NewDefinitionsClient(clientConfig(e))
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Definitions(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(d.EntityTypes) != 2 || d.EntityTypes[0].Relations[0].SubjectTypes[0] != "user" {
		t.Fatalf("definitions = %+v", d)
	}
	bits, err := d.PermissionBits("device")
	if err != nil || len(bits) != 3 || bits["read"] != 0 || bits["write"] != 1 || bits["reboot"] != 63 {
		t.Errorf("PermissionBits(device) = %v, %v", bits, err)
	}
	if m, err := d.Mask("device", "read", "reboot"); err != nil || m != 1|1<<63 {
		t.Errorf("Mask(device, read, reboot) = %#x, %v", m, err)
	}
	if m, err := d.Mask("tenant", "read"); err != nil || m != 1<<5 {
		t.Errorf("Mask(tenant, read) = %#x, %v; bits are per entity type", m, err)
	}
	if _, err := d.Mask("device", "fly"); err == nil {
		t.Error("Mask of an unknown permission succeeded")
	}
	if _, err := d.PermissionBits("gadget"); err == nil {
		t.Error("PermissionBits of an unknown type succeeded")
	}
}

func TestDefinitionsClient_EmptyModelIsEmpty(t *testing.T) {
	e := graphtest.New(t)
	c, _ := graph.NewDefinitionsClient(clientConfig(e))
	d, err := c.Definitions(context.Background())
	if err != nil || len(d.EntityTypes) != 0 {
		t.Errorf("Definitions = %+v, %v; want none", d, err)
	}
}

func TestDefinitionsClient_RefusesBrokenModels(t *testing.T) {
	for body, want := range map[string]string{
		`{"entityTypes":[{"name":"d","permissions":[{"name":"r","bit":64}]}]}`:                     "bit 64",
		`{"entityTypes":[{"name":"d","permissions":[{"name":"r","bit":-1}]}]}`:                     "bit -1",
		`{"entityTypes":[{"name":"d","permissions":[{"name":"r","bit":2},{"name":"w","bit":2}]}]}`: "share bit 2",
		`{"entityTypes":[{"name":"d","permissions":[{"name":"r","bit":1},{"name":"r","bit":2}]}]}`: "defined twice",
		`{"entityTypes":[{"name":"d"},{"name":"d"}]}`:                                              "defined twice",
		`{"entityTypes":[{"name":""}]}`:                                                            "entityTypes[0].name is empty",
		`{"entityTypes":[{"name":"d","relations":[{"name":""}]}]}`:                                 "relations[0].name is empty",
		`{"entityTypes":[{"name":"d","permissions":[{"name":"r","bit":"1"}]}]}`:                    "does not decode",
		`not json`: "does not decode",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, body)
		}))
		c, _ := graph.NewDefinitionsClient(graph.ClientOptions{BaseURL: srv.URL, Client: srv.Client()})
		_, err := c.Definitions(context.Background())
		if !errors.Is(err, graph.ErrInvalidResponse) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v; want ErrInvalidResponse with %q", body, err, want)
		}
		srv.Close()
	}
}

func TestRegistrationClient_RegistersAndIsIdempotent(t *testing.T) {
	e := graphtest.New(t)
	c, err := graph.NewRegistrationClient(clientConfig(e))
	if err != nil {
		t.Fatal(err)
	}
	reg := graph.Registration{Service: "devices", EntityTypes: []string{"device", "sensor"}}
	for range 2 {
		if err := c.Register(context.Background(), reg); err != nil {
			t.Fatal(err)
		}
	}
	got := e.Authorities()
	if len(got) != 2 || got["device"] != "devices" || got["sensor"] != "devices" {
		t.Errorf("authorities = %v", got)
	}
}

func TestRegistrationClient_ConflictIsStatusError409(t *testing.T) {
	e := graphtest.New(t)
	c, _ := graph.NewRegistrationClient(clientConfig(e))
	if err := c.Register(context.Background(), graph.Registration{Service: "devices", EntityTypes: []string{"device"}}); err != nil {
		t.Fatal(err)
	}
	err := c.Register(context.Background(), graph.Registration{Service: "tenants", EntityTypes: []string{"tenant", "device"}})
	var se *graph.StatusError
	if !errors.As(err, &se) || se.StatusCode != http.StatusConflict || se.Path != graph.PathAuthorities {
		t.Fatalf("err = %v; want a *StatusError 409", err)
	}
	if _, ok := e.Authorities()["tenant"]; ok {
		t.Error("a refused registration claimed some of its types")
	}
}

func TestRegistrationClient_RefusesBadRegistrations(t *testing.T) {
	e := graphtest.New(t)
	c, _ := graph.NewRegistrationClient(clientConfig(e))
	for _, c2 := range []struct {
		r    graph.Registration
		want string
	}{
		{graph.Registration{EntityTypes: []string{"d"}}, "service is empty"},
		{graph.Registration{Service: "s"}, "entityTypes is empty"},
		{graph.Registration{Service: "s", EntityTypes: []string{"d", ""}}, "entityTypes[1] is empty"},
		{graph.Registration{Service: "s", EntityTypes: []string{"d", "d"}}, "lists \"d\" twice"},
	} {
		err := c.Register(context.Background(), c2.r)
		if !errors.Is(err, graph.ErrInvalidArgument) || !strings.Contains(err.Error(), c2.want) {
			t.Errorf("Register(%+v) = %v; want ErrInvalidArgument with %q", c2.r, err, c2.want)
		}
	}
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d requests sent", n)
	}
}

func TestGrantsClient_ReturnsGrantsWith64BitMasks(t *testing.T) {
	e := graphtest.New(t)
	want := []graph.Grant{
		{ResourceType: "device", ResourceID: "d1", Mask: math.MaxUint64},
		{ResourceType: "tenant", ResourceID: "t/1", Mask: 1 << 5},
	}
	e.SetGrants("user", "u 1", want)
	c, err := graph.NewGrantsClient(clientConfig(e))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Grants(context.Background(), "user", "u 1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("grants = %+v; want %+v", got, want)
	}
	if p := e.Requests()[0].Path; p != "/api/v3/graph/projections/user/u%201" {
		t.Errorf("path = %s; want the subject escaped", p)
	}

	// On the wire the mask is a decimal string.
	resp, err := e.Client().Get(e.URL() + graph.ProjectionPath("user", "u 1"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"mask":"18446744073709551615"`) {
		t.Errorf("body %s; want the mask as a decimal string", body)
	}
}

func TestGrantsClient_UnknownSubjectHasNoGrants(t *testing.T) {
	e := graphtest.New(t)
	c, _ := graph.NewGrantsClient(clientConfig(e))
	got, err := c.Grants(context.Background(), "user", "nobody")
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("Grants = %#v, %v; want an empty, non-nil list", got, err)
	}
}

func TestGrantsClient_RefusesMalformedAnswers(t *testing.T) {
	for body, want := range map[string]string{
		`{"grants":[{"resourceType":"d","resourceId":"1","mask":3}]}`:                                                    "does not decode",
		`{"grants":[{"resourceType":"d","resourceId":"1","mask":"-1"}]}`:                                                 "does not decode",
		`{"grants":[{"resourceType":"d","resourceId":"1","mask":"18446744073709551616"}]}`:                               "does not decode",
		`{"grants":[{"resourceType":"","resourceId":"1","mask":"1"}]}`:                                                   "grants[0] has an empty",
		`{"grants":[{"resourceType":"d","resourceId":"1","mask":"1"},{"resourceType":"d","resourceId":"1","mask":"2"}]}`: "appears twice",
		`{}`:              `no "grants" list`,
		`{"grants":null}`: `no "grants" list`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, body)
		}))
		c, _ := graph.NewGrantsClient(graph.ClientOptions{BaseURL: srv.URL, Client: srv.Client()})
		got, err := c.Grants(context.Background(), "user", "u1")
		if !errors.Is(err, graph.ErrInvalidResponse) || !strings.Contains(err.Error(), want) || got != nil {
			t.Errorf("%s: Grants = %v, %v; want nil, ErrInvalidResponse with %q", body, got, err, want)
		}
		srv.Close()
	}
}

func TestClients_NonSuccessIsStatusErrorWithBoundedBody(t *testing.T) {
	e := graphtest.New(t)
	e.Inject(graphtest.PathProjections, graphtest.Fault{Status: 500, Body: "engine on fire " + strings.Repeat("x", 5000)})
	c, _ := graph.NewGrantsClient(clientConfig(e))
	_, err := c.Grants(context.Background(), "user", "u1")
	var se *graph.StatusError
	if !errors.As(err, &se) || se.StatusCode != 500 || se.Path != "/api/v3/graph/projections/user/u1" || se.Method != http.MethodGet {
		t.Fatalf("err = %v; want a *StatusError 500 for the projection path", err)
	}
	if !strings.HasPrefix(se.Body, "engine on fire") || len(se.Body) > graph.DefaultBodyExcerpt+20 {
		t.Errorf("Body is %d bytes (%.40q…); want the start, at most about %d bytes", len(se.Body), se.Body, graph.DefaultBodyExcerpt)
	}
	if !strings.Contains(err.Error(), "500 Internal Server Error") {
		t.Errorf("Error() = %q; want the status", err)
	}
}

func TestClients_TimeoutAndCancellation(t *testing.T) {
	e := graphtest.New(t)
	e.SetLatency(graphtest.PathDefinitions, 10*time.Second)
	cfg := clientConfig(e)
	cfg.Timeout = 50 * time.Millisecond
	c, _ := graph.NewDefinitionsClient(cfg)
	_, err := c.Definitions(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no response within 50ms") || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v; want a timeout naming the 50ms", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = c.Definitions(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v; want context.Canceled", err)
	}
}

func TestClients_ValidateConfig(t *testing.T) {
	cases := []struct {
		cfg  graph.ClientOptions
		want string
	}{
		{graph.ClientOptions{Client: http.DefaultClient}, "BaseURL is empty"},
		{graph.ClientOptions{BaseURL: "graph:80", Client: http.DefaultClient}, "BaseURL"},
		{graph.ClientOptions{BaseURL: "https://g/?x", Client: http.DefaultClient}, "BaseURL \"https://g/?…\" has a query"},
		{graph.ClientOptions{BaseURL: "https://g"}, "Client is nil"},
		{graph.ClientOptions{BaseURL: "https://g", Client: http.DefaultClient, Timeout: -1}, "Timeout"},
	}
	for _, c := range cases {
		var errs []error
		_, err := graph.NewAuthorizationClient(c.cfg)
		errs = append(errs, err)
		_, err = graph.NewDefinitionsClient(c.cfg)
		errs = append(errs, err)
		_, err = graph.NewRegistrationClient(c.cfg)
		errs = append(errs, err)
		_, err = graph.NewGrantsClient(c.cfg)
		errs = append(errs, err)
		for _, err := range errs {
			if !errors.Is(err, graph.ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%+v: err = %v; want ErrInvalidOptions with %q", c.cfg, err, c.want)
			}
		}
	}
}

func TestGrant_Allows(t *testing.T) {
	g := graph.Grant{Mask: 0b101}
	for want, ok := range map[uint64]bool{0b1: true, 0b100: true, 0b101: true, 0b10: false, 0b111: false, 0: false} {
		if got := g.Allows(want); got != ok {
			t.Errorf("mask %#b Allows(%#b) = %v; want %v", g.Mask, want, got, ok)
		}
	}
}
