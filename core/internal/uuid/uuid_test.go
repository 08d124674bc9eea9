package uuid

import (
	"errors"
	"testing"
	"time"
)

func TestNewV7_HasVersionVariantAndSortsByTime(t *testing.T) {
	a := NewV7()
	time.Sleep(2 * time.Millisecond)
	b := NewV7()
	if a[6]>>4 != 7 || a[8]>>6 != 2 {
		t.Fatalf("%s: version %d, variant bits %b", Format(a), a[6]>>4, a[8]>>6)
	}
	if string(a[:]) >= string(b[:]) {
		t.Fatalf("%s made first does not sort before %s", Format(a), Format(b))
	}
}

func TestFormatAndParse_RoundTrip(t *testing.T) {
	id := NewV7()
	s := Format(id)
	if len(s) != 36 || s[8] != '-' || s[23] != '-' {
		t.Fatalf("Format = %q", s)
	}
	for _, in := range []string{s, s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]} {
		got, err := Parse(in)
		if err != nil || got != id {
			t.Fatalf("Parse(%q) = %v, %v", in, got, err)
		}
	}
}

func TestParse_RejectsWhatIsNotAUUID(t *testing.T) {
	for _, s := range []string{"", "x", "0190a0d6x5f3b-7c1e-8b2a-4d5e6f708192", "0190a0d6-5f3b-7c1e-8b2a-4d5e6f70819g", "0190a0d65f3b7c1e8b2a4d5e6f70819"} {
		if _, err := Parse(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, want ErrSyntax", s, err)
		}
	}
}

func TestNewV7_StrictlyIncreasesWithinAMillisecond(t *testing.T) {
	prev := NewV7()
	for i := range 100_000 { // far more than one millisecond's counter
		id := NewV7()
		if string(id[:]) <= string(prev[:]) {
			t.Fatalf("id %d, %s, does not sort after %s", i, Format(id), Format(prev))
		}
		if id[6]>>4 != 7 || id[8]>>6 != 2 {
			t.Fatalf("%s lost its version or variant", Format(id))
		}
		prev = id
	}
}
