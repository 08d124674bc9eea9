package graph

import (
	"strings"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ceiling := 5 * time.Minute
	cases := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"  ", 0, false},
		{"12", 12 * time.Second, true},
		{" 12 ", 12 * time.Second, true},
		{"0", MinRetryAfter, true},
		{"300", 5 * time.Minute, true},
		{"301", 5 * time.Minute, true},
		{"18446744073709551615", 5 * time.Minute, true},
		{"184467440737095516150", 5 * time.Minute, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"+3", 0, false},
		{"Sun, 01 Mar 2026 12:01:30 GMT", 90 * time.Second, true},  // IMF-fixdate
		{"Sunday, 01-Mar-26 12:00:10 GMT", 10 * time.Second, true}, // RFC 850
		{"Sun Mar  1 12:00:20 2026", 20 * time.Second, true},       // asctime
		{"Sun, 01 Mar 2026 11:00:00 GMT", MinRetryAfter, true},
		{"Sun, 01 Mar 2026 13:00:00 GMT", 5 * time.Minute, true},
		{"tomorrow", 0, false},
	}
	for _, c := range cases {
		got, ok := parseRetryAfter(c.v, now, ceiling)
		if got != c.want || ok != c.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

func TestExcerpt_CutsAtACharacterBoundary(t *testing.T) {
	// "é" is two bytes; a cut after 3 bytes would split the second one.
	got := excerpt(strings.NewReader("éé and more"), 3)
	if got != "é …(cut)" {
		t.Errorf("excerpt = %q; want %q", got, "é …(cut)")
	}
	if got := excerpt(strings.NewReader("short"), 512); got != "short" {
		t.Errorf("excerpt = %q; want it whole", got)
	}
	if got := excerpt(strings.NewReader("  \n"), 512); got != "" {
		t.Errorf("excerpt of blanks = %q; want empty", got)
	}
	if got := excerpt(strings.NewReader("a\xffb"), 512); got != "a\uFFFDb" {
		t.Errorf("excerpt = %q; want invalid bytes replaced", got)
	}
}

func TestSegment_EscapesDotSegmentsAndSeparators(t *testing.T) {
	for in, want := range map[string]string{
		"d1": "d1", ".": "%2E", "..": "%2E%2E", "...": "...", "a/b": "a%2Fb", "a b": "a%20b", "?#%": "%3F%23%25",
	} {
		if got := segment(in); got != want {
			t.Errorf("segment(%q) = %q; want %q", in, got, want)
		}
	}
}
