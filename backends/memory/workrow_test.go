package memory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/backends/memory"
	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/core/workrow"
)

// workRowsHarness serves a store over the suite's table to the conformance
// suite.
func workRowsHarness(t *testing.T) conformance.WorkRowsHarness {
	t.Helper()
	st, err := memory.NewWorkRowStore[int64, conformance.WorkRow](memory.WorkRowStoreOptions{
		Live:  conformance.WorkRowsLive,
		Order: conformance.WorkRowsOrder,
	})
	if err != nil {
		t.Fatalf("NewWorkRowStore: %v", err)
	}
	return conformance.WorkRowsHarness{
		Store:  st,
		Insert: func(ctx context.Context, rows []conformance.WorkRow) error { return st.Insert(ctx, rows...) },
		Read: func(ctx context.Context) ([]conformance.WorkRowState, error) {
			rows, err := st.Rows(ctx)
			if err != nil {
				return nil, err
			}
			out := make([]conformance.WorkRowState, len(rows))
			for i, r := range rows {
				out[i] = conformance.WorkRowState{WorkRow: r.Row, LockID: r.LockID, LockedUntil: r.LockedUntil}
			}
			return out, nil
		},
		ClaimIndexed: st.ClaimIndex,
		Signalled: conformance.InsertOnCommit(func(ctx context.Context, rows []conformance.WorkRow) error {
			return st.Insert(ctx, rows...)
		}),
	}
}

func TestWorkRowStore_Conformance(t *testing.T) {
	conformance.RunWorkRows(t, workRowsHarness, conformance.WorkRowsFeatures{})
}

// ticket is a row type with every way of naming a column.
type ticket struct {
	ID       string `db:"id"`
	Priority int32
	DoneAt   *time.Time
	Note     *string `db:"remark"`
	Scratch  string  `db:"-"`
	audit    string
	ticketMeta
}

type ticketMeta struct {
	HTTPStatus int
}

func newTickets(t *testing.T) *memory.WorkRowStore[string, ticket] {
	t.Helper()
	st, err := memory.NewWorkRowStore[string, ticket](memory.WorkRowStoreOptions{Live: workrow.IsNull("done_at")})
	if err != nil {
		t.Fatalf("NewWorkRowStore: %v", err)
	}
	return st
}

func ticketSpec(sets ...workrow.Set) workrow.ClaimSpec {
	now := time.Now()
	return workrow.ClaimSpec{
		LockID: workrow.NewLockID(), Now: now, LeaseUntil: now.Add(time.Minute), BatchSize: 10,
		Eligible: workrow.IsNull("done_at"), Order: []workrow.Order{workrow.Desc("priority")}, OnClaim: sets,
	}
}

func TestWorkRowStore_ColumnsAreDBTagsOrSnakeCaseFieldNames(t *testing.T) {
	st := newTickets(t)
	ctx := t.Context()
	if err := st.Insert(ctx, ticket{ID: "a", Priority: 1}, ticket{ID: "b", Priority: 2, ticketMeta: ticketMeta{HTTPStatus: 503}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Claim(ctx, ticketSpec(workrow.Assign("remark", "seen"), workrow.Add("http_status", 1), workrow.Add("priority", 10)))
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	if len(got) != 2 || got[0].ID != "b" || got[1].ID != "a" {
		t.Fatalf("claimed %+v; want b then a, by priority descending", got)
	}
	b := got[0].Row
	if b.Note == nil || *b.Note != "seen" || b.HTTPStatus != 504 || b.Priority != 12 {
		t.Errorf("row b after the claim = %+v; want remark \"seen\", http_status 504, priority 12", b)
	}
	for _, col := range []string{"scratch", "audit", "note", "ticket_meta"} {
		if _, err := st.Claim(ctx, ticketSpec(workrow.Assign(col, "x"))); !errors.Is(err, workrow.ErrInvalidSpec) {
			t.Errorf("a set of %q: err = %v; want ErrInvalidSpec, it is no column", col, err)
		}
	}
}

func TestWorkRowStore_ASetThatCannotBeStoredWritesNothing(t *testing.T) {
	st := newTickets(t)
	ctx := t.Context()
	if err := st.Insert(ctx, ticket{ID: "a", Priority: 7}); err != nil {
		t.Fatal(err)
	}
	for what, set := range map[string]workrow.Set{
		"NULL into a column that is not a pointer": workrow.Assign("priority", nil),
		"a number too large for int32":             workrow.Assign("priority", int64(1)<<40),
		"a fraction into an integer":               workrow.Assign("priority", 1.5),
		"a string into a number":                   workrow.Assign("priority", "7"),
		"a number into a string":                   workrow.Assign("remark", 65),
	} {
		if got, err := st.Claim(ctx, ticketSpec(set)); err == nil {
			t.Errorf("a claim setting %s succeeded: %+v", what, got)
		}
	}
	if _, err := st.Claim(ctx, ticketSpec(workrow.Assign("id", "b"))); !errors.Is(err, workrow.ErrInvalidSpec) {
		t.Errorf("a set of the id column: err = %v; want ErrInvalidSpec", err)
	}
	r, _, err := st.Row(ctx, "a")
	if err != nil || r.Row.Priority != 7 || !r.LockID.IsZero() || !r.LockedUntil.IsZero() {
		t.Fatalf("after refused claims the row is %+v, %v; want it untouched and unlocked", r, err)
	}
}

func TestWorkRowStore_RowsAreCopies(t *testing.T) {
	st := newTickets(t)
	ctx := t.Context()
	note := "original"
	if err := st.Insert(ctx, ticket{ID: "a", Note: &note}); err != nil {
		t.Fatal(err)
	}
	note = "changed by the caller"
	got, err := st.Claim(ctx, ticketSpec())
	if err != nil || len(got) != 1 {
		t.Fatalf("Claim = %+v, %v", got, err)
	}
	*got[0].Row.Note = "changed through the claimed row"
	if r, _, _ := st.Row(ctx, "a"); *r.Row.Note != "original" {
		t.Errorf("the stored note is %q; the store must keep its own copy", *r.Row.Note)
	}
}

func TestWorkRowStore_InsertOfATakenIDInsertsNothing(t *testing.T) {
	st := newTickets(t)
	ctx := t.Context()
	if err := st.Insert(ctx, ticket{ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, ticket{ID: "b"}, ticket{ID: "a"}); err == nil {
		t.Error("an insert with a taken id succeeded")
	}
	if err := st.Insert(ctx, ticket{ID: "c"}, ticket{ID: "c"}); err == nil {
		t.Error("an insert with one id twice succeeded")
	}
	rows, err := st.Rows(ctx)
	if err != nil || len(rows) != 1 || rows[0].ID != "a" {
		t.Fatalf("Rows = %+v, %v; want only a", rows, err)
	}
}

func TestNewWorkRowStore_RejectsRowTypesItCannotKeep(t *testing.T) {
	type noID struct{ Key string }
	type wrongID struct{ ID int32 }
	if _, err := memory.NewWorkRowStore[int64, string](memory.WorkRowStoreOptions{}); err == nil {
		t.Error("a row type that is not a struct was accepted")
	}
	if _, err := memory.NewWorkRowStore[string, noID](memory.WorkRowStoreOptions{}); err == nil || !strings.Contains(err.Error(), "IDColumn") {
		t.Errorf("a row type without the id column: err = %v; want one naming WorkRowStoreOptions.IDColumn", err)
	}
	if _, err := memory.NewWorkRowStore[string, noID](memory.WorkRowStoreOptions{IDColumn: "key"}); err != nil {
		t.Errorf("IDColumn naming the key: %v", err)
	}
	if _, err := memory.NewWorkRowStore[int64, wrongID](memory.WorkRowStoreOptions{}); err == nil {
		t.Error("an id field of another type than K was accepted")
	}
	if _, err := memory.NewWorkRowStore[string, ticket](memory.WorkRowStoreOptions{Live: workrow.IsNull("finished_at")}); err == nil || !strings.Contains(err.Error(), "Live") {
		t.Errorf("a live filter over a column the row lacks: err = %v; want one naming WorkRowStoreOptions.Live", err)
	}
}
