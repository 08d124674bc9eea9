package bunorm

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/core/workrow"
)

// This file renders core/workrow's condition, set and order trees for bun:
// every column is a bun.Name (quoted whole by bun), every value a bun
// placeholder argument. qual is what precedes a column: "?TableAlias." in
// statements over the model's alias, "" in an index predicate.

var sqlOps = map[workrow.Op]string{
	workrow.OpEq: "=", workrow.OpNe: "<>", workrow.OpLt: "<", workrow.OpLe: "<=", workrow.OpGt: ">", workrow.OpGe: ">=",
}

// arg converts the values bun would not write as the column expects.
func arg(v any) any {
	switch x := v.(type) {
	case workrow.LockID:
		return x.String()
	case workrow.ColumnRef:
		return bun.Name(string(x))
	}
	return v
}

// value renders a comparison or set value: Now as the claim's time, a
// ColumnRef as the (qualified) column, anything else as a placeholder.
func value(v any, qual string, now time.Time) (string, []any, error) {
	if workrow.IsNow(v) {
		if now.IsZero() {
			return "", nil, errors.New("Now cannot appear here (an index predicate or a finalize); pass a time")
		}
		return "?", []any{now}, nil
	}
	if r, ok := v.(workrow.ColumnRef); ok {
		return qual + "?", []any{bun.Name(string(r))}, nil
	}
	if v == nil {
		return "NULL", nil, nil
	}
	return "?", []any{arg(v)}, nil
}

// renderCond renders c as a bun query fragment and its arguments.
func renderCond(c workrow.Cond, qual string, now time.Time) (string, []any, error) {
	switch op := c.Op(); op {
	case workrow.OpAnd, workrow.OpOr:
		ops := c.Operands()
		if len(ops) == 0 {
			return "", nil, fmt.Errorf("%v has no operands", op)
		}
		parts := make([]string, len(ops))
		var args []any
		for i, o := range ops {
			q, a, err := renderCond(o, qual, now)
			if err != nil {
				return "", nil, err
			}
			parts[i], args = q, append(args, a...)
		}
		sep := " AND "
		if op == workrow.OpOr {
			sep = " OR "
		}
		return "(" + strings.Join(parts, sep) + ")", args, nil
	case workrow.OpNot:
		ops := c.Operands()
		if len(ops) != 1 {
			return "", nil, errors.New("Not needs one operand")
		}
		q, a, err := renderCond(ops[0], qual, now)
		if err != nil {
			return "", nil, err
		}
		return "(NOT " + q + ")", a, nil
	case workrow.OpIsNull:
		return "(" + qual + "? IS NULL)", []any{bun.Name(c.Column())}, nil
	case workrow.OpNotNull:
		return "(" + qual + "? IS NOT NULL)", []any{bun.Name(c.Column())}, nil
	default:
		sym, ok := sqlOps[op]
		if !ok {
			return "", nil, fmt.Errorf("cannot render operator %v", op)
		}
		v, a, err := value(c.Value(), qual, now)
		if err != nil {
			return "", nil, fmt.Errorf("%v: %w", c, err)
		}
		return "(" + qual + "? " + sym + " " + v + ")", append([]any{bun.Name(c.Column())}, a...), nil
	}
}

// condFilter renders c as a bun query-builder function.
func condFilter(c workrow.Cond, qual string, now time.Time) (func(bun.QueryBuilder) bun.QueryBuilder, error) {
	q, args, err := renderCond(c, qual, now)
	if err != nil {
		return nil, err
	}
	return func(b bun.QueryBuilder) bun.QueryBuilder { return b.Where(q, args...) }, nil
}

// setExpr is one rendered assignment or value.
type setExpr struct {
	query string
	args  []any
}

// renderSetValue renders the value s gives its column, over the model's
// alias: the value, the column plus it (Add), or another column.
func renderSetValue(s workrow.Set, now time.Time) (setExpr, error) {
	v, a, err := value(s.Value(), "?TableAlias.", now)
	if err != nil {
		return setExpr{}, fmt.Errorf("%v: %w", s, err)
	}
	if s.Kind() == workrow.SetAdd {
		return setExpr{"?TableAlias.? + " + v, append([]any{bun.Name(s.Column())}, a...)}, nil
	}
	return setExpr{v, a}, nil
}

// renderSet renders "column = value" for an UPDATE's SET list.
func renderSet(s workrow.Set, now time.Time) (setExpr, error) {
	v, err := renderSetValue(s, now)
	if err != nil {
		return setExpr{}, err
	}
	return setExpr{"? = " + v.query, append([]any{bun.Name(s.Column())}, v.args...)}, nil
}

// orderBy renders the order keys over the model's alias; the caller
// appends the id.
func orderBy(order []workrow.Order) func(*bun.SelectQuery) *bun.SelectQuery {
	return func(q *bun.SelectQuery) *bun.SelectQuery {
		for _, o := range order {
			if o.Desc {
				q = q.OrderExpr("?TableAlias.? DESC", bun.Name(o.Column))
			} else {
				q = q.OrderExpr("?TableAlias.?", bun.Name(o.Column))
			}
		}
		return q
	}
}
