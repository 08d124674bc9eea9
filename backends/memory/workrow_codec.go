package memory

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/baton-go/baton/core/workrow"
)

// workRowCodec maps the fields of a row struct to columns, reads them for
// the core evaluators and writes the results of sets back.
type workRowCodec struct {
	typ      reflect.Type
	idColumn string
	idField  []int
	fields   map[string][]int // column → field index path
}

func newWorkRowCodec(typ reflect.Type, idColumn string, idType reflect.Type) (*workRowCodec, error) {
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("baton/memory: work rows: the row type %s is not a struct; its fields are the columns", typ)
	}
	c := &workRowCodec{typ: typ, idColumn: idColumn, fields: map[string][]int{}}
	if err := c.collect(typ, nil); err != nil {
		return nil, err
	}
	id, ok := c.fields[idColumn]
	if !ok {
		return nil, fmt.Errorf("baton/memory: work rows: %s has no field for the id column %q (WorkRowStoreOptions.IDColumn)", typ, idColumn)
	}
	if ft := typ.FieldByIndex(id).Type; ft != idType {
		return nil, fmt.Errorf("baton/memory: work rows: the id field of %s is a %s, not the store's id type %s", typ, ft, idType)
	}
	c.idField = id
	return c, nil
}

// collect adds the columns of struct type t, whose fields sit at path.
func (c *workRowCodec) collect(t reflect.Type, path []int) error {
	for i := range t.NumField() {
		f := t.Field(i)
		at := append(slices.Clone(path), i)
		tag, tagged := f.Tag.Lookup("db")
		tag, _, _ = strings.Cut(tag, ",")
		switch {
		case tag == "-":
			continue
		case f.Anonymous && !tagged && f.Type.Kind() == reflect.Struct:
			// Its exported fields are promoted, whether or not it is.
			if err := c.collect(f.Type, at); err != nil {
				return err
			}
			continue
		case !f.IsExported():
			continue
		}
		name := tag
		if name == "" {
			name = snakeCase(f.Name)
		}
		if _, dup := c.fields[name]; dup {
			return fmt.Errorf("baton/memory: work rows: two fields of %s are column %q", c.typ, name)
		}
		c.fields[name] = at
	}
	return nil
}

// snakeCase turns a Go field name into a column name: CompletedAt is
// completed_at, ID is id, HTTPStatus is http_status.
func snakeCase(s string) string {
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		if unicode.IsUpper(r) {
			prevLower := i > 0 && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]))
			nextLower := i > 0 && i+1 < len(rs) && unicode.IsUpper(rs[i-1]) && unicode.IsLower(rs[i+1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (c *workRowCodec) has(column string) bool {
	_, ok := c.fields[column]
	return ok
}

func (c *workRowCodec) id(row any) any {
	return reflect.ValueOf(row).FieldByIndex(c.idField).Interface()
}

// columns reads a row for Cond.Eval, Set.Apply and CompareOrder.
func (c *workRowCodec) columns(row any) workrow.RowFunc {
	v := reflect.ValueOf(row)
	return func(column string) (any, bool) {
		at, ok := c.fields[column]
		if !ok {
			return nil, false
		}
		return v.FieldByIndex(at).Interface(), true
	}
}

// apply returns a copy of row with sets applied, every value computed from
// the old row, as one SQL UPDATE computes them.
func (c *workRowCodec) apply(row any, sets []workrow.Set, now time.Time) (any, error) {
	old := c.columns(row)
	next := reflect.New(c.typ).Elem()
	next.Set(reflect.ValueOf(c.clone(row)))
	for _, set := range sets {
		v, err := set.Apply(old, now)
		if err != nil {
			return nil, err
		}
		if err := assignColumn(next.FieldByIndex(c.fields[set.Column()]), set.Column(), v); err != nil {
			return nil, err
		}
	}
	return next.Interface(), nil
}

// clone copies a row and what its pointer and slice columns point to, so
// that neither the caller nor the store can change the other's copy.
func (c *workRowCodec) clone(row any) any {
	v := reflect.New(c.typ).Elem()
	v.Set(reflect.ValueOf(row))
	for _, at := range c.fields {
		f := v.FieldByIndex(at)
		switch {
		case f.Kind() == reflect.Pointer && !f.IsNil():
			p := reflect.New(f.Type().Elem())
			p.Elem().Set(f.Elem())
			f.Set(p)
		case f.Kind() == reflect.Slice && !f.IsNil():
			s := reflect.MakeSlice(f.Type(), f.Len(), f.Len())
			reflect.Copy(s, f)
			f.Set(s)
		}
	}
	return v.Interface()
}

// errNotNull is why a nil cannot go into a column that is not a pointer.
var errNotNull = errors.New("cannot be NULL: its field is not a pointer")

// assignColumn stores v in field, as a database stores a value in a column
// of the field's type: a nil makes a pointer nil, a value goes in as it is
// or converted between number types when it fits, and anything else is an
// error naming the column.
func assignColumn(field reflect.Value, column string, v any) error {
	ft := field.Type()
	if v == nil {
		switch ft.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			field.SetZero()
			return nil
		}
		return fmt.Errorf("column %q %w", column, errNotNull)
	}
	target := ft
	if ft.Kind() == reflect.Pointer {
		target = ft.Elem()
	}
	val, err := convertValue(reflect.ValueOf(v), target)
	if err != nil {
		return fmt.Errorf("column %q (%s): %w", column, ft, err)
	}
	if ft.Kind() == reflect.Pointer {
		p := reflect.New(target)
		p.Elem().Set(val)
		val = p
	}
	field.Set(val)
	return nil
}

// convertValue converts v to type t: the same type, the same kind of a
// named type (a string to a named string type), or a number to another
// number type that holds it exactly.
func convertValue(v reflect.Value, t reflect.Type) (reflect.Value, error) {
	switch {
	case v.Type() == t:
		return v, nil
	case t.Kind() == reflect.Interface && v.Type().Implements(t):
		return v, nil
	case isNumberKind(v.Kind()) && isNumberKind(t.Kind()):
		return convertNumber(v, t)
	case v.Kind() == t.Kind() && v.Kind() != reflect.Struct && v.Type().ConvertibleTo(t):
		return v.Convert(t), nil
	}
	return reflect.Value{}, fmt.Errorf("cannot hold a %s", v.Type())
}

// convertNumber converts a number to another number type, or says why the
// value does not fit it exactly.
func convertNumber(v reflect.Value, t reflect.Type) (reflect.Value, error) {
	out := reflect.New(t).Elem()
	fits := true
	switch k := t.Kind(); {
	case k == reflect.Float32 || k == reflect.Float64:
		out.Set(v.Convert(t))
	case v.CanInt():
		n := v.Int()
		if v.CanInt() && out.CanUint() {
			fits = n >= 0 && !out.OverflowUint(uint64(n))
		} else {
			fits = !out.OverflowInt(n)
		}
		if fits {
			out.Set(v.Convert(t))
		}
	case v.CanUint():
		n := v.Uint()
		if out.CanUint() {
			fits = !out.OverflowUint(n)
		} else {
			fits = n <= math.MaxInt64 && !out.OverflowInt(int64(n))
		}
		if fits {
			out.Set(v.Convert(t))
		}
	default: // a float into an integer type: only a whole number in range
		f := v.Float()
		fits = f == math.Trunc(f) && !math.IsInf(f, 0)
		if fits && out.CanInt() {
			fits = f >= math.MinInt64 && f < math.MaxInt64 && !out.OverflowInt(int64(f))
		} else if fits {
			fits = f >= 0 && f < math.MaxUint64 && !out.OverflowUint(uint64(f))
		}
		if fits {
			out.Set(v.Convert(t))
		}
	}
	if !fits {
		return reflect.Value{}, fmt.Errorf("%v does not fit a %s", v.Interface(), t)
	}
	return out, nil
}

func isNumberKind(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}
