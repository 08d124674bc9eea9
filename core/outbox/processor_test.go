package outbox_test

import (
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/baton-go/baton/core/outbox"
)

func TestStorableReason_EscapesWhatNoStoreCanKeepAndCutsAtTheLimit(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"409 Conflict: {\"error\": \"taken\"}", "409 Conflict: {\"error\": \"taken\"}"},
		{"ünïcödé 日本 🙂 \\ ' \"", "ünïcödé 日本 🙂 \\ ' \""},
		{"a\x00b", `a\x00b`},
		{"a\xffb\xc3(", `a\xffb\xc3(`},
		{"line\nnext\ttab\r", `line\nnext\ttab\r`},
		{"sep\u2028bom\ufeffdel\x7f", `sep\u2028bom\ufeffdel\x7f`},
		{"", ""},
	} {
		if got := outbox.StorableReason(tc.in); got != tc.want {
			t.Errorf("StorableReason(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{
		strings.Repeat("x", outbox.MaxReasonLength+1),
		strings.Repeat("日", outbox.MaxReasonLength),
		strings.Repeat("\x00", outbox.MaxReasonLength),
		strings.Repeat("a\xff", outbox.MaxReasonLength),
	} {
		got := outbox.StorableReason(in)
		if len(got) > outbox.MaxReasonLength || len(got) < outbox.MaxReasonLength-8 || !strings.HasSuffix(got, " …(cut)") {
			t.Errorf("StorableReason of %d bytes is %d bytes ending %q; want at most MaxReasonLength (%d), marked as cut",
				len(in), len(got), got[max(0, len(got)-12):], outbox.MaxReasonLength)
		}
		if !utf8.ValidString(got) || strings.IndexFunc(got, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("StorableReason of %d bytes is not printable UTF-8", len(in))
		}
	}
	exact := strings.Repeat("y", outbox.MaxReasonLength)
	if got := outbox.StorableReason(exact); got != exact {
		t.Errorf("a printable reason of exactly MaxReasonLength bytes was changed")
	}
}
