package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

func deadIDs(ds []outbox.DeadLetter) []outbox.ID {
	out := make([]outbox.ID, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

func TestListDeadMatching_FiltersByLaneAndStateAcrossTheStoresPages(t *testing.T) {
	ctx := context.Background()
	s := newMemory(t)
	// The lane looked for is parked first, so a full page of the store's
	// newest dead letters, all of another lane, comes before it.
	wanted := parkMany(t, s, "graph.metadata", 3)
	parkMany(t, s, "graph.init", outbox.MaxListLimit)
	if err := s.Requeue(ctx, wanted[1], outbox.NewID()); err != nil {
		t.Fatal(err)
	}
	newestFirst := slices.Clone(wanted)
	slices.Reverse(newestFirst)

	for _, tc := range []struct {
		f    outbox.DeadFilter
		want []outbox.ID
	}{
		{outbox.DeadFilter{Lane: "graph.metadata"}, newestFirst},
		{outbox.DeadFilter{Lane: "graph.metadata", State: outbox.DeadWaiting}, []outbox.ID{wanted[2], wanted[0]}},
		{outbox.DeadFilter{State: outbox.DeadRequeued}, []outbox.ID{wanted[1]}},
		{outbox.DeadFilter{Lane: "graph.none"}, nil},
	} {
		got, err := outbox.ListDeadMatching(ctx, s, outbox.ListOptions{}, tc.f)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(deadIDs(got), tc.want) {
			t.Errorf("%+v listed %v, want %v", tc.f, deadIDs(got), tc.want)
		}
		for _, d := range got {
			if !tc.f.Matches(d) {
				t.Errorf("%+v listed %+v, which it does not match", tc.f, d)
			}
		}
	}

	// A page of the filtered listing continues after its last one.
	f := outbox.DeadFilter{Lane: "graph.metadata"}
	page, err := outbox.ListDeadMatching(ctx, s, outbox.ListOptions{Limit: 2}, f)
	if err != nil || !slices.Equal(deadIDs(page), newestFirst[:2]) {
		t.Fatalf("first page: %v %v, want %v", deadIDs(page), err, newestFirst[:2])
	}
	page, err = outbox.ListDeadMatching(ctx, s, outbox.ListOptions{Limit: 2, Before: page[1].ID}, f)
	if err != nil || !slices.Equal(deadIDs(page), newestFirst[2:]) {
		t.Fatalf("second page: %v %v, want %v", deadIDs(page), err, newestFirst[2:])
	}
	// Without a filter, the store's own page.
	all, err := outbox.ListDeadMatching(ctx, s, outbox.ListOptions{}, outbox.DeadFilter{})
	if err != nil || len(all) != outbox.DefaultListLimit {
		t.Fatalf("unfiltered: %d %v, want %d", len(all), err, outbox.DefaultListLimit)
	}
}

func TestDeadFilter_MatchesLaneAndState(t *testing.T) {
	waiting := outbox.DeadLetter{ID: outbox.NewID(), Lane: "a"}
	requeued := outbox.DeadLetter{ID: outbox.NewID(), Lane: "a", RequeuedAs: outbox.NewID(), RequeuedAt: time.Now()}
	if waiting.State() != outbox.DeadWaiting || requeued.State() != outbox.DeadRequeued {
		t.Fatalf("states: %q %q", waiting.State(), requeued.State())
	}
	for _, tc := range []struct {
		f              outbox.DeadFilter
		wait, requeued bool
	}{
		{outbox.DeadFilter{}, true, true},
		{outbox.DeadFilter{Lane: "a"}, true, true},
		{outbox.DeadFilter{Lane: "b"}, false, false},
		{outbox.DeadFilter{State: outbox.DeadWaiting}, true, false},
		{outbox.DeadFilter{Lane: "a", State: outbox.DeadRequeued}, false, true},
	} {
		if tc.f.Matches(waiting) != tc.wait || tc.f.Matches(requeued) != tc.requeued {
			t.Errorf("%+v: matches waiting %v, requeued %v; want %v, %v", tc.f, tc.f.Matches(waiting), tc.f.Matches(requeued), tc.wait, tc.requeued)
		}
	}
}

func TestParseDeadQuery_ReadsWhatValuesWritesAndNamesTheBadParameter(t *testing.T) {
	q := outbox.DeadQuery{
		Options: outbox.ListOptions{Limit: 20, Before: outbox.NewID()},
		Filter:  outbox.DeadFilter{Lane: "graph.metadata", State: outbox.DeadRequeued},
	}
	got, err := outbox.ParseDeadQuery(q.Values())
	if err != nil || got != q {
		t.Fatalf("ParseDeadQuery(%v) = %+v, %v; want %+v", q.Values(), got, err, q)
	}
	if got, err := outbox.ParseDeadQuery(url.Values{}); err != nil || got != (outbox.DeadQuery{}) {
		t.Fatalf("an empty query: %+v %v", got, err)
	}
	for raw, param := range map[string]string{
		"limit=0": "limit", "limit=1001": "limit", "limit=x": "limit",
		"before=nope": "before", "state=parked": "state",
	} {
		v, _ := url.ParseQuery(raw)
		if _, err := outbox.ParseDeadQuery(v); err == nil || !strings.HasPrefix(err.Error(), param) {
			t.Errorf("%s: err = %v, want one naming %s", raw, err, param)
		}
	}
}

func TestErrorStatus_MapsTheSentinels(t *testing.T) {
	for err, want := range map[error]int{
		fmt.Errorf("get: %w", outbox.ErrNotFound):            http.StatusNotFound,
		fmt.Errorf("requeue: %w", outbox.ErrAlreadyRequeued): http.StatusConflict,
		errors.New("connection refused"):                     http.StatusInternalServerError,
	} {
		if got, msg := outbox.ErrorStatus(err); got != want || msg == "" || strings.Contains(msg, "connection") {
			t.Errorf("ErrorStatus(%v) = %d %q, want %d and a message of its own", err, got, msg, want)
		}
	}
}

func TestHealth_FailingWhileAStreakIsOn(t *testing.T) {
	now := time.Now()
	msg := "503"
	if (outbox.Health{LastError: &msg, LastErrorAt: &now}).Failing() {
		t.Error("a last error without a streak reads as failing")
	}
	if !(outbox.Health{FirstStuckAt: &now}).Failing() {
		t.Error("a streak does not read as failing")
	}
}

func TestAdmin_FiltersTheListingByLaneAndState(t *testing.T) {
	s := newMemory(t)
	h := outbox.AdminHandler(s, nil)
	a := parkLane(t, s, "graph.metadata")
	parkLane(t, s, "graph.init")
	b := parkLane(t, s, "graph.metadata")
	if err := s.Requeue(context.Background(), b, outbox.NewID()); err != nil {
		t.Fatal(err)
	}
	for query, want := range map[string][]outbox.ID{
		"lane=graph.metadata":                {b, a},
		"lane=graph.metadata&state=waiting":  {a},
		"lane=graph.metadata&state=requeued": {b},
	} {
		code, body := get(t, h, "GET", "/dead?"+query)
		list, _ := body["dead_letters"].([]any)
		var got []outbox.ID
		for _, d := range list {
			id, _ := outbox.ParseID(d.(map[string]any)["id"].(string))
			got = append(got, id)
		}
		if code != http.StatusOK || !slices.Equal(got, want) {
			t.Errorf("GET /dead?%s: %d %v, want %v", query, code, got, want)
		}
	}
	if code, body := get(t, h, "GET", "/dead?state=parked"); code != http.StatusBadRequest || body["error"] == nil {
		t.Errorf("GET /dead?state=parked: %d %v, want 400", code, body)
	}
}

func TestListDeadMatching_RefusesTheLimitsListDeadRefuses(t *testing.T) {
	ctx := context.Background()
	s := newMemory(t)
	parkMany(t, s, "graph.metadata", 3)
	f := outbox.DeadFilter{Lane: "graph.metadata"}
	for _, limit := range []int{-1, outbox.MaxListLimit + 1} {
		if _, err := s.ListDead(ctx, outbox.ListOptions{Limit: limit}); err == nil {
			t.Fatalf("ListDead with limit %d succeeded; the test proves nothing", limit)
		}
		if got, err := outbox.ListDeadMatching(ctx, s, outbox.ListOptions{Limit: limit}, f); err == nil {
			t.Fatalf("ListDeadMatching with limit %d listed %d dead letters; want the error ListDead gives", limit, len(got))
		}
	}
}
