package pgxstore

import (
	"context"
	"errors"
	"testing"

	"github.com/baton-go/baton/core/projection"
	"github.com/baton-go/baton/graph"
	"github.com/baton-go/baton/graph/graphtest"
)

// graphSource adapts the graph engine's grants client to projection.Source.
type graphSource struct{ c *graph.GrantsClient }

func (s graphSource) Grants(ctx context.Context, subject projection.Subject) ([]projection.Grant, error) {
	gs, err := s.c.Grants(ctx, subject.Type, subject.ID)
	if err != nil {
		return nil, err
	}
	out := make([]projection.Grant, len(gs))
	for i, g := range gs {
		out[i] = projection.Grant{ResourceType: g.ResourceType, ResourceID: g.ResourceID, Mask: projection.Mask(g.Mask)}
	}
	return out, nil
}

// TestProjectionStore_AfterCrashTruncationReaderRefreshesFromTheGraphEngine
// is the UNLOGGED caveat against the fake graph engine: the grants come from
// its projection endpoint through graph.GrantsClient, the permission bits
// from its definitions through graph.DefinitionsClient.
func TestProjectionStore_AfterCrashTruncationReaderRefreshesFromTheGraphEngine(t *testing.T) {
	env, st := migratedProjectionStore(t)
	ctx := testContext(t)
	engine := graphtest.New(t)
	engine.SetDefinitions(graph.Definitions{EntityTypes: []graph.EntityType{{
		Name:        "doc",
		Permissions: []graph.Permission{{Name: "read", Bit: 0}, {Name: "write", Bit: 1}, {Name: "own", Bit: 63}},
	}}})
	engine.SetGrants("user", "alice", []graph.Grant{
		{ResourceType: "doc", ResourceID: "plan", Mask: 1<<63 | 1},
		{ResourceType: "doc", ResourceID: "budget", Mask: 0b11},
	})
	cfg := graph.ClientOptions{BaseURL: engine.URL(), Client: engine.Client()}
	grants, err := graph.NewGrantsClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	definitions, err := graph.NewDefinitionsClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := definitions.Definitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	docBits, err := defs.PermissionBits("doc")
	if err != nil {
		t.Fatal(err)
	}
	bits := projection.Bits(docBits)

	local, err := projection.NewLocalReader(st)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := projection.NewReader(projection.ReaderConfig{Store: st, Source: graphSource{grants}})
	if err != nil {
		t.Fatal(err)
	}
	alice := projection.Subject{Type: "user", ID: "alice"}
	if own, err := reader.HasPermission(ctx, alice, "doc", "plan", bits, "own"); err != nil || !own {
		t.Fatalf("before the crash: own = %v, %v", own, err)
	}

	// Requests for alice's projection.
	asked := func() int {
		n := 0
		for _, r := range engine.RequestsTo(graph.PathProjections) {
			if r.Path == graph.ProjectionPath("user", "alice") {
				n++
			}
		}
		return n
	}

	truncateAsACrashWould(t, ctx, env)
	fetched := asked()

	if held, err := local.HasPermission(ctx, alice, "doc", "budget", bits, "write"); !errors.Is(err, projection.ErrNoProjection) || held {
		t.Fatalf("LocalReader after the crash = %v, %v; want ErrNoProjection (refresh), not an answer", held, err)
	}
	write, err := reader.HasPermission(ctx, alice, "doc", "budget", bits, "write")
	if err != nil || !write {
		t.Fatalf("Reader after the crash = %v, %v; want it to refresh from the engine and answer true", write, err)
	}
	if n := asked() - fetched; n != 1 {
		t.Errorf("the engine's projection endpoint was asked %d times after the crash, want 1", n)
	}
	for perm, want := range map[string]bool{"read": true, "write": false, "own": true} {
		if held, err := local.HasPermission(ctx, alice, "doc", "plan", bits, perm); err != nil || held != want {
			t.Errorf("LocalReader after the refresh: %s on plan = %v, %v; want %v", perm, held, err, want)
		}
	}
	// A subject the engine knows nothing about has no access: an empty
	// generation, not an error.
	if held, err := reader.HasPermission(ctx, projection.Subject{Type: "user", ID: "mallory"}, "doc", "plan", bits, "read"); err != nil || held {
		t.Errorf("a subject without grants: %v, %v; want false, nil", held, err)
	}
	// An engine that cannot answer leaves the subject unknown, never "no access".
	engine.Fail(graph.PathProjections, 503)
	held, err := reader.HasPermission(ctx, projection.Subject{Type: "user", ID: "bob"}, "doc", "plan", bits, "read")
	if !errors.Is(err, projection.ErrNoProjection) || held {
		t.Errorf("with the engine failing: %v, %v; want an error wrapping ErrNoProjection", held, err)
	}
}
