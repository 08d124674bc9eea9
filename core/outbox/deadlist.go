package outbox

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
)

// DeadState is where a dead letter stands: waiting for an operator, or
// requeued as a new entry.
type DeadState string

// The dead-letter states.
const (
	DeadWaiting  DeadState = "waiting"
	DeadRequeued DeadState = "requeued"
)

// State is d's state.
func (d DeadLetter) State() DeadState {
	if d.RequeuedAs.IsNil() {
		return DeadWaiting
	}
	return DeadRequeued
}

// DeadFilter chooses the dead letters a listing shows. The zero value
// shows every one.
type DeadFilter struct {
	// Lane, when set, shows only dead letters of this lane.
	Lane string
	// State, when set, shows only dead letters in this state.
	State DeadState
}

// Matches reports whether the filter shows d.
func (f DeadFilter) Matches(d DeadLetter) bool {
	return (f.Lane == "" || d.Lane == f.Lane) && (f.State == "" || d.State() == f.State)
}

// ParseDeadState reads a state's name; "" is no state (every one).
func ParseDeadState(s string) (DeadState, error) {
	switch st := DeadState(s); st {
	case "", DeadWaiting, DeadRequeued:
		return st, nil
	}
	return "", fmt.Errorf("the state is %q; it must be %s or %s", s, DeadWaiting, DeadRequeued)
}

// ListDeadMatching lists up to opts.Limit (DefaultListLimit for 0) dead
// letters that f matches, in ListDead's order, reading the store's pages
// until it has them. The last one listed continues the listing as
// opts.Before. A filter that matches few of many dead letters reads them
// all: a listing for operators, not for a hot path.
func ListDeadMatching(ctx context.Context, s Store, opts ListOptions, f DeadFilter) ([]DeadLetter, error) {
	if f == (DeadFilter{}) {
		return s.ListDead(ctx, opts)
	}
	limit, err := opts.PageLimit()
	if err != nil {
		return nil, fmt.Errorf("baton/outbox: list dead letters: %w", err)
	}
	var out []DeadLetter
	page := ListOptions{Limit: MaxListLimit, Before: opts.Before}
	for {
		list, err := s.ListDead(ctx, page)
		if err != nil {
			return nil, err
		}
		for _, d := range list {
			if f.Matches(d) {
				out = append(out, d)
				if len(out) == limit {
					return out, nil
				}
			}
		}
		if len(list) < page.Limit {
			return out, nil
		}
		page.Before = list[len(list)-1].ID
	}
}

// DeadQuery is a page of dead letters as a URL's query asks for it:
// limit, before, lane and state, each optional.
type DeadQuery struct {
	Options ListOptions
	Filter  DeadFilter
}

// ParseDeadQuery reads a DeadQuery from q, the rule of the admin handler's
// GET /dead and of every page that lists dead letters. The error says
// which parameter is wrong and why.
func ParseDeadQuery(q url.Values) (DeadQuery, error) {
	var dq DeadQuery
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListLimit {
			return DeadQuery{}, fmt.Errorf("limit must be a whole number from 1 to %d", MaxListLimit)
		}
		dq.Options.Limit = n
	}
	if v := q.Get("before"); v != "" {
		id, err := ParseID(v)
		if err != nil {
			return DeadQuery{}, fmt.Errorf("before must be a dead letter id (a UUID)")
		}
		dq.Options.Before = id
	}
	dq.Filter.Lane = q.Get("lane")
	st, err := ParseDeadState(q.Get("state"))
	if err != nil {
		return DeadQuery{}, fmt.Errorf("state: %w", err)
	}
	dq.Filter.State = st
	return dq, nil
}

// Values is q as a URL query, the inverse of ParseDeadQuery: the link to
// the same page, or with Before set, the next.
func (q DeadQuery) Values() url.Values {
	v := url.Values{}
	if q.Options.Limit != 0 {
		v.Set("limit", strconv.Itoa(q.Options.Limit))
	}
	if !q.Options.Before.IsNil() {
		v.Set("before", q.Options.Before.String())
	}
	if q.Filter.Lane != "" {
		v.Set("lane", q.Filter.Lane)
	}
	if q.Filter.State != "" {
		v.Set("state", string(q.Filter.State))
	}
	return v
}
