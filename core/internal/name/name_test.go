package name

import (
	"strings"
	"testing"
)

func TestProblem_NamesWhatIsWrong(t *testing.T) {
	for s, want := range map[string]string{
		"":                     "empty",
		strings.Repeat("a", 5): "5 bytes long",
		"a\xff":                "not valid UTF-8",
		"a\x00":                "NUL",
	} {
		if got := Problem(s, 4); !strings.Contains(got, want) {
			t.Errorf("Problem(%q) = %q, want it to mention %q", s, got, want)
		}
	}
	if got := Problem("abcd", 4); got != "" {
		t.Errorf("Problem of a valid name = %q", got)
	}
}
