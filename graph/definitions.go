package graph

import (
	"context"
	"fmt"
	"net/http"
)

// MaxPermissionBit is the highest bit a permission may use: a grant's mask
// is 64 bits wide.
const MaxPermissionBit = 63

// Definitions is the engine's model: every entity type, its relations and
// its permissions. It is the body of GET PathDefinitions.
type Definitions struct {
	EntityTypes []EntityType `json:"entityTypes"`
}

// EntityType is one type of entity the engine knows.
type EntityType struct {
	Name        string               `json:"name"`
	Relations   []RelationDefinition `json:"relations"`
	Permissions []Permission         `json:"permissions"`
}

// RelationDefinition is a relation an entity type has, and which subject
// types may stand in it.
type RelationDefinition struct {
	Name         string   `json:"name"`
	SubjectTypes []string `json:"subjectTypes"`
}

// Permission is a permission of an entity type and its bit in a grant's
// mask. Bits are per entity type: "read" may be bit 0 of one type and bit 3
// of another.
type Permission struct {
	Name string `json:"name"`
	// Bit is 0..MaxPermissionBit, unique within the entity type.
	Bit int `json:"bit"`
}

// Mask is the permission's bit as a mask, or 0 for a bit out of range.
func (p Permission) Mask() uint64 {
	if p.Bit < 0 || p.Bit > MaxPermissionBit {
		return 0
	}
	return 1 << uint(p.Bit)
}

// Validate checks what a projection relies on: entity type names unique and
// non-empty, and within each type permission names and bits unique, bits in
// 0..MaxPermissionBit. The error wraps ErrInvalidResponse.
func (d Definitions) Validate() error {
	types := make(map[string]bool, len(d.EntityTypes))
	for i, t := range d.EntityTypes {
		at := fmt.Sprintf("entityTypes[%d]", i)
		if err := checkName("name", t.Name); err != nil {
			return invalidResponse("%s.%s", at, trimSentinel(err, ErrInvalidPayload))
		}
		if types[t.Name] {
			return invalidResponse("%s: entity type %q is defined twice", at, t.Name)
		}
		types[t.Name] = true
		for j, r := range t.Relations {
			if err := checkName("name", r.Name); err != nil {
				return invalidResponse("%s.relations[%d].%s", at, j, trimSentinel(err, ErrInvalidPayload))
			}
		}
		names := map[string]bool{}
		bits := map[int]string{}
		for j, p := range t.Permissions {
			pat := fmt.Sprintf("%s.permissions[%d]", at, j)
			if err := checkName("name", p.Name); err != nil {
				return invalidResponse("%s.%s", pat, trimSentinel(err, ErrInvalidPayload))
			}
			if names[p.Name] {
				return invalidResponse("%s: permission %q of %q is defined twice", pat, p.Name, t.Name)
			}
			names[p.Name] = true
			if p.Bit < 0 || p.Bit > MaxPermissionBit {
				return invalidResponse("%s: permission %q of %q has bit %d; bits are 0..%d", pat, p.Name, t.Name, p.Bit, MaxPermissionBit)
			}
			if other, dup := bits[p.Bit]; dup {
				return invalidResponse("%s: permissions %q and %q of %q share bit %d", pat, other, p.Name, t.Name, p.Bit)
			}
			bits[p.Bit] = p.Name
		}
	}
	return nil
}

// EntityType returns the named entity type.
func (d Definitions) EntityType(name string) (EntityType, bool) {
	for _, t := range d.EntityTypes {
		if t.Name == name {
			return t, true
		}
	}
	return EntityType{}, false
}

// PermissionBits maps each permission of entityType to its bit number,
// which is what reading a projection's Mask needs: permission p is granted
// when mask&(1<<bits[p]) != 0.
func (d Definitions) PermissionBits(entityType string) (map[string]uint, error) {
	t, ok := d.EntityType(entityType)
	if !ok {
		return nil, fmt.Errorf("baton/graph: entity type %q is not defined", entityType)
	}
	bits := make(map[string]uint, len(t.Permissions))
	for _, p := range t.Permissions {
		if p.Bit < 0 || p.Bit > MaxPermissionBit {
			return nil, fmt.Errorf("baton/graph: permission %q of %q has bit %d; bits are 0..%d", p.Name, entityType, p.Bit, MaxPermissionBit)
		}
		bits[p.Name] = uint(p.Bit)
	}
	return bits, nil
}

// Mask is the mask with the bits of the named permissions of entityType
// set; a grant whose mask contains it holds all of them. An unknown type or
// permission is an error, never an empty mask (which every grant contains).
func (d Definitions) Mask(entityType string, permissions ...string) (uint64, error) {
	bits, err := d.PermissionBits(entityType)
	if err != nil {
		return 0, err
	}
	var m uint64
	for _, name := range permissions {
		b, ok := bits[name]
		if !ok {
			return 0, fmt.Errorf("baton/graph: entity type %q has no permission %q", entityType, name)
		}
		m |= 1 << b
	}
	return m, nil
}

// DefinitionsClient reads the engine's model.
type DefinitionsClient struct{ c *client }

// NewDefinitionsClient checks cfg and returns a client.
func NewDefinitionsClient(cfg ClientOptions) (*DefinitionsClient, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	return &DefinitionsClient{c: c}, nil
}

// Definitions fetches the model and validates it (Definitions.Validate):
// a model with a duplicate or out-of-range bit would make every projection
// read with it wrong, so it is refused here.
func (c *DefinitionsClient) Definitions(ctx context.Context) (Definitions, error) {
	var d Definitions
	if err := c.c.call(ctx, http.MethodGet, PathDefinitions, nil, &d); err != nil {
		return Definitions{}, err
	}
	if err := d.Validate(); err != nil {
		return Definitions{}, err
	}
	return d, nil
}
