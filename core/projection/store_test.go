package projection_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/baton-go/baton/core/projection"
)

func TestSubject_ValidateNamesTheFieldAndTheLimits(t *testing.T) {
	ok := []projection.Subject{
		{Type: "user", ID: "alice"},
		{Type: strings.Repeat("t", projection.MaxSubjectTypeLength), ID: strings.Repeat("i", projection.MaxSubjectIDLength)},
	}
	for _, s := range ok {
		if err := s.Validate(); err != nil {
			t.Errorf("Validate(%d-byte type, %d-byte ID) = %v", len(s.Type), len(s.ID), err)
		}
	}
	bad := map[string]projection.Subject{
		"Subject.Type": {Type: "", ID: "alice"},
		"Subject.ID":   {Type: "user", ID: strings.Repeat("i", projection.MaxSubjectIDLength+1)},
	}
	for field, s := range bad {
		err := s.Validate()
		if !errors.Is(err, projection.ErrInvalidSubject) || !strings.Contains(err.Error(), field) {
			t.Errorf("Validate(%q) = %v, want ErrInvalidSubject naming %s", s, err, field)
		}
	}
	if err := (projection.Subject{Type: strings.Repeat("t", projection.MaxSubjectTypeLength+1), ID: "x"}).Validate(); !errors.Is(err, projection.ErrInvalidSubject) {
		t.Errorf("a 129-byte type: %v", err)
	}
}

func TestValidateGrants_AcceptsAnEmptySetAndRefusesDuplicates(t *testing.T) {
	if err := projection.ValidateGrants(nil); err != nil {
		t.Errorf("ValidateGrants(nil) = %v; an empty set means no access", err)
	}
	grants := []projection.Grant{
		{ResourceType: "doc", ResourceID: "1", Mask: 1},
		{ResourceType: "folder", ResourceID: "1", Mask: 1},
		{ResourceType: "doc", ResourceID: "1", Mask: 2},
	}
	err := projection.ValidateGrants(grants)
	if !errors.Is(err, projection.ErrInvalidGrant) || !strings.Contains(err.Error(), "grants[0] and grants[2]") {
		t.Errorf("ValidateGrants(duplicate) = %v, want ErrInvalidGrant naming both", err)
	}
	err = projection.ValidateGrants([]projection.Grant{{ResourceType: "doc", ResourceID: "1"}, {ResourceType: "doc"}})
	if !errors.Is(err, projection.ErrInvalidGrant) || !strings.Contains(err.Error(), "grants[1].ResourceID") {
		t.Errorf("ValidateGrants(empty ID) = %v, want ErrInvalidGrant naming grants[1].ResourceID", err)
	}
}

func TestCompareGrants_OrdersByTypeThenIDByteWise(t *testing.T) {
	grants := []projection.Grant{
		{ResourceType: "folder", ResourceID: "a"},
		{ResourceType: "doc", ResourceID: "b"},
		{ResourceType: "doc", ResourceID: "B"},
		{ResourceType: "doc", ResourceID: "ä"},
	}
	slices.SortFunc(grants, projection.CompareGrants)
	var got []string
	for _, g := range grants {
		got = append(got, g.ResourceType+"/"+g.ResourceID)
	}
	want := []string{"doc/B", "doc/b", "doc/ä", "folder/a"}
	if !slices.Equal(got, want) {
		t.Errorf("order = %q, want %q", got, want)
	}
}
