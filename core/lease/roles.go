package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrNotListable is returned by ListLeases for a store that does not
// implement Lister.
var ErrNotListable = errors.New("baton/lease: the store cannot list its roles (it does not implement lease.Lister)")

// ListLeases returns every role of st that has a row, in CompareRoles
// order: the one read of all leases that operator views (baton leases,
// the console) share. st must implement Lister; otherwise the error wraps
// ErrNotListable.
func ListLeases(ctx context.Context, st Store) ([]Listed, error) {
	l, ok := st.(Lister)
	if !ok {
		return nil, fmt.Errorf("%w: %T", ErrNotListable, st)
	}
	out, err := l.List(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Listed) int { return CompareRoles(a.Role, b.Role) })
	return out, nil
}

// CompareRoles orders role names the way a person reads them: runs of
// decimal digits compare by their value, so "devices:partition-2" comes
// before "devices:partition-10"; everything else compares byte by byte.
// Equal values with different leading zeros fall back to the plain
// comparison, so the order is total.
func CompareRoles(a, b string) int {
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if isDigit(a[i]) && isDigit(b[j]) {
			ei, ej := digitsEnd(a, i), digitsEnd(b, j)
			na, nb := strings.TrimLeft(a[i:ei], "0"), strings.TrimLeft(b[j:ej], "0")
			if len(na) != len(nb) {
				return cmp.Compare(len(na), len(nb))
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			i, j = ei, ej
			continue
		}
		if a[i] != b[j] {
			return cmp.Compare(int(a[i]), int(b[j]))
		}
		i, j = i+1, j+1
	}
	if c := cmp.Compare(len(a)-i, len(b)-j); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitsEnd(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

// partitionInfix separates a partition set's name from the partition
// number in its role names (PartitionRole).
const partitionInfix = ":partition-"

// SplitPartitionRole is PartitionRole's inverse: the partition set's name
// and the partition number of a role named {name}:partition-{i}, and false
// for any other role (one whose number is not written as PartitionRole
// writes it included).
func SplitPartitionRole(role string) (name string, i int, ok bool) {
	k := strings.LastIndex(role, partitionInfix)
	if k <= 0 {
		return "", 0, false
	}
	name, num := role[:k], role[k+len(partitionInfix):]
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || strconv.Itoa(n) != num {
		return "", 0, false
	}
	return name, n, true
}
