package pgsql

import (
	"hash/fnv"
	"strings"
	"testing"
)

// The keys must never change: nodes of different baton versions, and of
// both adapters, contend on them.
func TestKeys_AreTheFixedHashes(t *testing.T) {
	h := fnv.New64a()
	h.Write([]byte("baton/postgres migrate\x1fpublic"))
	if got, want := MigrationLockKey("public"), int64(h.Sum64()); got != want {
		t.Fatalf("MigrationLockKey = %d, want %d", got, want)
	}
	h.Reset()
	h.Write([]byte("baton/postgres projection\x1f\"baton_projection_header\"\x1fuser\x1fu1"))
	if got, want := ProjectionLockKey(`"baton_projection_header"`, "user", "u1"), int64(h.Sum64()); got != want {
		t.Fatalf("ProjectionLockKey = %d, want %d", got, want)
	}
}

func TestSchemaProblem_NamesWhatIsWrong(t *testing.T) {
	for name, want := range map[string]string{
		"":                      "empty",
		"   ":                   "white space",
		"pg_mine":               "reserved",
		strings.Repeat("s", 64): "64 bytes",
		"a\x00":                 "NUL",
		"a\xff":                 "UTF-8",
	} {
		if got := SchemaProblem(name); !strings.Contains(got, want) {
			t.Errorf("SchemaProblem(%q) = %q, want it to mention %q", name, got, want)
		}
	}
	if p := SchemaProblem(`My "odd" Schema`); p != "" {
		t.Errorf("a quotable name was refused: %s", p)
	}
}
