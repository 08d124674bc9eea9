package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/baton-go/baton/core/outbox"
	"github.com/baton-go/baton/graph"
)

// recorder is an EnqueueFunc that keeps what it was given, as a backend's
// enqueue on a transaction would write it.
type recorder struct{ entries []outbox.Entry }

func (r *recorder) enqueue(_ context.Context, id outbox.ID, lane string, payload []byte) error {
	if err := outbox.ValidateEntry(id, lane, payload); err != nil {
		return err
	}
	r.entries = append(r.entries, outbox.Entry{ID: id, Lane: lane, Payload: payload})
	return nil
}

func TestEnqueueInit_EncodesTheSeedFieldNames(t *testing.T) {
	var r recorder
	id := outbox.NewID()
	err := graph.EnqueueInit(context.Background(), r.enqueue, id, graph.InitPayload{
		ResourceType: "profile",
		ResourceID:   "p1",
		Relations:    []graph.Relation{{Relation: "parent", SubjectType: "user", SubjectID: "u1"}},
		RequestedBy:  "u1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.entries) != 1 || r.entries[0].ID != id || r.entries[0].Lane != graph.LaneInit {
		t.Fatalf("entries = %+v; want one graph.init entry with the given id", r.entries)
	}
	want := `{"resourceType":"profile","resourceId":"p1","relations":[{"relation":"parent","subjectType":"user","subjectId":"u1"}],"requestedBy":"u1"}`
	if got := string(r.entries[0].Payload); got != want {
		t.Errorf("payload\n got %s\nwant %s", got, want)
	}
}

func TestEnqueueInit_EncodesNoRelationsAsEmptyList(t *testing.T) {
	var r recorder
	err := graph.EnqueueInit(context.Background(), r.enqueue, outbox.NewID(),
		graph.InitPayload{ResourceType: "tenant", ResourceID: "t1", RequestedBy: "svc-tenants"})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(r.entries[0].Payload); !strings.Contains(got, `"relations":[]`) {
		t.Errorf("payload %s; want \"relations\":[]", got)
	}
}

func TestEnqueueMetadata_EncodesTheFieldNames(t *testing.T) {
	var r recorder
	err := graph.EnqueueMetadata(context.Background(), r.enqueue, outbox.NewID(),
		graph.MetadataPayload{EntityType: "device", EntityID: "d1", Label: "Boiler room"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"entityType":"device","entityId":"d1","label":"Boiler room"}`
	if r.entries[0].Lane != graph.LaneMetadata || string(r.entries[0].Payload) != want {
		t.Errorf("entry %s %s; want %s %s", r.entries[0].Lane, r.entries[0].Payload, graph.LaneMetadata, want)
	}
}

func TestEnqueue_RefusesInvalidPayloadsNamingTheField(t *testing.T) {
	okInit := graph.InitPayload{ResourceType: "device", ResourceID: "d1", RequestedBy: "u1"}
	rel := graph.Relation{Relation: "owner", SubjectType: "user", SubjectID: "u1"}
	initCases := []struct {
		edit func(*graph.InitPayload)
		want string
	}{
		{func(p *graph.InitPayload) { p.ResourceType = "" }, "resourceType is empty"},
		{func(p *graph.InitPayload) { p.ResourceID = "" }, "resourceId is empty"},
		{func(p *graph.InitPayload) { p.RequestedBy = "" }, "requestedBy is empty"},
		{func(p *graph.InitPayload) { p.ResourceID = "d\n1" }, "resourceId \"d\\n1\" contains a control character"},
		{func(p *graph.InitPayload) { p.ResourceID = "d\x001" }, "control character"},
		{func(p *graph.InitPayload) { p.ResourceType = "\xff" }, "not valid UTF-8"},
		{func(p *graph.InitPayload) { p.ResourceID = strings.Repeat("x", graph.MaxNameLength+1) }, "the limit is 512"},
		{func(p *graph.InitPayload) {
			p.Relations = []graph.Relation{rel, {SubjectType: "user", SubjectID: "u2"}}
		}, "relations[1].relation is empty"},
		{func(p *graph.InitPayload) { p.Relations = []graph.Relation{{Relation: "owner", SubjectID: "u2"}} }, "relations[0].subjectType is empty"},
		{func(p *graph.InitPayload) { p.Relations = []graph.Relation{{Relation: "owner", SubjectType: "user"}} }, "relations[0].subjectId is empty"},
	}
	for _, c := range initCases {
		var r recorder
		p := okInit
		c.edit(&p)
		err := graph.EnqueueInit(context.Background(), r.enqueue, outbox.NewID(), p)
		if !errors.Is(err, graph.ErrInvalidPayload) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("EnqueueInit(%+v) = %v; want ErrInvalidPayload with %q", p, err, c.want)
		}
		if len(r.entries) != 0 {
			t.Errorf("an invalid payload was enqueued")
		}
	}

	metaCases := []struct {
		p    graph.MetadataPayload
		want string
	}{
		{graph.MetadataPayload{EntityID: "d1"}, "entityType is empty"},
		{graph.MetadataPayload{EntityType: "device"}, "entityId is empty"},
		{graph.MetadataPayload{EntityType: "device", EntityID: "d1", Label: "a\x00b"}, "label contains a NUL"},
		{graph.MetadataPayload{EntityType: "device", EntityID: "d1", Label: "\xfe"}, "label is not valid UTF-8"},
		{graph.MetadataPayload{EntityType: "device", EntityID: "d1", Label: strings.Repeat("x", graph.MaxLabelLength+1)}, "label is 4097 bytes"},
	}
	for _, c := range metaCases {
		var r recorder
		err := graph.EnqueueMetadata(context.Background(), r.enqueue, outbox.NewID(), c.p)
		if !errors.Is(err, graph.ErrInvalidPayload) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("EnqueueMetadata(%+v) = %v; want ErrInvalidPayload with %q", c.p, err, c.want)
		}
	}
}

func TestEnqueue_AllowsAnEmptyLabel(t *testing.T) {
	var r recorder
	if err := graph.EnqueueMetadata(context.Background(), r.enqueue, outbox.NewID(),
		graph.MetadataPayload{EntityType: "device", EntityID: "d1"}); err != nil {
		t.Fatalf("an empty label (removed) was refused: %v", err)
	}
}

func TestEnqueue_RefusesNilIDAndNilFunc(t *testing.T) {
	p := graph.InitPayload{ResourceType: "device", ResourceID: "d1", RequestedBy: "u1"}
	var r recorder
	if err := graph.EnqueueInit(context.Background(), r.enqueue, outbox.NilID, p); !errors.Is(err, outbox.ErrInvalidEntry) {
		t.Errorf("nil id: %v; want outbox.ErrInvalidEntry", err)
	}
	if err := graph.EnqueueInit(context.Background(), nil, outbox.NewID(), p); !errors.Is(err, graph.ErrInvalidArgument) {
		t.Errorf("nil enqueue: %v; want ErrInvalidArgument", err)
	}
}

func TestEnqueue_ReturnsTheBackendError(t *testing.T) {
	boom := errors.New("tx is closed")
	fail := func(context.Context, outbox.ID, string, []byte) error { return boom }
	err := graph.EnqueueMetadata(context.Background(), fail, outbox.NewID(), graph.MetadataPayload{EntityType: "d", EntityID: "1"})
	if !errors.Is(err, boom) {
		t.Errorf("got %v; want the backend's error", err)
	}
}

func TestPayloads_RoundTripThroughJSON(t *testing.T) {
	in := graph.InitPayload{ResourceType: "device", ResourceID: "d1", RequestedBy: "u1",
		Relations: []graph.Relation{{Relation: "owner", SubjectType: "user", SubjectID: "u1"}}}
	b, _ := json.Marshal(in)
	var out graph.InitPayload
	if err := json.Unmarshal(b, &out); err != nil || out.Relations[0] != in.Relations[0] || out.ResourceID != "d1" {
		t.Errorf("round trip = %+v, %v", out, err)
	}
}
