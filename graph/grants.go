package graph

import (
	"context"
	"net/http"
	"strconv"
)

// Grant is what a subject may do on one resource: the permissions whose
// bits (Definitions.PermissionBits of ResourceType) are set in Mask.
//
// On the wire Mask is a decimal string, because a 64-bit unsigned value
// does not survive JSON readers that hold numbers as doubles.
type Grant struct {
	ResourceType string `json:"resourceType"`
	ResourceID   string `json:"resourceId"`
	Mask         uint64 `json:"mask,string"`
}

// Allows reports whether the grant holds every bit of want (a mask from
// Definitions.Mask or Permission.Mask). An empty want is never allowed, so
// that a lookup that produced no bits cannot read as a grant.
func (g Grant) Allows(want uint64) bool { return want != 0 && g.Mask&want == want }

// Grants is the body of GET PathProjections.
type Grants struct {
	SubjectType string  `json:"subjectType"`
	SubjectID   string  `json:"subjectId"`
	Grants      []Grant `json:"grants"`
}

// GrantsClient fetches a subject's grants: the source of a projection
// (core/projection keeps them locally and answers from them).
type GrantsClient struct{ c *client }

// NewGrantsClient checks cfg and returns a client.
func NewGrantsClient(cfg ClientOptions) (*GrantsClient, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return &GrantsClient{c: c}, nil
}

// Grants returns every grant of the subject, one per resource. An empty
// list means the subject may do nothing, so it is only ever the engine's
// explicit answer, never the result of a failure: any failure, and an
// answer without a "grants" list, is an error.
func (c *GrantsClient) Grants(ctx context.Context, subjectType, subjectID string) ([]Grant, error) {
	if err := checkArgument("subjectType", subjectType); err != nil {
		return nil, err
	}
	if err := checkArgument("subjectId", subjectID); err != nil {
		return nil, err
	}
	path := ProjectionPath(subjectType, subjectID)
	var r struct {
		Grants *[]Grant `json:"grants"`
	}
	if err := c.c.call(ctx, http.MethodGet, path, nil, &r); err != nil {
		return nil, err
	}
	if r.Grants == nil {
		// Not the same as an empty list: nothing was said about access.
		return nil, invalidResponse("GET %s: the answer has no \"grants\" list", path)
	}
	seen := make(map[[2]string]bool, len(*r.Grants))
	for i, g := range *r.Grants {
		if g.ResourceType == "" || g.ResourceID == "" {
			return nil, invalidResponse("GET %s: grants[%d] has an empty resourceType or resourceId", path, i)
		}
		// Two masks for one resource leave its access ambiguous.
		k := [2]string{g.ResourceType, g.ResourceID}
		if seen[k] {
			return nil, invalidResponse("GET %s: grants[%d]: resource %s/%s appears twice", path, i, g.ResourceType, g.ResourceID)
		}
		seen[k] = true
	}
	return *r.Grants, nil
}

func itoa(i int) string { return strconv.Itoa(i) }
