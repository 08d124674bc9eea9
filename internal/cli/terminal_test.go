package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/baton-go/baton/internal/printable"
)

func TestFit_CutsByDisplayWidthNeverInsideACharacter(t *testing.T) {
	for _, tc := range []struct {
		in      string
		columns int
		want    string
	}{
		{"short", 80, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"eleven char", 10, "eleven ch…"},
		// "·" is two bytes and one column: a byte count would cut early.
		{"a · b · c · d", 9, "a · b · …"},
		// Wide characters take two columns each, and are never halved.
		{"日本語のテキスト", 7, "日本語…"},
		{"日本語のテキスト", 8, "日本語…"},
		// A combining accent stays with its letter and takes no column.
		{"cafe\u0301 cafe\u0301 cafe\u0301", 8, "cafe\u0301 ca…"},
		{"cafe\u0301 x", 5, "cafe\u0301…"},
		{"🙂🙂🙂", 4, "🙂…"},
		{"anything", 1, "…"},
		{"anything", 0, ""},
	} {
		got := Fit(tc.in, tc.columns)
		if got != tc.want {
			t.Errorf("Fit(%q, %d) = %q, want %q", tc.in, tc.columns, got, tc.want)
		}
		if !utf8.ValidString(got) || DisplayWidth(got) > tc.columns {
			t.Errorf("Fit(%q, %d) = %q: %d columns or invalid UTF-8", tc.in, tc.columns, got, DisplayWidth(got))
		}
	}
	if w := DisplayWidth("é日🙂·a"); w != 7 {
		t.Errorf("DisplayWidth = %d, want 1+2+2+1+1", w)
	}
}

func TestTerminal_WidthFromColumnsThenTheEnvironmentThenTheDefault(t *testing.T) {
	t.Setenv(EnvColumns, "")
	if w := (Terminal{}).Width(); w != DefaultColumns {
		t.Errorf("no width anywhere: %d, want %d", w, DefaultColumns)
	}
	t.Setenv(EnvColumns, "132")
	if w := (Terminal{}).Width(); w != 132 {
		t.Errorf("COLUMNS=132: %d", w)
	}
	if w := (Terminal{Columns: func() int { return 40 }}).Width(); w != 40 {
		t.Errorf("the terminal's own width: %d, want 40", w)
	}
	if w := (Terminal{Columns: func() int { return 0 }}).Width(); w != 132 {
		t.Errorf("a terminal that does not say: %d, want COLUMNS", w)
	}
	t.Setenv(EnvColumns, "wide")
	if w := (Terminal{}).Width(); w != DefaultColumns {
		t.Errorf("COLUMNS=wide: %d, want the default", w)
	}
}

func TestDetectTerminal_OutputThatIsNotATerminalGetsPlainLines(t *testing.T) {
	var buf bytes.Buffer
	pw := printable.NewWriter(&buf)
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, w := range map[string]io.Writer{"buffer": &buf, "printable writer": pw, "file": f, "printable file": printable.NewWriter(f)} {
		got, term := DetectTerminal(w)
		if term.Redraw || term.Color || term.Columns != nil {
			t.Errorf("%s: %+v, want the zero Terminal", name, term)
		}
		if got != w {
			t.Errorf("%s: the line would not write through the given writer", name)
		}
	}
}

func TestStatusLine_NotATerminal_PlainLinesCutToWidthWithoutEscapes(t *testing.T) {
	t.Setenv(EnvColumns, "")
	var out bytes.Buffer
	s := NewStatusLine(&out, Terminal{})
	s.Print("a narrative line that is longer than eighty columns is not a status and is left whole, as it is\n")
	for i := range 3 {
		s.Set(fmt.Sprintf("status %d · %s", i, strings.Repeat("日本 ", 40)))
	}
	s.Set("control \x1b[31mcharacters\r neutralised")
	s.Clear()
	text := out.String()
	if strings.ContainsAny(text, "\r\x1b") {
		t.Fatalf("carriage return or escape in output that is not a terminal:\n%q", text)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want the narrative and one per status:\n%s", len(lines), text)
	}
	for _, l := range lines[1:] {
		if w := DisplayWidth(l); w > DefaultColumns {
			t.Errorf("status line of %d columns, over %d: %q", w, DefaultColumns, l)
		}
	}
	if !strings.HasSuffix(lines[1], "…") || !strings.HasPrefix(lines[1], "status 0 · 日本") {
		t.Errorf("a long status is not cut with an ellipsis: %q", lines[1])
	}
	if lines[4] != `control \u001b[31mcharacters  neutralised` {
		t.Errorf("control characters: %q", lines[4])
	}
}

func TestStatusLine_Terminal_RedrawnInPlaceLeavingNoDebris(t *testing.T) {
	const width = 40
	for _, color := range []bool{true, false} {
		var out bytes.Buffer
		s := NewStatusLine(&out, Terminal{Redraw: true, Color: color, Columns: func() int { return width }})
		s.Set("a first status, far longer than forty columns of the terminal")
		s.Print("narrative one\n")
		s.Set("second")
		s.Set("日本語 " + strings.Repeat("wide ", 20))
		s.Print("narrative two\nand three\n")
		s.Set("last · status")
		screen, wrapped := emulate(t, out.String(), width)
		if wrapped {
			t.Errorf("color %v: a line wrapped past the %d columns:\n%q", color, width, out.String())
		}
		want := []string{"narrative one", "narrative two", "and three", "last · status"}
		if strings.Join(screen, "\n") != strings.Join(want, "\n") {
			t.Errorf("color %v: the screen shows\n%s\nwant\n%s", color, strings.Join(screen, "\n"), strings.Join(want, "\n"))
		}
		if has := strings.Contains(out.String(), "\x1b[2m"); has != color {
			t.Errorf("color %v: dim attribute written: %v", color, has)
		}
		s.Clear()
		if screen, _ := emulate(t, out.String(), width); screen[len(screen)-1] != "" {
			t.Errorf("Clear left %q on the screen", screen[len(screen)-1])
		}
	}
}

func TestStatusLine_NoColorTurnsColourOff(t *testing.T) {
	t.Setenv(EnvNoColor, "1")
	if colorAllowed() {
		t.Error("NO_COLOR=1 allows colour")
	}
	t.Setenv(EnvNoColor, "")
	if !colorAllowed() {
		t.Error("an empty NO_COLOR turned colour off; only a non-empty one does")
	}
}

// emulate plays out on a terminal of width columns, handling what a
// StatusLine writes (printable characters, newline, carriage return,
// erase to the end of the line, attributes), and returns the rows with
// trailing blanks trimmed, and whether any row wrapped.
func emulate(t *testing.T, out string, width int) (rows []string, wrapped bool) {
	t.Helper()
	screen := [][]rune{{}}
	row, col := 0, 0
	put := func(r rune, w int) {
		if col+w > width {
			wrapped = true
			screen = append(screen, []rune{})
			row, col = row+1, 0
		}
		line := screen[row]
		for len(line) < col+w {
			line = append(line, ' ')
		}
		line[col] = r
		for i := 1; i < w; i++ {
			line[col+i] = 0 // the second half of a wide character
		}
		screen[row] = line
		col += w
	}
	for i := 0; i < len(out); {
		switch {
		case out[i] == '\n':
			screen = append(screen, []rune{})
			row, col = row+1, 0
			i++
		case out[i] == '\r':
			col = 0
			i++
		case strings.HasPrefix(out[i:], "\x1b["):
			j := i + 2
			for j < len(out) && (out[j] >= '0' && out[j] <= '9' || out[j] == ';') {
				j++
			}
			switch out[j] {
			case 'K':
				if col < len(screen[row]) {
					screen[row] = screen[row][:col]
				}
			case 'm':
			default:
				t.Fatalf("unexpected escape %q", out[i:j+1])
			}
			i = j + 1
		default:
			r, size := utf8.DecodeRuneInString(out[i:])
			if r < 0x20 || r == 0x7f {
				t.Fatalf("control character %q in the output", r)
			}
			if w := runeWidth(r); w == 0 {
				if col > 0 {
					screen[row][col-1] = r // close enough: a mark on the previous cell
				}
			} else {
				put(r, w)
			}
			i += size
		}
	}
	for _, l := range screen {
		rows = append(rows, strings.TrimRight(strings.ReplaceAll(string(l), "\x00", ""), " "))
	}
	return rows, wrapped
}

func TestMessage_EachLineOfADriverErrorOnce(t *testing.T) {
	dial := "127.0.0.1:1 (localhost): dial error: dial tcp 127.0.0.1:1: connect: connection refused"
	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("plain"), "plain"},
		// pgx: TLS first, then without; both attempts fail alike.
		{fmt.Errorf("cannot connect: %w", errors.New("failed to connect to `user=u database=x`:\n\t"+dial+"\n\t"+dial)),
			"cannot connect: failed to connect to `user=u database=x`: " + dial},
		{errors.New("failed:\n\ta:1 refused\n\ta:2 refused\n\ta:1 refused"), "failed: a:1 refused; a:2 refused"},
		{errors.New("hostname resolving error: lookup h: no such host\nlookup h: no such host"), "hostname resolving error: lookup h: no such host"},
		{errors.New("  spread\n\n  over   lines  "), "spread; over lines"},
	} {
		if got := Message(tc.err); got != tc.want {
			t.Errorf("Message(%q)\n = %q\nwant %q", tc.err, got, tc.want)
		}
	}
}
