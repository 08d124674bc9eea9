package workrow

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"reflect"
	"time"
)

// This file evaluates conditions, sets and orders in memory, with SQL's
// rules, for stores that keep rows in the process (the reference store and
// tests). SQL stores render the same trees as statements instead.

// RowFunc reads a column of one row: its value (nil for NULL; a nil
// pointer counts as NULL and a pointer is followed) and whether the column
// exists.
type RowFunc func(column string) (value any, ok bool)

// Eval reports whether the row satisfies c, as a SQL WHERE would: a
// comparison with NULL is unknown, and unknown does not satisfy. now is the
// value of Now.
func (c Cond) Eval(row RowFunc, now time.Time) (bool, error) {
	v, err := c.eval(row, now)
	return v == triTrue, err
}

type tri int8

const (
	triFalse tri = iota
	triTrue
	triUnknown
)

func (c Cond) eval(row RowFunc, now time.Time) (tri, error) {
	switch c.op {
	case OpAnd:
		out := triTrue
		for _, o := range c.operands {
			v, err := o.eval(row, now)
			if err != nil {
				return triFalse, err
			}
			if v == triFalse {
				return triFalse, nil
			}
			if v == triUnknown {
				out = triUnknown
			}
		}
		return out, nil
	case OpOr:
		out := triFalse
		for _, o := range c.operands {
			v, err := o.eval(row, now)
			if err != nil {
				return triFalse, err
			}
			if v == triTrue {
				return triTrue, nil
			}
			if v == triUnknown {
				out = triUnknown
			}
		}
		return out, nil
	case OpNot:
		if len(c.operands) != 1 {
			return triFalse, fmt.Errorf("baton/workrow: Not needs one operand")
		}
		v, err := c.operands[0].eval(row, now)
		switch {
		case err != nil:
			return triFalse, err
		case v == triTrue:
			return triFalse, nil
		case v == triFalse:
			return triTrue, nil
		}
		return triUnknown, nil
	case OpIsNull, OpNotNull:
		v, err := column(row, c.column)
		if err != nil {
			return triFalse, err
		}
		if (v == nil) == (c.op == OpIsNull) {
			return triTrue, nil
		}
		return triFalse, nil
	}
	if !c.op.isComparison() {
		return triFalse, fmt.Errorf("baton/workrow: cannot evaluate operator %v", c.op)
	}
	left, err := column(row, c.column)
	if err != nil {
		return triFalse, err
	}
	right, err := resolve(row, c.value, now)
	if err != nil {
		return triFalse, err
	}
	if left == nil || right == nil {
		return triUnknown, nil
	}
	n, err := CompareValues(left, right)
	if err != nil {
		return triFalse, fmt.Errorf("baton/workrow: %s: %w", c, err)
	}
	var ok bool
	switch c.op {
	case OpEq:
		ok = n == 0
	case OpNe:
		ok = n != 0
	case OpLt:
		ok = n < 0
	case OpLe:
		ok = n <= 0
	case OpGt:
		ok = n > 0
	case OpGe:
		ok = n >= 0
	}
	if ok {
		return triTrue, nil
	}
	return triFalse, nil
}

// Apply computes the new value of s's column for the row: the assigned
// value (Now becomes now, a ColumnRef the other column's value) or the old
// value plus the added number, keeping the old value's type. A NULL column
// stays NULL under Add.
func (s Set) Apply(row RowFunc, now time.Time) (any, error) {
	switch s.kind {
	case SetAssign:
		return resolve(row, s.value, now)
	case SetAdd:
		old, err := column(row, s.column)
		if err != nil || old == nil {
			return nil, err
		}
		return addNumber(old, s.value)
	}
	return nil, fmt.Errorf("baton/workrow: the zero Set does nothing")
}

// CompareOrder compares two rows by order, with NULLs after every value
// ascending and before every value descending, as PostgreSQL sorts them by
// default. It does not look at the id; callers break ties with it.
func CompareOrder(order []Order, a, b RowFunc) (int, error) {
	for _, o := range order {
		x, err := column(a, o.Column)
		if err != nil {
			return 0, err
		}
		y, err := column(b, o.Column)
		if err != nil {
			return 0, err
		}
		var n int
		switch {
		case x == nil && y == nil:
		case x == nil:
			n = 1
		case y == nil:
			n = -1
		default:
			if n, err = CompareValues(x, y); err != nil {
				return 0, fmt.Errorf("baton/workrow: order by %s: %w", o.Column, err)
			}
		}
		if o.Desc {
			n = -n
		}
		if n != 0 {
			return n, nil
		}
	}
	return 0, nil
}

// CompareValues compares two non-NULL values of compatible kinds: numbers
// (any integer or float type), strings, times, booleans (false first), byte
// slices and byte arrays. It returns -1, 0 or +1.
func CompareValues(a, b any) (int, error) {
	a, b = deref(a), deref(b)
	if a == nil || b == nil {
		return 0, fmt.Errorf("cannot compare NULL")
	}
	if isNumber(a) && isNumber(b) {
		ai, aInt := asInt(a)
		bi, bInt := asInt(b)
		if aInt && bInt {
			return cmp.Compare(ai, bi), nil
		}
		return cmp.Compare(asFloat(a), asFloat(b)), nil
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return cmp.Compare(x, y), nil
		}
	case time.Time:
		if y, ok := b.(time.Time); ok {
			return x.Compare(y), nil
		}
	case bool:
		if y, ok := b.(bool); ok {
			switch {
			case x == y:
				return 0, nil
			case !x:
				return -1, nil
			}
			return 1, nil
		}
	}
	if xb, ok := asBytes(a); ok {
		if yb, ok := asBytes(b); ok {
			return bytes.Compare(xb, yb), nil
		}
	}
	return 0, fmt.Errorf("cannot compare %T with %T", a, b)
}

func column(row RowFunc, name string) (any, error) {
	v, ok := row(name)
	if !ok {
		return nil, fmt.Errorf("baton/workrow: the row has no column %q", name)
	}
	return deref(v), nil
}

func resolve(row RowFunc, v any, now time.Time) (any, error) {
	switch x := v.(type) {
	case nowValue:
		return now, nil
	case ColumnRef:
		return column(row, string(x))
	}
	return deref(v), nil
}

// deref follows pointers; a nil pointer is NULL.
func deref(v any) any {
	if v == nil {
		return nil
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer {
		if rv.IsNil() {
			return nil
		}
		rv = rv.Elem()
	}
	return rv.Interface()
}

func isNumber(v any) bool {
	if v == nil {
		return false
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// asInt converts an integer that fits int64.
func asInt(v any) (int64, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if u := rv.Uint(); u <= math.MaxInt64 {
			return int64(u), true
		}
	}
	return 0, false
}

func asFloat(v any) float64 {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return float64(rv.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return float64(rv.Uint())
	}
	return rv.Float()
}

func asBytes(v any) ([]byte, bool) {
	rv := reflect.ValueOf(v)
	switch {
	case rv.Kind() == reflect.Slice && rv.Type().Elem().Kind() == reflect.Uint8:
		return rv.Bytes(), true
	case rv.Kind() == reflect.Array && rv.Type().Elem().Kind() == reflect.Uint8:
		b := make([]byte, rv.Len())
		reflect.Copy(reflect.ValueOf(b), rv)
		return b, true
	}
	return nil, false
}

// addNumber returns old + n with old's type.
func addNumber(old, n any) (any, error) {
	if !isNumber(old) || !isNumber(n) {
		return nil, fmt.Errorf("baton/workrow: cannot add %T to %T", n, old)
	}
	rv := reflect.ValueOf(old)
	out := reflect.New(rv.Type()).Elem()
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d, ok := asInt(n)
		if !ok {
			d = int64(asFloat(n))
		}
		out.SetInt(rv.Int() + d)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		d, ok := asInt(n)
		if !ok {
			d = int64(asFloat(n))
		}
		out.SetUint(uint64(int64(rv.Uint()) + d))
	default:
		out.SetFloat(rv.Float() + asFloat(n))
	}
	return out.Interface(), nil
}
