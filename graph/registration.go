package graph

import (
	"context"
	"net/http"
)

// RegistrationClient registers this service with the engine as the
// authority for entity types: the one service whose outbox announces them
// (graph.init) and names them (graph.metadata).
type RegistrationClient struct{ c *client }

// NewRegistrationClient checks cfg and returns a client.
func NewRegistrationClient(cfg ClientOptions) (*RegistrationClient, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return &RegistrationClient{c: c}, nil
}

// Registration claims entity types for a service. It is the request body
// of POST PathAuthorities.
type Registration struct {
	// Service names the registering service, as the engine knows it.
	Service string `json:"service"`
	// EntityTypes are the types it is the authority for; at least one.
	EntityTypes []string `json:"entityTypes"`
}

// Validate reports the first empty, malformed or repeated field, as an
// error wrapping ErrInvalidArgument.
func (r Registration) Validate() error {
	if err := checkArgument("service", r.Service); err != nil {
		return err
	}
	if len(r.EntityTypes) == 0 {
		return invalidArgument("entityTypes is empty; name at least one entity type")
	}
	seen := make(map[string]bool, len(r.EntityTypes))
	for i, t := range r.EntityTypes {
		if err := checkArgument("entityTypes["+itoa(i)+"]", t); err != nil {
			return err
		}
		if seen[t] {
			return invalidArgument("entityTypes lists %q twice", t)
		}
		seen[t] = true
	}
	return nil
}

// Register claims r.EntityTypes for r.Service. It is idempotent: services
// call it at every start. A type another service already holds is refused
// with a *StatusError of status 409.
func (c *RegistrationClient) Register(ctx context.Context, r Registration) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return c.c.call(ctx, http.MethodPost, PathAuthorities, r, nil)
}
