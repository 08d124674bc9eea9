package outbox_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-go/baton/core/outbox"
)

func TestNewID_IsAVersion7UUIDThatSortsByTime(t *testing.T) {
	a := outbox.NewID()
	time.Sleep(2 * time.Millisecond)
	b := outbox.NewID()
	if a.Compare(b) >= 0 {
		t.Fatalf("%s made before %s does not sort before it", a, b)
	}
	s := a.String()
	if len(s) != 36 || s[14] != '7' || !strings.ContainsRune("89ab", rune(s[19])) {
		t.Fatalf("%s is not a version 7, RFC 9562 variant UUID", s)
	}
	back, err := outbox.ParseID(s)
	if err != nil || back != a {
		t.Fatalf("ParseID(String()) = %v, %v", back, err)
	}
}

func TestParseID_RejectsWhatIsNotAUUID(t *testing.T) {
	for _, s := range []string{"", "xyz", "0190a0d6-5f3b-7c1e-8b2a-4d5e6f708192ff", "0190a0d6-5f3b-7c1e-8b2a-4d5e6f70819g"} {
		if _, err := outbox.ParseID(s); err == nil {
			t.Errorf("ParseID(%q) accepted", s)
		}
	}
}

func TestCursor_OrdersByXidThenID(t *testing.T) {
	lo, _ := outbox.ParseID("00000000-0000-7000-8000-000000000001")
	hi, _ := outbox.ParseID("ffffffff-0000-7000-8000-000000000001")
	cases := []struct {
		a, b outbox.Cursor
		want int
	}{
		{outbox.Cursor{XID: 1, ID: hi}, outbox.Cursor{XID: 2, ID: lo}, -1},
		{outbox.Cursor{XID: 2, ID: lo}, outbox.Cursor{XID: 2, ID: hi}, -1},
		{outbox.Cursor{XID: 1 << 63, ID: lo}, outbox.Cursor{XID: 1<<63 - 1, ID: hi}, 1},
		{outbox.Cursor{XID: 5, ID: lo}, outbox.Cursor{XID: 5, ID: lo}, 0},
	}
	for _, c := range cases {
		if got := c.a.Compare(c.b); got != c.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

func TestValidateEntry_SaysWhatIsWrong(t *testing.T) {
	id := outbox.NewID()
	cases := map[string]struct {
		id      outbox.ID
		lane    string
		payload string
		want    string
	}{
		"nil id":         {outbox.NilID, "graph.init", `{}`, "nil UUID"},
		"empty lane":     {id, "", `{}`, "lane"},
		"long lane":      {id, strings.Repeat("l", 129), `{}`, "lane"},
		"empty payload":  {id, "graph.init", ``, "empty"},
		"not json":       {id, "graph.init", `{"a":`, "not valid JSON"},
		"two values":     {id, "graph.init", `{} {}`, "not valid JSON"},
		"nul in payload": {id, "graph.init", `{"a":"x\u0000y"}`, "u0000"},
	}
	for name, c := range cases {
		err := outbox.ValidateEntry(c.id, c.lane, []byte(c.payload))
		if !errors.Is(err, outbox.ErrInvalidEntry) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidEntry mentioning %q", name, err, c.want)
		}
	}
	for _, ok := range []string{`{}`, `[1,2]`, `"s"`, `{"escaped":"a\\u0000b"}`} {
		if err := outbox.ValidateEntry(id, "graph.init", []byte(ok)); err != nil {
			t.Errorf("ValidateEntry(%s) = %v", ok, err)
		}
	}
}

func TestCursorFromState_AbsentKeysAreTheStart(t *testing.T) {
	c, err := outbox.CursorFromState(nil)
	if err != nil || !c.IsZero() {
		t.Fatalf("empty state: %v, %v", c, err)
	}
	want := outbox.Cursor{XID: 1<<63 + 5, ID: outbox.NewID()}
	x, i := outbox.CursorState(want)
	got, err := outbox.CursorFromState(map[string]string{outbox.KeyLastScannedXID: x, outbox.KeyLastScannedID: i})
	if err != nil || got != want {
		t.Fatalf("round trip: %v, %v; want %v", got, err, want)
	}
	if _, err := outbox.CursorFromState(map[string]string{outbox.KeyLastScannedXID: "-1"}); err == nil {
		t.Fatal("a negative xid was accepted")
	}
}
