package conformance

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/baton-go/baton/core/projection"
)

// What every method refuses: bad input, an ended context, a database
// without the tables.

func (s *projectionSuite) inputChecks() []check {
	return area(s.setup,
		subtest[projectionBundle]{"InvalidInputWritesNothing", s.invalidInput},
		subtest[projectionBundle]{"CancelledContextIsRecognisable", s.cancelled},
		subtest[projectionBundle]{"MissingTablesAreASchemaMismatch", s.unmigrated},
	)
}

func (s *projectionSuite) invalidInput(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	kim := user("kim")
	good := grantSet("doc", "k", 2, 1)
	badSubjects := map[string]projection.Subject{
		"empty type":            {Type: "", ID: "kim"},
		"empty ID":              {Type: "user", ID: ""},
		"type over 128 bytes":   {Type: strings.Repeat("t", projection.MaxSubjectTypeLength+1), ID: "kim"},
		"ID over 256 bytes":     {Type: "user", ID: strings.Repeat("é", projection.MaxSubjectIDLength/2) + "x"},
		"NUL byte in the ID":    {Type: "user", ID: "k\x00im"},
		"invalid UTF-8 in ID":   {Type: "user", ID: "k\xffim"},
		"invalid UTF-8 in type": {Type: "us\xffer", ID: "kim"},
	}
	for what, subject := range badSubjects {
		if err := h.Store.Replace(ctx, subject, mustReserve(t, ctx, h.Store), good); !errors.Is(err, projection.ErrInvalidSubject) {
			t.Errorf("Replace with a subject with %s: err = %v, want ErrInvalidSubject", what, err)
		}
		if _, _, err := h.Store.Mask(ctx, subject, "doc", "k-00000"); !errors.Is(err, projection.ErrInvalidSubject) {
			t.Errorf("Mask with a subject with %s: err = %v, want ErrInvalidSubject", what, err)
		}
		if _, err := h.Store.Snapshot(ctx, subject); !errors.Is(err, projection.ErrInvalidSubject) {
			t.Errorf("Snapshot with a subject with %s: err = %v, want ErrInvalidSubject", what, err)
		}
	}
	// The limits themselves are accepted.
	longest := projection.Subject{Type: strings.Repeat("t", projection.MaxSubjectTypeLength), ID: strings.Repeat("é", projection.MaxSubjectIDLength/2)}
	gen := mustReplace(t, ctx, h.Store, longest, good)
	checkSnapshot(t, ctx, h.Second, longest, gen, good)

	badGrants := map[string][]projection.Grant{
		"an empty resource type":   {{ResourceType: "", ResourceID: "x"}},
		"an empty resource ID":     {{ResourceType: "doc", ResourceID: ""}},
		"a resource listed twice":  {{ResourceType: "doc", ResourceID: "x", Mask: 1}, {ResourceType: "doc", ResourceID: "y"}, {ResourceType: "doc", ResourceID: "x", Mask: 2}},
		"a resource ID too long":   {{ResourceType: "doc", ResourceID: strings.Repeat("r", projection.MaxResourceIDLength+1)}},
		"a NUL byte in a resource": {{ResourceType: "doc", ResourceID: "a\x00b"}},
	}
	for what, grants := range badGrants {
		bad := append(slices.Clone(good), grants...)
		if err := h.Store.Replace(ctx, kim, mustReserve(t, ctx, h.Store), bad); !errors.Is(err, projection.ErrInvalidGrant) {
			t.Errorf("Replace with %s: err = %v, want ErrInvalidGrant", what, err)
		}
	}
	// A generation must be one the store reserved and does not hold yet.
	unused := mustReserve(t, ctx, h.Second)
	for what, gen := range map[string]projection.Generation{
		"generation 0":                 0,
		"a generation never reserved":  unused + 1_000_000,
		"a generation already written": mustReplace(t, ctx, h.Store, user("kim's neighbour"), good),
	} {
		if err := h.Store.Replace(ctx, kim, gen, good); !errors.Is(err, projection.ErrInvalidGeneration) {
			t.Errorf("Replace with %s: err = %v, want ErrInvalidGeneration", what, err)
		}
	}
	// Nor did the never-reserved number move the store on: a number
	// reserved now still lets its Replace through.
	if err := h.Store.Replace(ctx, user("kim's other neighbour"), mustReserve(t, ctx, h.Store), good); err != nil {
		t.Errorf("Replace after one with a never-reserved generation: %v", err)
	}
	_, err := h.Second.Snapshot(ctx, kim)
	wantNoProjection(t, "Snapshot after only invalid Replace calls", err)
	if infos := mustGenerations(t, ctx, h.Second, kim); len(infos) != 0 {
		t.Errorf("invalid Replace calls left generations: %+v", infos)
	}
	// Nor do they disturb an existing generation.
	gen = mustReplace(t, ctx, h.Store, kim, good)
	if err := h.Store.Replace(ctx, kim, mustReserve(t, ctx, h.Store), append(slices.Clone(good), good[0])); !errors.Is(err, projection.ErrInvalidGrant) {
		t.Errorf("Replace with a duplicate: err = %v, want ErrInvalidGrant", err)
	}
	checkSnapshot(t, ctx, h.Second, kim, gen, good)
	if _, _, err := h.Store.Mask(ctx, kim, "", "x"); !errors.Is(err, projection.ErrInvalidGrant) {
		t.Errorf("Mask of an empty resource type: err = %v, want ErrInvalidGrant", err)
	}
}

// cancelled: every method called with an ended context fails with an
// error that still wraps the context's, and a Replace writes nothing.
func (s *projectionSuite) cancelled(t *testing.T, env projectionBundle) {
	h, ctx := env.h, env.ctx
	subject := user("cancelled")
	gen := mustReserve(t, ctx, h.Store)
	checkCancelled(t, projectionCalls(h.Store, subject, gen)...)
	if infos := mustGenerations(t, ctx, h.Store, subject); len(infos) != 0 {
		t.Errorf("a Replace with a cancelled context wrote generations: %+v", infos)
	}
}

// unmigrated: over a database without the projection tables, every method
// fails with the adapter's schema-mismatch error, never with
// ErrNoProjection: a refresh would not help.
func (s *projectionSuite) unmigrated(t *testing.T, env projectionBundle) {
	if env.h.Unmigrated == nil {
		t.Skip("the harness has no Unmigrated store (ProjectionHarness.Unmigrated)")
	}
	st := env.h.Unmigrated(t).Store
	if st == nil {
		t.Fatal("conformance: Unmigrated returned no Store")
	}
	calls := projectionCalls(st, user("unmigrated"), 1)
	checkSchemaMismatch(t, env.h.SchemaMismatch, calls...)
	for _, c := range calls {
		if err := c.do(env.ctx); errors.Is(err, projection.ErrNoProjection) {
			t.Errorf("%s without the tables: err = %v; it must not wrap ErrNoProjection, which calls for a refresh", c.what, err)
		}
	}
}

// projectionCalls makes one call of every Store method for subject.
func projectionCalls(st projection.Store, subject projection.Subject, gen projection.Generation) []call {
	grants := grantSet("doc", "c", 3, 1)
	return []call{
		{"Reserve", func(ctx context.Context) error { return ignore(st.Reserve(ctx)) }},
		{"Replace", func(ctx context.Context) error { return st.Replace(ctx, subject, gen, grants) }},
		{"Mask", func(ctx context.Context) error {
			_, _, err := st.Mask(ctx, subject, "doc", "c-00000")
			return err
		}},
		{"Snapshot", func(ctx context.Context) error { return ignore(st.Snapshot(ctx, subject)) }},
		{"Generations", func(ctx context.Context) error { return ignore(st.Generations(ctx, subject)) }},
		{"Sweep", func(ctx context.Context) error { return ignore(st.Sweep(ctx)) }},
	}
}
