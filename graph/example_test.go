package graph_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
)

// A producer enqueues the two standard lanes; the processors deliver them.
// Here the enqueue function keeps the entries in a slice and the example
// hands each one to its lane's processor, which is what the outbox driver
// does (processors go into outbox.Config{Processors: procs, …}).
func ExampleStandardProcessors() {
	engine, err := graphtest.NewEngine() // the engine's real address in production
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	ctx := context.Background()

	// Producer side, inside the transaction that created the device and
	// after its write to the device row. With PostgreSQL the enqueue
	// function is a closure over the transaction:
	//	func(ctx context.Context, id outbox.ID, lane string, p []byte) error {
	//		return pgxstore.Enqueue(ctx, tx, id, lane, p)
	//	}
	var table []outbox.Entry
	enqueue := func(_ context.Context, id outbox.ID, lane string, payload []byte) error {
		table = append(table, outbox.Entry{ID: id, Lane: lane, Payload: payload})
		return nil
	}
	err = graph.EnqueueInit(ctx, enqueue, outbox.NewID(), graph.InitPayload{
		ResourceType: "device",
		ResourceID:   "d1",
		Relations:    []graph.Relation{{Relation: "owner", SubjectType: "user", SubjectID: "u1"}},
		RequestedBy:  "u1",
	})
	if err != nil {
		panic(err)
	}
	err = graph.EnqueueMetadata(ctx, enqueue, outbox.NewID(), graph.MetadataPayload{EntityType: "device", EntityID: "d1", Label: "Boiler room"})
	if err != nil {
		panic(err)
	}

	// Driver side.
	procs, err := graph.StandardProcessors(graph.ProcessorOptions{
		DeliveryURL: engine.URL(),
		Client:      engine.Client(), // carries this service's credentials in production
	})
	if err != nil {
		panic(err) // names the field: a bad DeliveryURL fails here, at startup
	}
	byLane := map[string]outbox.Processor{}
	for _, p := range procs {
		byLane[p.Lane()] = p
	}
	for _, e := range table { // each entry is a run of one here
		outcomes, _ := byLane[e.Lane].Deliver(ctx, []outbox.Entry{e})
		fmt.Println(e.Lane, outcomes[0].Kind)
	}
	label, _ := engine.Label("device", "d1")
	fmt.Println("the engine calls device d1", label)

	// Output:
	// graph.init delivered
	// graph.metadata delivered
	// the engine calls device d1 Boiler room
}

// bearerToken is a RoundTripper that reaches the engine as this service.
type bearerToken struct {
	token string // from the service's own token source in production
	next  http.RoundTripper
}

func (b *bearerToken) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context()) // a RoundTripper must not modify the caller's request
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Credentials live in the caller's *http.Client. Without them the engine
// answers 401, which is a retry: the outbox stalls until they are fixed.
func ExampleProcessorOptions_bearerToken() {
	engine, err := graphtest.NewEngine()
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	engine.RequireBearer("service-token")

	entry := outbox.Entry{
		ID:      outbox.NewID(),
		Lane:    graph.LaneMetadata,
		Payload: []byte(`{"entityType":"device","entityId":"d1","label":"Pump"}`),
	}
	for _, client := range []*http.Client{
		engine.Client(), // no credentials
		{Transport: &bearerToken{token: "service-token", next: engine.Client().Transport}},
	} {
		procs, err := graph.StandardProcessors(graph.ProcessorOptions{DeliveryURL: engine.URL(), Client: client})
		if err != nil {
			panic(err)
		}
		outcomes, _ := procs[1].Deliver(context.Background(), []outbox.Entry{entry})
		fmt.Println(outcomes[0].Kind, outcomes[0].Reason)
	}

	// Output:
	// retry PUT /api/v3/graph/entities/device/d1/metadata: 401 Unauthorized: {"error":"missing or wrong bearer token"}
	// delivered
}

// Reading a subject's grants and testing them against the model's bits.
func ExampleGrantsClient() {
	engine, err := graphtest.NewEngine()
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	engine.SetDefinitions(graph.Definitions{EntityTypes: []graph.EntityType{{
		Name:        "device",
		Permissions: []graph.Permission{{Name: "read", Bit: 0}, {Name: "write", Bit: 1}},
	}}})
	engine.SetGrants("user", "u1", []graph.Grant{
		{ResourceType: "device", ResourceID: "d1", Mask: 0b11},
		{ResourceType: "device", ResourceID: "d2", Mask: 0b01},
	})
	ctx := context.Background()
	cfg := graph.ClientOptions{BaseURL: engine.URL(), Client: engine.Client()}
	defsClient, err := graph.NewDefinitionsClient(cfg)
	if err != nil {
		panic(err)
	}
	grantsClient, err := graph.NewGrantsClient(cfg)
	if err != nil {
		panic(err)
	}

	defs, err := defsClient.Definitions(ctx)
	if err != nil {
		panic(err)
	}
	write, err := defs.Mask("device", "write")
	if err != nil {
		panic(err)
	}
	grants, err := grantsClient.Grants(ctx, "user", "u1")
	if err != nil {
		panic(err)
	}
	for _, g := range grants {
		fmt.Printf("%s %s mask=%d write=%v\n", g.ResourceType, g.ResourceID, g.Mask, g.Allows(write))
	}

	// Output:
	// device d1 mask=3 write=true
	// device d2 mask=1 write=false
}

// One permission question, and the typed error for a refused one.
func ExampleAuthorizationClient_Check() {
	engine, err := graphtest.NewEngine()
	if err != nil {
		panic(err)
	}
	defer engine.Close()
	engine.SetDefinitions(graph.Definitions{EntityTypes: []graph.EntityType{{
		Name: "device", Permissions: []graph.Permission{{Name: "read", Bit: 0}},
	}}})
	engine.SetGrants("user", "u1", []graph.Grant{{ResourceType: "device", ResourceID: "d1", Mask: 1}})

	authz, err := graph.NewAuthorizationClient(graph.ClientOptions{BaseURL: engine.URL(), Client: engine.Client()})
	if err != nil {
		panic(err)
	}
	q := graph.PermissionCheck{SubjectType: "user", SubjectID: "u1", Permission: "read", ResourceType: "device", ResourceID: "d1"}
	allowed, err := authz.Check(context.Background(), q)
	fmt.Println(allowed, err)

	q.Permission = "fly"
	_, err = authz.Check(context.Background(), q)
	var se *graph.StatusError
	if errors.As(err, &se) {
		fmt.Println(se.StatusCode, se.Path)
	}

	// Output:
	// true <nil>
	// 400 /api/v3/graph/authorize
}
