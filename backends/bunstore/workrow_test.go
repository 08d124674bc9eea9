package bunstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/conformance"
	"github.com/baton-go/baton/internal/testenv"
)

// suiteRow is the conformance suite's table as a bun model: the columns of
// conformance.WorkRow and the lock columns, embedded.
type suiteRow struct {
	bun.BaseModel `bun:"table:work_rows,alias:w"`

	ID          int64      `bun:"id,pk"`
	Seq         int64      `bun:"seq,notnull"`
	Attempts    int        `bun:"attempts,notnull,type:integer,default:0"`
	CompletedAt *time.Time `bun:"completed_at,type:timestamptz"`
	LastError   *string    `bun:"last_error,type:text"`
	LockColumns
}

func suiteOptions() WorkRowsOptions {
	return WorkRowsOptions{Live: conformance.WorkRowsLive, Order: conformance.WorkRowsOrder}
}

// createSuiteTable creates the suite's table and its claim index through
// bun, as a migration would.
func createSuiteTable(t testing.TB, ctx context.Context, db bun.IDB) {
	t.Helper()
	if _, err := db.NewCreateTable().Model((*suiteRow)(nil)).Exec(ctx); err != nil {
		t.Fatalf("create the work table: %v", err)
	}
	ix, err := ClaimIndex[suiteRow](db, suiteOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Exec(ctx); err != nil {
		t.Fatalf("create the claim index: %v", err)
	}
}

func suiteStore(t testing.TB, db bun.IDB) *WorkRows[int64, conformance.WorkRow] {
	t.Helper()
	st, err := NewWorkRows[int64, conformance.WorkRow](context.Background(), db, suiteOptions())
	if err != nil {
		t.Fatalf("NewWorkRows: %v", err)
	}
	return st
}

func insertSuiteRows(ctx context.Context, db bun.IDB, rows []conformance.WorkRow) error {
	models := make([]suiteRow, len(rows))
	for i, r := range rows {
		models[i] = suiteRow{ID: r.ID, Seq: r.Seq, Attempts: r.Attempts, CompletedAt: r.CompletedAt, LastError: r.LastError}
	}
	_, err := db.NewInsert().Model(&models).Exec(ctx)
	return err
}

func readSuiteRows(ctx context.Context, db bun.IDB) ([]conformance.WorkRowState, error) {
	var models []suiteRow
	if err := db.NewSelect().Model(&models).Order("id").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]conformance.WorkRowState, len(models))
	for i, m := range models {
		out[i] = conformance.WorkRowState{
			WorkRow: conformance.WorkRow{ID: m.ID, Seq: m.Seq, Attempts: m.Attempts, CompletedAt: m.CompletedAt, LastError: m.LastError},
			LockID:  m.Lock(), LockedUntil: m.LockedUntil.Time,
		}
	}
	return out, nil
}

// claimIndexed reads the ids the claim index holds, through the index: the
// other paths are disabled, and the plan is checked to use it.
func claimIndexed(ctx context.Context, db *bun.DB) ([]int64, error) {
	var ids []int64
	err := db.RunInTx(ctx, &sql.TxOptions{ReadOnly: true}, func(ctx context.Context, tx bun.Tx) error {
		for _, q := range []string{"SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		q := tx.NewSelect().Model((*suiteRow)(nil)).Column("id").Where("completed_at IS NULL").Order("seq", "id")
		var plan string
		if err := tx.NewRaw("EXPLAIN (FORMAT JSON) ?", q).Scan(ctx, &plan); err != nil {
			return err
		}
		if !planUses(plan, "work_rows_claim") {
			return fmt.Errorf("reading the claim index: the plan is %s", plan)
		}
		return q.Scan(ctx, &ids)
	})
	return ids, err
}

// planUses reports whether an EXPLAIN (FORMAT JSON) plan names the index.
func planUses(plan, index string) bool {
	var doc any
	if err := json.Unmarshal([]byte(plan), &doc); err != nil {
		return false
	}
	found := false
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			if n, ok := x["Index Name"].(string); ok && n == index {
				found = true
			}
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	return found
}

func TestWorkRows_Conformance(t *testing.T) {
	conformance.RunWorkRows(t, func(t *testing.T) conformance.WorkRowsHarness {
		env := testenv.Postgres(t)
		db := openBun(t, env)
		createSuiteTable(t, testContext(t), db)
		return conformance.WorkRowsHarness{
			Store:  suiteStore(t, db),
			Second: suiteStore(t, openBun(t, env)),
			Insert: func(ctx context.Context, rows []conformance.WorkRow) error {
				return insertSuiteRows(ctx, db, rows)
			},
			Read: func(ctx context.Context) ([]conformance.WorkRowState, error) {
				return readSuiteRows(ctx, db)
			},
			ClaimIndexed: func(ctx context.Context) ([]int64, error) {
				return claimIndexed(ctx, db)
			},
			Unmigrated: func(t *testing.T) conformance.WorkRowsHarness {
				return conformance.WorkRowsHarness{Store: suiteStore(t, openBun(t, testenv.Postgres(t)))}
			},
			SchemaMismatch: ErrSchemaMismatch,
		}
	}, conformance.WorkRowsFeatures{})
}
