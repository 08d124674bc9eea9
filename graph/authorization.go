package graph

import (
	"context"
	"net/http"
)

// AuthorizationClient asks the engine permission questions, one round trip
// each. For many questions about one subject, a projection (GrantsClient and
// core/projection) answers locally instead.
type AuthorizationClient struct{ c *client }

// NewAuthorizationClient checks cfg and returns a client.
func NewAuthorizationClient(cfg ClientOptions) (*AuthorizationClient, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return &AuthorizationClient{c: c}, nil
}

// PermissionCheck is one question: may subject SubjectType/SubjectID do
// Permission on resource ResourceType/ResourceID? It is also the request
// body of POST PathAuthorize.
type PermissionCheck struct {
	SubjectType  string `json:"subjectType"`
	SubjectID    string `json:"subjectId"`
	Permission   string `json:"permission"`
	ResourceType string `json:"resourceType"`
	ResourceID   string `json:"resourceId"`
}

// Validate reports the first empty or malformed field, as an error wrapping
// ErrInvalidArgument.
func (q PermissionCheck) Validate() error {
	for _, f := range []struct{ name, v string }{
		{"subjectType", q.SubjectType}, {"subjectId", q.SubjectID}, {"permission", q.Permission},
		{"resourceType", q.ResourceType}, {"resourceId", q.ResourceID},
	} {
		if err := checkArgument(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

type checkResponse struct {
	Allowed *bool `json:"allowed"`
}

// Check answers q. A non-2xx answer is a *StatusError (400 for a
// permission the resource type does not define); a 2xx answer without
// "allowed" is ErrInvalidResponse, never read as a denial or a grant.
func (a *AuthorizationClient) Check(ctx context.Context, q PermissionCheck) (bool, error) {
	if err := q.Validate(); err != nil {
		return false, err
	}
	var r checkResponse
	if err := a.c.call(ctx, http.MethodPost, PathAuthorize, q, &r); err != nil {
		return false, err
	}
	if r.Allowed == nil {
		return false, invalidResponse("POST %s: the answer has no \"allowed\" field", PathAuthorize)
	}
	return *r.Allowed, nil
}

// checkArgument applies the payload rule for identifiers to a client
// argument, wrapping ErrInvalidArgument instead.
func checkArgument(field, v string) error {
	if err := checkName(field, v); err != nil {
		return invalidArgument("%s", trimSentinel(err, ErrInvalidPayload))
	}
	return nil
}

// trimSentinel is err's message without its sentinel's prefix.
func trimSentinel(err, sentinel error) string {
	msg, prefix := err.Error(), sentinel.Error()+": "
	if len(msg) > len(prefix) && msg[:len(prefix)] == prefix {
		return msg[len(prefix):]
	}
	return msg
}
