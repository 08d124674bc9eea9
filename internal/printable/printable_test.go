package printable

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestLine_EscapesEveryCharacterATerminalActsOn(t *testing.T) {
	for in, want := range map[string]string{
		"plain text":                "plain text",
		"é, 日本, emoji 🙂":            "é, 日本, emoji 🙂",
		"a\tb\nc\rd":                "a b c d",
		"\x1b[2J":                   `\u001b[2J`,
		"\x1b]0;title\x07":          `\u001b]0;title\u0007`,
		"bell\a nul\x00 del\x7f":    `bell\u0007 nul\u0000 del\u007f`,
		"\u009b31m 8-bit CSI":       `\u009b31m 8-bit CSI`,
		"right\u202eto left\u2066x": `right\u202eto left\u2066x`,
		"bad\xffbyte":               `bad\xffbyte`,
		"cut\xe6\x97":               `cut\xe6\x97`,
	} {
		if got := Line(in); got != want {
			t.Errorf("Line(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestText_KeepsNewlinesAndTabsOnly(t *testing.T) {
	if got, want := Text("a\tb\nc\rd\x1b[K"), "a\tb\nc\\u000dd\\u001b[K"; got != want {
		t.Errorf("Text = %q, want %q", got, want)
	}
}

func TestWriter_NeutralisesAStreamWithCharactersSplitAcrossWrites(t *testing.T) {
	var out bytes.Buffer
	w := NewWriter(&out)
	in := "日本\x1b[2J\u009bé\n"
	// One byte per write: every multi-byte character is split.
	for i := 0; i < len(in); i++ {
		if n, err := w.Write([]byte{in[i]}); n != 1 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "日本\\u001b[2J\\u009bé\n"; got != want {
		t.Errorf("written %q, want %q", got, want)
	}
	// A character never completed is written, escaped, by Flush.
	out.Reset()
	w.Write([]byte("x\xe6\x97"))
	if out.String() != "x" {
		t.Errorf("before Flush: %q, want the partial character held back", out.String())
	}
	w.Flush()
	if got := out.String(); got != `x\xe6\x97` {
		t.Errorf("after Flush: %q", got)
	}
}

func TestWriter_KeepsJSONValidAndEqual(t *testing.T) {
	v := map[string]string{"error": "engine said \x1b]0;x\x07 \u009b \x7f \u202e", "plain": "ok"}
	var out bytes.Buffer
	w := NewWriter(&out)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"\x1b", "\x07", "\u009b", "\x7f", "\u202e"} {
		if strings.Contains(out.String(), c) {
			t.Errorf("the JSON still holds %q: %s", c, out.String())
		}
	}
	var back map[string]string
	if err := json.Unmarshal(out.Bytes(), &back); err != nil || back["error"] != v["error"] || back["plain"] != "ok" {
		t.Errorf("decoded %q, %v; want the value written", back, err)
	}
}
