package workrow_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

func validSpec() workrow.ClaimSpec {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return workrow.ClaimSpec{
		LockID:     workrow.NewLockID(),
		Now:        now,
		LeaseUntil: now.Add(time.Minute),
		BatchSize:  20,
		Eligible:   workrow.And(workrow.IsNull("completed_at"), workrow.Lt("attempts", 8), workrow.Gt("expires_at", workrow.Now)),
		Order:      []workrow.Order{workrow.Asc("created_at")},
		OnClaim:    []workrow.Set{workrow.Add("attempts", 1), workrow.Assign("claimed_at", workrow.Now)},
	}
}

func TestClaimSpec_ValidateAcceptsACompleteSpec(t *testing.T) {
	if err := validSpec().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestClaimSpec_ValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		want   string
		change func(*workrow.ClaimSpec)
	}{
		{"ClaimSpec.LockID is zero", func(s *workrow.ClaimSpec) { s.LockID = workrow.LockID{} }},
		{"ClaimSpec.Now is zero", func(s *workrow.ClaimSpec) { s.Now = time.Time{} }},
		{"ClaimSpec.LeaseUntil", func(s *workrow.ClaimSpec) { s.LeaseUntil = s.Now }},
		{"ClaimSpec.LeaseUntil", func(s *workrow.ClaimSpec) { s.LeaseUntil = s.Now.Add(-time.Second) }},
		{"ClaimSpec.BatchSize is 0", func(s *workrow.ClaimSpec) { s.BatchSize = 0 }},
		{"ClaimSpec.BatchSize is 1001", func(s *workrow.ClaimSpec) { s.BatchSize = 1001 }},
		{"ClaimSpec.Eligible is empty", func(s *workrow.ClaimSpec) { s.Eligible = workrow.Cond{} }},
		{"ClaimSpec.Eligible: And has no operands", func(s *workrow.ClaimSpec) { s.Eligible = workrow.And() }},
		{"ClaimSpec.Eligible.And[0] is empty", func(s *workrow.ClaimSpec) { s.Eligible = workrow.And(workrow.Cond{}) }},
		{"ClaimSpec.Eligible.Or[1].Eq: the column name is empty", func(s *workrow.ClaimSpec) {
			s.Eligible = workrow.Or(workrow.IsNull("a"), workrow.Eq("", 1))
		}},
		{`ClaimSpec.Eligible.Not.Eq("status"): the value is nil`, func(s *workrow.ClaimSpec) {
			s.Eligible = workrow.Not(workrow.Eq("status", nil))
		}},
		{"contains a NUL byte", func(s *workrow.ClaimSpec) { s.Eligible = workrow.IsNull("a\x00b") }},
		{"is 64 bytes long, the limit is 63", func(s *workrow.ClaimSpec) { s.Eligible = workrow.IsNull(strings.Repeat("c", 64)) }},
		{`ClaimSpec.Order[1]: column "a" is ordered by twice`, func(s *workrow.ClaimSpec) {
			s.Order = []workrow.Order{workrow.Asc("a"), workrow.Desc("a")}
		}},
		{"ClaimSpec.OnClaim[0](\"attempts\"): Add needs a number, got string", func(s *workrow.ClaimSpec) {
			s.OnClaim = []workrow.Set{workrow.Add("attempts", "1")}
		}},
		{"ClaimSpec.OnClaim[0]: the zero Set does nothing", func(s *workrow.ClaimSpec) { s.OnClaim = []workrow.Set{{}} }},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s := validSpec()
			tc.change(&s)
			err := s.Validate()
			if !errors.Is(err, workrow.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v; want ErrInvalidSpec mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCheckFinalize_RefusesZeroLockRepeatedRowsAndNowInSets(t *testing.T) {
	lock := workrow.NewLockID()
	ok := []workrow.Final[int64]{{ID: 1, Set: []workrow.Set{workrow.Assign("done", true)}}, {ID: 2}}
	if err := workrow.CheckFinalize(lock, ok); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		lock   workrow.LockID
		finals []workrow.Final[int64]
		want   string
	}{
		"zero lock":     {workrow.LockID{}, ok, "lock id is zero"},
		"row twice":     {lock, []workrow.Final[int64]{{ID: 1}, {ID: 1}}, "row 1 appears twice"},
		"Now in a set":  {lock, []workrow.Final[int64]{{ID: 1, Set: []workrow.Set{workrow.Assign("at", workrow.Now)}}}, "Now is only meaningful in a claim"},
		"column twice":  {lock, []workrow.Final[int64]{{ID: 1, Set: []workrow.Set{workrow.Assign("a", 1), workrow.Assign("a", 2)}}}, `column "a" is set twice`},
		"bad reference": {lock, []workrow.Final[int64]{{ID: 1, Set: []workrow.Set{workrow.Assign("a", workrow.ColumnRef(""))}}}, "column name is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			err := workrow.CheckFinalize(tc.lock, tc.finals)
			if !errors.Is(err, workrow.ErrInvalidSpec) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckFinalize = %v; want ErrInvalidSpec mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCheckRenewAndRelease_RefuseZeroLockZeroUntilAndRepeatedRows(t *testing.T) {
	lock := workrow.NewLockID()
	until := time.Now()
	for name, err := range map[string]error{
		"renew zero lock":   workrow.CheckRenew(workrow.LockID{}, until, []int64{1}),
		"renew zero until":  workrow.CheckRenew(lock, time.Time{}, []int64{1}),
		"renew row twice":   workrow.CheckRenew(lock, until, []int64{1, 1}),
		"release zero lock": workrow.CheckRelease(workrow.LockID{}, []int64{1}),
		"release row twice": workrow.CheckRelease(lock, []string{"a", "a"}),
	} {
		if !errors.Is(err, workrow.ErrInvalidSpec) {
			t.Errorf("%s: err = %v; want ErrInvalidSpec", name, err)
		}
	}
	if err := workrow.CheckRenew(lock, until, []int64{1, 2}); err != nil {
		t.Fatal(err)
	}
}

func TestLockID_IsAVersion7UUIDThatRoundTrips(t *testing.T) {
	a, b := workrow.NewLockID(), workrow.NewLockID()
	if a == b || a.IsZero() {
		t.Fatalf("NewLockID gave %v and %v", a, b)
	}
	s := a.String()
	if len(s) != 36 || s[14] != '7' || !strings.ContainsRune("89ab", rune(s[19])) {
		t.Fatalf("%s is not a version 7 UUID", s)
	}
	back, err := workrow.ParseLockID(s)
	if err != nil || back != a {
		t.Fatalf("ParseLockID(%s) = %v, %v", s, back, err)
	}
	if _, err := workrow.ParseLockID("not-a-uuid"); err == nil {
		t.Fatal("ParseLockID accepted garbage")
	}
	if got := (workrow.LockID{}).String(); got != "00000000-0000-0000-0000-000000000000" {
		t.Fatalf("zero LockID = %s", got)
	}
}
