package pgsql

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/baton-go/baton/core/workrow"
)

// ClaimIndex describes the index a work table's claims ride: the queue
// order columns, then the id, partial over the live rows only. Because it
// holds only live rows, a claim stays as fast with a million finished rows
// in the table as with none.
//
// The lock columns must stay out of this index and every other index of
// the table, keys, expressions and predicates alike. A claim, a renewal, a
// release and a failure's finalize change only the lock columns (and
// columns such as the attempt counter or the last error, which should stay
// unindexed too); as long as no indexed column changes, PostgreSQL makes
// them HOT updates: the new row version goes into the same heap page, no
// index gets a new entry, and the dead version is pruned without VACUUM. An
// index on locked_until would turn every one of those updates into an
// insertion into every index of the table.
type ClaimIndex struct {
	// Adapter names the package, for errors.
	Adapter Adapter
	// Schema and Table name the work table ("" Schema: search_path).
	Schema, Table string
	// Name is the index's name (default "<Table>_claim").
	Name string
	// IDColumn is the primary key (default "id").
	IDColumn string
	// Order are the queue order columns, before the id.
	Order []workrow.Order
	// Live is the live-row filter, the index predicate. Required.
	Live workrow.Cond
	// LockColumns are checked to be in no index (default lock_id and
	// locked_until).
	LockColumns []string
	// Concurrently makes DDL write CREATE INDEX CONCURRENTLY, which does
	// not block writes but cannot run inside a transaction.
	Concurrently bool
}

func (ix ClaimIndex) withDefaults() ClaimIndex {
	if ix.Name == "" {
		ix.Name = ix.Table + "_claim"
	}
	if ix.IDColumn == "" {
		ix.IDColumn = DefaultWorkRowIDColumn
	}
	if len(ix.LockColumns) == 0 {
		ix.LockColumns = []string{DefaultWorkRowLockIDColumn, DefaultWorkRowLockedUntilColumn}
	}
	return ix
}

func (ix ClaimIndex) validate() error {
	for field, name := range map[string]string{"Table": ix.Table, "Name": ix.Name, "IDColumn": ix.IDColumn} {
		if p := IdentifierProblem(name); p != "" {
			return ix.Adapter.errorf("ClaimIndex.%s %q: %s", field, name, p)
		}
	}
	if ix.Schema != "" {
		if err := ValidateSchemaName("ClaimIndex.Schema", ix.Schema); err != nil {
			return err
		}
	}
	if ix.Live.IsZero() {
		return ix.Adapter.errorf("ClaimIndex.Live is empty; the claim index must be partial over the live rows")
	}
	probe := workrow.ClaimSpec{LockID: workrow.LockID{1}, BatchSize: 1, Eligible: ix.Live, Order: ix.Order}
	probe.Now, probe.LeaseUntil = probe.Now.AddDate(1, 0, 0), probe.Now.AddDate(2, 0, 0)
	if err := probe.Validate(); err != nil {
		return ix.Adapter.errorf("ClaimIndex.Live or Order: %w", err)
	}
	return nil
}

// DDL returns the CREATE INDEX statement, for a migration:
//
//	CREATE INDEX IF NOT EXISTS "deliveries_claim" ON "deliveries" ("created_at", "id") WHERE ("completed_at" IS NULL)
func (ix ClaimIndex) DDL() (string, error) {
	ix = ix.withDefaults()
	if err := ix.validate(); err != nil {
		return "", err
	}
	pred, err := literalCond("", ix.Live)
	if err != nil {
		return "", ix.Adapter.errorf("ClaimIndex.Live: %w", err)
	}
	create := "CREATE INDEX "
	if ix.Concurrently {
		create += "CONCURRENTLY "
	}
	return create + "IF NOT EXISTS " + quote(ix.Name) + " ON " + qualified(ix.Schema, ix.Table) +
		" (" + strings.Join(ix.Keys(), ", ") + ") WHERE " + pred, nil
}

// Keys are the index's keys: the Order columns (quoted, with DESC where
// they descend), then the id.
func (ix ClaimIndex) Keys() []string {
	ix = ix.withDefaults()
	keys := make([]string, 0, len(ix.Order)+1)
	for _, o := range ix.Order {
		k := quote(o.Column)
		if o.Desc {
			k += " DESC"
		}
		keys = append(keys, k)
	}
	return append(keys, quote(ix.IDColumn))
}

// Predicate is the index's WHERE clause, with literal values.
func (ix ClaimIndex) Predicate() (string, error) { return literalCond("", ix.Live) }

// Check verifies, read-only, that the table has a valid index whose keys
// are the Order columns (same directions) then the id, that the planner
// uses it for the live rows in queue order, and that no index of the table
// mentions a lock column. The error wraps ErrClaimIndex and says what to
// create or drop.
func (ix ClaimIndex) Check(ctx context.Context, db Beginner) error {
	ix = ix.withDefaults()
	if err := ix.validate(); err != nil {
		return err
	}
	table := qualified(ix.Schema, ix.Table)
	fail := func(what string, err error) error {
		return ix.Adapter.errorf("check the claim index of %s: %s: %w", table, what, err)
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fail("begin", err)
	}
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, "SET TRANSACTION READ ONLY"); err != nil {
		return fail("begin", err)
	}

	// Indexes that mention a lock column anywhere: key, expression or
	// predicate (the latter two recorded as dependencies on the column).
	rows, err := tx.Query(ctx, `SELECT DISTINCT c.relname, a.attname
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attname = ANY ($2::text[])
WHERE i.indrelid = $1::regclass
  AND (a.attnum = ANY (i.indkey::int2[])
       OR EXISTS (SELECT 1 FROM pg_depend AS d
                  WHERE d.classid = 'pg_class'::regclass AND d.objid = i.indexrelid
                    AND d.refobjid = i.indrelid AND d.refobjsubid = a.attnum))
ORDER BY 1, 2`, table, ix.LockColumns)
	hot, err := collect(rows, err, func(r Rows) (string, error) {
		var index, col string
		err := r.Scan(&index, &col)
		return fmt.Sprintf("%s (on %s)", index, col), err
	})
	if err != nil {
		return fail("read its indexes", err)
	}
	if len(hot) > 0 {
		return fmt.Errorf("%w: %s: %s mention a lock column; drop them: claims, renewals and releases can only be HOT updates when no index mentions the lock columns",
			ErrClaimIndex, table, strings.Join(hot, ", "))
	}

	// Candidates: valid partial indexes with exactly the expected keys.
	want := make([]string, 0, len(ix.Order)+1)
	for _, o := range ix.Order {
		want = append(want, fmt.Sprintf("%s:%t", o.Column, o.Desc))
	}
	want = append(want, ix.IDColumn+":false")
	rows, err = tx.Query(ctx, `SELECT c.relname,
       to_json(array(SELECT a.attname || ':' || ((i.indoption[k.n - 1] & 1) = 1)::text
             FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k (attnum, n)
             JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             ORDER BY k.n))::text
FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid
WHERE i.indrelid = $1::regclass AND i.indisvalid AND i.indpred IS NOT NULL AND i.indexprs IS NULL
  AND i.indnkeyatts = cardinality(i.indkey::int2[])`, table)
	var candidates []string
	err = each(rows, err, func(r Rows) error {
		var name, keys string
		var got []string
		if err := r.Scan(&name, &keys); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(keys), &got); err != nil {
			return err
		}
		if slices.Equal(got, want) {
			candidates = append(candidates, name)
		}
		return nil
	})
	if err != nil {
		return fail("read its indexes", err)
	}
	ddl, _ := ix.DDL()
	if len(candidates) == 0 {
		return fmt.Errorf("%w: %s has no valid partial index on (%s) over the live rows; create it: %s",
			ErrClaimIndex, table, strings.Join(orderNames(ix), ", "), ddl)
	}

	// The planner must find that the live filter implies the predicate:
	// ask it for the ordered scan of the live rows, other paths disabled.
	live, err := literalCond("w", ix.Live)
	if err != nil {
		return err
	}
	order := orderKeys("w", ix.Order)
	if order != "" {
		order += ", "
	}
	for _, set := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort"} {
		if _, err := tx.Exec(ctx, "SET LOCAL "+set+" = off"); err != nil {
			return fail("plan a claim", err)
		}
	}
	var plan []byte
	err = tx.QueryRow(ctx, `EXPLAIN (FORMAT JSON) SELECT w.`+quote(ix.IDColumn)+` FROM `+table+` AS w WHERE `+live+
		` ORDER BY `+order+`w.`+quote(ix.IDColumn)+` LIMIT 1`).Scan(&plan)
	if err != nil {
		return fail("plan a claim", err)
	}
	used := PlanIndexes(plan)
	for _, c := range candidates {
		if slices.Contains(used, c) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s: the planner does not use %s for the live rows (its predicate is not implied by %v; the plan uses %v); create: %s",
		ErrClaimIndex, table, strings.Join(candidates, ", "), ix.Live, used, ddl)
}

func orderNames(ix ClaimIndex) []string {
	var out []string
	for _, o := range ix.Order {
		out = append(out, o.String())
	}
	return append(out, ix.IDColumn)
}

// PlanIndexes lists the "Index Name" of every node of an EXPLAIN (FORMAT
// JSON) plan.
func PlanIndexes(plan []byte) []string { return PlanField(plan, "Index Name") }

// PlanField lists the string value of key in every node of an EXPLAIN
// (FORMAT JSON) plan, for example "Node Type" or "Index Name".
func PlanField(plan []byte, key string) []string {
	var doc any
	if err := json.Unmarshal(plan, &doc); err != nil {
		return nil
	}
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			if n, ok := x[key].(string); ok {
				out = append(out, n)
			}
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	return out
}
