package pgsql

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-go/baton/core/workrow"
)

// This file renders core/workrow's condition, set and order trees as SQL.
// Column names are always quoted identifiers; values are always
// parameters, except in the live-row filter, which must be a literal part
// of the statement (an index predicate has no parameters, and the planner
// can only match a partial index to a predicate it can see).

// sqlBuilder collects a statement's parameters, after the fixed ones it
// starts with. now is the parameter holding the claim's Now, "" where Now
// cannot appear.
type sqlBuilder struct {
	args []any
	now  string
}

func (b *sqlBuilder) param(v any) string {
	b.args = append(b.args, v)
	return "$" + strconv.Itoa(len(b.args))
}

// value renders a comparison or set value: Now as $1, a ColumnRef as the
// aliased column, anything else as a new parameter.
func (b *sqlBuilder) value(alias string, v any) (string, error) {
	switch x := v.(type) {
	case workrow.ColumnRef:
		return alias + "." + quote(string(x)), nil
	}
	if workrow.IsNow(v) {
		if b.now == "" {
			return "", fmt.Errorf("Now is not available here")
		}
		return b.now, nil
	}
	return b.param(sqlArg(v)), nil
}

// sqlArg converts the values pgx would not encode as the column expects.
func sqlArg(v any) any {
	if id, ok := v.(workrow.LockID); ok {
		return [16]byte(id)
	}
	return v
}

var sqlOps = map[workrow.Op]string{
	workrow.OpEq: "=", workrow.OpNe: "<>", workrow.OpLt: "<", workrow.OpLe: "<=", workrow.OpGt: ">", workrow.OpGe: ">=",
}

// cond renders c over the table alias, with parameters.
func (b *sqlBuilder) cond(alias string, c workrow.Cond) (string, error) {
	return renderCond(alias, c, b.value)
}

// literalCond renders c over the alias with literal values, for index
// predicates and the live-row filter.
func literalCond(alias string, c workrow.Cond) (string, error) {
	return renderCond(alias, c, func(alias string, v any) (string, error) {
		if r, ok := v.(workrow.ColumnRef); ok {
			return alias + "." + quote(string(r)), nil
		}
		return sqlLiteral(v)
	})
}

func renderCond(alias string, c workrow.Cond, value func(alias string, v any) (string, error)) (string, error) {
	col := func() string {
		if alias == "" {
			return quote(c.Column())
		}
		return alias + "." + quote(c.Column())
	}
	switch op := c.Op(); op {
	case workrow.OpAnd, workrow.OpOr:
		ops := c.Operands()
		if len(ops) == 0 {
			return "", fmt.Errorf("%v has no operands", op)
		}
		parts := make([]string, len(ops))
		for i, o := range ops {
			s, err := renderCond(alias, o, value)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		sep := " AND "
		if op == workrow.OpOr {
			sep = " OR "
		}
		return "(" + strings.Join(parts, sep) + ")", nil
	case workrow.OpNot:
		ops := c.Operands()
		if len(ops) != 1 {
			return "", fmt.Errorf("Not needs one operand")
		}
		s, err := renderCond(alias, ops[0], value)
		if err != nil {
			return "", err
		}
		return "(NOT " + s + ")", nil
	case workrow.OpIsNull:
		return "(" + col() + " IS NULL)", nil
	case workrow.OpNotNull:
		return "(" + col() + " IS NOT NULL)", nil
	default:
		sym, ok := sqlOps[op]
		if !ok {
			return "", fmt.Errorf("cannot render operator %v", op)
		}
		v, err := value(alias, c.Value())
		if err != nil {
			return "", fmt.Errorf("%v: %w", c, err)
		}
		return "(" + col() + " " + sym + " " + v + ")", nil
	}
}

// set renders one assignment of an UPDATE's SET list.
func (b *sqlBuilder) set(alias string, s workrow.Set) (string, error) {
	target := quote(s.Column())
	v, err := b.value(alias, s.Value())
	if err != nil {
		return "", err
	}
	if s.Kind() == workrow.SetAdd {
		return target + " = " + alias + "." + target + " + " + v, nil
	}
	return target + " = " + v, nil
}

// orderKeys renders the order keys over the alias.
func orderKeys(alias string, order []workrow.Order) string {
	keys := make([]string, len(order))
	for i, o := range order {
		keys[i] = alias + "." + quote(o.Column)
		if o.Desc {
			keys[i] += " DESC"
		}
	}
	return strings.Join(keys, ", ")
}

// sqlLiteral writes a constant as a SQL literal. Only plain scalar types are
// accepted; strings use the E” form, whose meaning does not depend on
// standard_conforming_strings.
func sqlLiteral(v any) (string, error) {
	if v == nil {
		return "NULL", nil
	}
	if workrow.IsNow(v) {
		return "", fmt.Errorf("Now cannot be part of an index predicate, which must not change")
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return "NULL", nil
		}
		rv = rv.Elem()
	}
	if t, ok := rv.Interface().(time.Time); ok {
		return "'" + t.UTC().Format("2006-01-02 15:04:05.999999Z07:00") + "'::timestamptz", nil
	}
	switch rv.Kind() {
	case reflect.Bool:
		if rv.Bool() {
			return "true", nil
		}
		return "false", nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(rv.Uint(), 10), nil
	case reflect.Float32, reflect.Float64:
		f := rv.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "", fmt.Errorf("%v has no SQL literal", f)
		}
		return strconv.FormatFloat(f, 'g', -1, 64), nil
	case reflect.String:
		s := rv.String()
		if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
			return "", fmt.Errorf("string %q is not valid UTF-8 or holds a NUL byte", s)
		}
		s = strings.ReplaceAll(s, `\`, `\\`)
		s = strings.ReplaceAll(s, `'`, `''`)
		return "E'" + s + "'", nil
	}
	return "", fmt.Errorf("a %T cannot be written as a literal in an index predicate; use numbers, strings, booleans or times", v)
}
