package workrow_test

import (
	"testing"
	"time"

	"github.com/baton-go/baton/core/workrow"
)

func rowOf(cols map[string]any) workrow.RowFunc {
	return func(c string) (any, bool) {
		v, ok := cols[c]
		return v, ok
	}
}

func TestCond_EvalFollowsSQLThreeValuedLogic(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var nilTime *time.Time
	later := now.Add(time.Hour)
	row := rowOf(map[string]any{"attempts": 3, "done": nilTime, "status": "new", "expires_at": &later, "max": int64(5), "score": 1.5})
	for _, tc := range []struct {
		c    workrow.Cond
		want bool
	}{
		{workrow.Lt("attempts", 8), true},
		{workrow.Lt("attempts", 3), false},
		{workrow.Le("attempts", 3.0), true},
		{workrow.Lt("attempts", workrow.ColumnRef("max")), true},
		{workrow.IsNull("done"), true},
		{workrow.NotNull("done"), false},
		{workrow.Eq("done", now), false},              // NULL = x is unknown
		{workrow.Not(workrow.Eq("done", now)), false}, // NOT unknown is unknown
		{workrow.Or(workrow.Eq("done", now), workrow.Eq("status", "new")), true},
		{workrow.And(workrow.Eq("done", now), workrow.Eq("status", "new")), false},
		{workrow.Gt("expires_at", workrow.Now), true},
		{workrow.Ne("status", "new"), false},
		{workrow.Ge("score", 1), true},
		{workrow.Not(workrow.Gt("score", 2)), true},
	} {
		got, err := tc.c.Eval(row, now)
		if err != nil || got != tc.want {
			t.Errorf("%v = %v, %v; want %v", tc.c, got, err, tc.want)
		}
	}
	if _, err := workrow.IsNull("missing").Eval(row, now); err == nil {
		t.Error("a missing column must be an error")
	}
	if _, err := workrow.Lt("status", 3).Eval(row, now); err == nil {
		t.Error("comparing a string with a number must be an error")
	}
}

func TestSet_ApplyAssignsAddsAndKeepsNullUnderAdd(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var nilInt *int
	row := rowOf(map[string]any{"attempts": int32(2), "missing": nilInt, "other": "x"})
	for _, tc := range []struct {
		s    workrow.Set
		want any
	}{
		{workrow.Add("attempts", 1), int32(3)},
		{workrow.Add("missing", 1), nil},
		{workrow.Assign("at", workrow.Now), now},
		{workrow.Assign("copy", workrow.ColumnRef("other")), "x"},
		{workrow.Assign("gone", nil), nil},
	} {
		got, err := tc.s.Apply(row, now)
		if err != nil || got != tc.want {
			t.Errorf("%v = %#v, %v; want %#v", tc.s, got, err, tc.want)
		}
	}
}

func TestCompareOrder_SortsNullsLastAscendingAndFirstDescending(t *testing.T) {
	var none *int
	a := rowOf(map[string]any{"p": 1, "q": none})
	b := rowOf(map[string]any{"p": 1, "q": 5})
	for _, tc := range []struct {
		order []workrow.Order
		want  int
	}{
		{[]workrow.Order{workrow.Asc("p")}, 0},
		{[]workrow.Order{workrow.Asc("p"), workrow.Asc("q")}, 1},
		{[]workrow.Order{workrow.Asc("p"), workrow.Desc("q")}, -1},
	} {
		if got, err := workrow.CompareOrder(tc.order, a, b); err != nil || got != tc.want {
			t.Errorf("%v: %d, %v; want %d", tc.order, got, err, tc.want)
		}
	}
}

func TestCond_StringReadsLikeSQL(t *testing.T) {
	c := workrow.And(workrow.IsNull("completed_at"), workrow.Lt("attempts", 8), workrow.Gt("expires_at", workrow.Now))
	if got, want := c.String(), "(completed_at IS NULL AND attempts < 8 AND expires_at > Now)"; got != want {
		t.Fatalf("%s; want %s", got, want)
	}
	if got := c.Columns(); len(got) != 3 || got[1] != "attempts" {
		t.Fatalf("Columns = %v", got)
	}
}
