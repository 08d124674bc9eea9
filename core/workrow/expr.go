package workrow

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxColumnLength is the longest column name, in bytes, that a condition, a
// set or an order may use: PostgreSQL's identifier limit, which every store
// accepts.
const MaxColumnLength = 63

// Op is the operator of a Cond.
type Op int

// The operators of a Cond. Comparisons follow SQL: a comparison with NULL is
// neither true nor false, so a row whose column is NULL matches none of
// OpEq … OpGe; test for NULL with OpIsNull and OpNotNull.
const (
	opNone Op = iota
	OpAnd
	OpOr
	OpNot
	OpEq
	OpNe
	OpLt
	OpLe
	OpGt
	OpGe
	OpIsNull
	OpNotNull
)

var opNames = [...]string{"none", "And", "Or", "Not", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "IsNull", "NotNull"}

func (o Op) String() string {
	if o < 0 || int(o) >= len(opNames) {
		return fmt.Sprintf("Op(%d)", int(o))
	}
	return opNames[o]
}

// isComparison reports whether o compares a column with a value.
func (o Op) isComparison() bool { return o >= OpEq && o <= OpGe }

// Cond is a condition over a work table's columns: the eligibility
// predicate of a claim. It is a small expression tree that every adapter can
// render (the PostgreSQL adapter as SQL with parameters) and that an
// in-memory store can evaluate with Eval. Build it with the functions below;
// the zero Cond is "no condition", which a claim refuses.
type Cond struct {
	op       Op
	column   string
	value    any
	operands []Cond
}

// Comparison values may be any value the store can compare with the column:
// numbers, strings, times, booleans, byte slices. Two special values exist:
// Now, the claim's ClaimSpec.Now, and a ColumnRef, another column of the row.

// Eq is column = value.
func Eq(column string, value any) Cond { return Cond{op: OpEq, column: column, value: value} }

// Ne is column <> value.
func Ne(column string, value any) Cond { return Cond{op: OpNe, column: column, value: value} }

// Lt is column < value.
func Lt(column string, value any) Cond { return Cond{op: OpLt, column: column, value: value} }

// Le is column <= value.
func Le(column string, value any) Cond { return Cond{op: OpLe, column: column, value: value} }

// Gt is column > value.
func Gt(column string, value any) Cond { return Cond{op: OpGt, column: column, value: value} }

// Ge is column >= value.
func Ge(column string, value any) Cond { return Cond{op: OpGe, column: column, value: value} }

// IsNull is column IS NULL.
func IsNull(column string) Cond { return Cond{op: OpIsNull, column: column} }

// NotNull is column IS NOT NULL.
func NotNull(column string) Cond { return Cond{op: OpNotNull, column: column} }

// And holds when every operand holds.
func And(operands ...Cond) Cond { return Cond{op: OpAnd, operands: append([]Cond(nil), operands...)} }

// Or holds when any operand holds.
func Or(operands ...Cond) Cond { return Cond{op: OpOr, operands: append([]Cond(nil), operands...)} }

// Not holds when its operand is false (not when it is unknown, as in SQL).
func Not(c Cond) Cond { return Cond{op: OpNot, operands: []Cond{c}} }

// IsZero reports whether c is the zero Cond, "no condition".
func (c Cond) IsZero() bool { return c.op == opNone }

// Op is c's operator.
func (c Cond) Op() Op { return c.op }

// Column is the column a comparison or null test is about ("" for And, Or
// and Not).
func (c Cond) Column() string { return c.column }

// Value is a comparison's value: a plain value, Now or a ColumnRef.
func (c Cond) Value() any { return c.value }

// Operands are the conditions And, Or and Not combine.
func (c Cond) Operands() []Cond { return append([]Cond(nil), c.operands...) }

// String renders c for messages, in a SQL-like form.
func (c Cond) String() string {
	switch {
	case c.op == opNone:
		return "<none>"
	case c.op == OpAnd || c.op == OpOr:
		parts := make([]string, len(c.operands))
		for i, o := range c.operands {
			parts[i] = o.String()
		}
		sep := " AND "
		if c.op == OpOr {
			sep = " OR "
		}
		return "(" + strings.Join(parts, sep) + ")"
	case c.op == OpNot:
		if len(c.operands) != 1 {
			return "NOT <?>"
		}
		return "NOT " + c.operands[0].String()
	case c.op == OpIsNull:
		return c.column + " IS NULL"
	case c.op == OpNotNull:
		return c.column + " IS NOT NULL"
	}
	sym := map[Op]string{OpEq: "=", OpNe: "<>", OpLt: "<", OpLe: "<=", OpGt: ">", OpGe: ">="}[c.op]
	return fmt.Sprintf("%s %s %s", c.column, sym, formatValue(c.value))
}

func formatValue(v any) string {
	switch v := v.(type) {
	case nowValue:
		return "Now"
	case ColumnRef:
		return string(v)
	case string:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprint(v)
}

// validate reports a condition no store may act on: an empty one, an
// operator without operands, a bad column name, or a comparison with nil
// (use IsNull). allowNow says whether Now may appear (only in claims).
func (c Cond) validate(path string, allowNow bool) error {
	switch {
	case c.op == opNone:
		return fmt.Errorf("%s is empty", path)
	case c.op == OpAnd || c.op == OpOr:
		if len(c.operands) == 0 {
			return fmt.Errorf("%s: %v has no operands", path, c.op)
		}
		for i, o := range c.operands {
			if err := o.validate(fmt.Sprintf("%s.%v[%d]", path, c.op, i), allowNow); err != nil {
				return err
			}
		}
		return nil
	case c.op == OpNot:
		if len(c.operands) != 1 {
			return fmt.Errorf("%s: Not needs exactly one operand", path)
		}
		return c.operands[0].validate(path+".Not", allowNow)
	case c.op == OpIsNull || c.op == OpNotNull:
		return checkColumn(path+"."+c.op.String(), c.column)
	case c.op.isComparison():
		if err := checkColumn(path+"."+c.op.String(), c.column); err != nil {
			return err
		}
		return checkValue(fmt.Sprintf("%s.%v(%q)", path, c.op, c.column), c.value, allowNow, false)
	}
	return fmt.Errorf("%s: unknown operator %v", path, c.op)
}

// columns appends every column c mentions, including ColumnRef values.
func (c Cond) columns(dst []string) []string {
	if c.column != "" {
		dst = append(dst, c.column)
	}
	if r, ok := c.value.(ColumnRef); ok {
		dst = append(dst, string(r))
	}
	for _, o := range c.operands {
		dst = o.columns(dst)
	}
	return dst
}

// Columns lists every column c mentions, in order of appearance, with
// repeats.
func (c Cond) Columns() []string { return c.columns(nil) }

// ColumnRef names another column of the same row, as a comparison or set
// value: Lt("attempts", ColumnRef("max_attempts")).
type ColumnRef string

type nowValue struct{}

// Now stands for the claim's ClaimSpec.Now in an eligibility condition or an
// OnClaim set, so a condition can stay the same from claim to claim:
// Gt("expires_at", Now). It is not allowed in a finalize's sets.
var Now any = nowValue{}

// IsNow reports whether v is Now.
func IsNow(v any) bool {
	_, ok := v.(nowValue)
	return ok
}

// SetKind is what a Set does to its column.
type SetKind int

// The kinds of Set.
const (
	setNone SetKind = iota
	// SetAssign writes the value: column = value (nil writes NULL).
	SetAssign
	// SetAdd adds a number: column = column + value. A NULL column stays
	// NULL.
	SetAdd
)

// Set changes one of the row's own columns: in a claim (OnClaim, for
// example counting the attempt) or in a finalize (the completion marker, the
// error).
type Set struct {
	kind   SetKind
	column string
	value  any
}

// Assign sets column to value; nil writes NULL, a ColumnRef copies another
// column, Now (in OnClaim only) writes the claim's Now.
func Assign(column string, value any) Set { return Set{kind: SetAssign, column: column, value: value} }

// Add adds n to a numeric column, typically Add("attempts", 1) in OnClaim.
func Add(column string, n any) Set { return Set{kind: SetAdd, column: column, value: n} }

// Kind is what s does.
func (s Set) Kind() SetKind { return s.kind }

// Column is the column s changes.
func (s Set) Column() string { return s.column }

// Value is the value s writes or adds.
func (s Set) Value() any { return s.value }

func (s Set) String() string {
	if s.kind == SetAdd {
		return fmt.Sprintf("%s = %s + %s", s.column, s.column, formatValue(s.value))
	}
	return fmt.Sprintf("%s = %s", s.column, formatValue(s.value))
}

func (s Set) validate(path string, allowNow bool) error {
	if s.kind == setNone {
		return fmt.Errorf("%s: the zero Set does nothing; build it with Assign or Add", path)
	}
	if err := checkColumn(path, s.column); err != nil {
		return err
	}
	where := fmt.Sprintf("%s(%q)", path, s.column)
	switch s.kind {
	case SetAssign:
		return checkValue(where, s.value, allowNow, true)
	case SetAdd:
		if !isNumber(s.value) {
			return fmt.Errorf("%s: Add needs a number, got %T", where, s.value)
		}
		return nil
	}
	return fmt.Errorf("%s: the zero Set does nothing; build it with Assign or Add", where)
}

// validateSets checks a list of sets: each valid, no column set twice.
func validateSets(path string, sets []Set, allowNow bool) error {
	seen := make(map[string]bool, len(sets))
	for i, s := range sets {
		p := fmt.Sprintf("%s[%d]", path, i)
		if err := s.validate(p, allowNow); err != nil {
			return err
		}
		if seen[s.column] {
			return fmt.Errorf("%s: column %q is set twice", p, s.column)
		}
		seen[s.column] = true
	}
	return nil
}

// Order is one key of a claim's ordering. The store appends the id as the
// last key, so equal keys are taken in id order. NULLs sort as in
// PostgreSQL: after every value ascending, before every value descending.
type Order struct {
	Column string
	Desc   bool
}

// Asc orders by column, smallest first.
func Asc(column string) Order { return Order{Column: column} }

// Desc orders by column, largest first.
func Desc(column string) Order { return Order{Column: column, Desc: true} }

func (o Order) String() string {
	if o.Desc {
		return o.Column + " DESC"
	}
	return o.Column
}

// ValidateColumn reports whether name can be a column name in a condition,
// a set or an order: 1 to MaxColumnLength bytes of UTF-8 with no NUL byte.
// Adapters quote it as an identifier; it is never spliced into a statement
// as is.
func ValidateColumn(name string) error {
	if err := checkColumn("column", name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return nil
}

func checkColumn(path, name string) error {
	var why string
	switch {
	case name == "":
		why = "the column name is empty"
	case len(name) > MaxColumnLength:
		why = fmt.Sprintf("column name %q is %d bytes long, the limit is %d", name, len(name), MaxColumnLength)
	case !utf8.ValidString(name):
		why = fmt.Sprintf("column name %q is not valid UTF-8", name)
	case strings.IndexByte(name, 0) >= 0:
		why = fmt.Sprintf("column name %q contains a NUL byte", name)
	default:
		return nil
	}
	return fmt.Errorf("%s: %s", path, why)
}

func checkValue(path string, v any, allowNow, allowNil bool) error {
	switch v := v.(type) {
	case nil:
		if allowNil {
			return nil
		}
		return fmt.Errorf("%s: the value is nil; a comparison with NULL never holds, use IsNull or NotNull", path)
	case nowValue:
		if !allowNow {
			return fmt.Errorf("%s: Now is only meaningful in a claim (Eligible, OnClaim); pass a time", path)
		}
	case ColumnRef:
		return checkColumn(path, string(v))
	}
	return nil
}
