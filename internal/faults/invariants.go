package faults

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// interval is a span during which one child believed it held a role with
// one token: from its first sample that said so to its last.
type interval struct {
	child    string
	role     string
	token    uint64
	from, to int64
}

func (iv interval) String() string {
	return fmt.Sprintf("%s token %d [%s, %s]", iv.child, iv.token, clock(iv.from), clock(iv.to))
}

// clock prints a Unix-nanosecond instant as a time of day, to the
// microsecond.
func clock(ns int64) string { return time.Unix(0, ns).Format("15:04:05.000000") }

// heldIntervals turns the children's belief reports into intervals. A child
// still holding when its reports end held until gone[child] (the moment the
// parent killed it) or, if it was never killed, until end.
func heldIntervals(events []event, gone map[string]int64, end int64) map[string][]interval {
	type key struct{ child, role string }
	open := map[key]*interval{}
	out := map[string][]interval{}
	closeAt := func(k key, at int64) {
		if iv := open[k]; iv != nil {
			iv.to = at
			out[k.role] = append(out[k.role], *iv)
			delete(open, k)
		}
	}
	for _, e := range events {
		if e.Kind != kindBelief {
			continue
		}
		k := key{e.Child, e.Role}
		if iv := open[k]; iv != nil && (!e.Held || iv.token != e.Token) {
			closeAt(k, e.Since)
		}
		if e.Held && open[k] == nil {
			open[k] = &interval{child: e.Child, role: e.Role, token: e.Token, from: e.At}
		}
	}
	for k := range open {
		at, ok := gone[k.child]
		if !ok {
			at = end
		}
		closeAt(k, at)
	}
	for _, ivs := range out {
		slices.SortFunc(ivs, func(a, b interval) int { return cmp.Compare(a.from, b.from) })
	}
	return out
}

// violations collects what broke, across invariants.
type violations []string

func (v *violations) add(format string, args ...any) { *v = append(*v, fmt.Sprintf(format, args...)) }

func (v violations) String() string {
	const most = 20
	lines := v
	if len(lines) > most {
		lines = append(lines[:most:most], fmt.Sprintf("... and %d more", len(v)-most))
	}
	return strings.Join(lines, "\n")
}

// checkNoOverlap: no two processes believed they held one role at once.
func checkNoOverlap(held map[string][]interval) violations {
	var v violations
	for _, role := range sortedKeys(held) {
		ivs := held[role]
		for i, a := range ivs {
			for _, b := range ivs[i+1:] {
				if b.from >= a.to {
					break // sorted by from: no later one overlaps a either... unless a is long
				}
				if a.child != b.child {
					v.add("role %s held twice at once for %v: %v and %v", role, time.Duration(min(a.to, b.to)-b.from), a, b)
				}
			}
		}
	}
	return v
}

// checkTokensIncrease: each takeover of a role carries a greater token than
// every term before it.
func checkTokensIncrease(held map[string][]interval) violations {
	var v violations
	for _, role := range sortedKeys(held) {
		ivs := held[role]
		for i, b := range ivs {
			for _, a := range ivs[:i] {
				if a.child != b.child && b.token <= a.token {
					v.add("role %s: takeover by %v after %v has no greater token", role, b, a)
				}
			}
		}
	}
	return v
}

// checkNoneHeldWithin: nobody believed it held any role during [from, to].
func checkNoneHeldWithin(held map[string][]interval, from, to int64, why string) violations {
	var v violations
	for _, role := range sortedKeys(held) {
		for _, iv := range held[role] {
			if iv.from < to && iv.to > from {
				v.add("role %s held %s: %v overlaps [%s, %s]", role, why, iv, clock(from), clock(to))
			}
		}
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
