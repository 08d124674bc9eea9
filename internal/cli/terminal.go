package cli

import (
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"golang.org/x/term"
	"golang.org/x/text/width"

	"github.com/baton-go/baton/internal/printable"
)

// DefaultColumns is the width assumed when neither the terminal nor the
// COLUMNS environment variable gives one.
const DefaultColumns = 80

// Environment variables a progress line honours: NO_COLOR (https://no-color.org),
// set and non-empty, turns colour off; COLUMNS gives the width when the
// output is not a terminal, or the terminal does not say.
const (
	EnvNoColor = "NO_COLOR"
	EnvColumns = "COLUMNS"
)

// Terminal is what the output of a progress line can do. The zero value
// is output that is not a terminal: plain lines, no escape sequence.
type Terminal struct {
	// Redraw: the output is a terminal, where the line is redrawn in
	// place (carriage return, erase line) rather than repeated.
	Redraw bool
	// Color: colour and other attributes may be used; a terminal, with
	// NO_COLOR unset or empty.
	Color bool
	// Columns, if set, returns the current width (asked at every line, so
	// a resized window is followed); nil or a result below 1 means COLUMNS,
	// or DefaultColumns.
	Columns func() int
}

// DetectTerminal says what w can do, and returns the writer a progress
// line writes to: for a terminal, the file under a printable.Writer, so
// that the line's own escape sequences reach it (StatusLine neutralises
// the text it is given itself); otherwise w.
func DetectTerminal(w io.Writer) (io.Writer, Terminal) {
	raw := w
	if u, ok := w.(interface{ Unwrap() io.Writer }); ok {
		raw = u.Unwrap()
	}
	f, ok := raw.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return w, Terminal{}
	}
	fd := int(f.Fd())
	return raw, Terminal{
		Redraw: true,
		Color:  colorAllowed(),
		Columns: func() int {
			if c, _, err := term.GetSize(fd); err == nil {
				return c
			}
			return 0
		},
	}
}

// colorAllowed reports whether NO_COLOR leaves colour on: unset or empty.
func colorAllowed() bool { return os.Getenv(EnvNoColor) == "" }

// Width is the number of columns a line may take.
func (t Terminal) Width() int {
	if t.Columns != nil {
		if c := t.Columns(); c > 0 {
			return c
		}
	}
	if c, err := strconv.Atoi(strings.TrimSpace(os.Getenv(EnvColumns))); err == nil && c > 0 {
		return c
	}
	return DefaultColumns
}

// runeWidth is the number of columns r takes on a terminal: 0 for
// combining marks and invisible format characters, 2 for East Asian wide
// and full-width characters (CJK, most emoji), 1 otherwise.
func runeWidth(r rune) int {
	switch {
	case unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf):
		return 0
	case r >= 0x1160 && r <= 0x11ff: // Hangul medial vowels and final consonants join the syllable
		return 0
	}
	switch width.LookupRune(r).Kind() {
	case width.EastAsianWide, width.EastAsianFullwidth:
		return 2
	}
	return 1
}

// DisplayWidth is the number of terminal columns s takes (s holds no
// control character).
func DisplayWidth(s string) int {
	n := 0
	for _, r := range s {
		n += runeWidth(r)
	}
	return n
}

// Fit cuts s to at most columns terminal columns, counted by display width
// (a multi-byte character is never split, a wide one counts two), ending
// it with "…" when anything was cut.
func Fit(s string, columns int) string {
	if columns <= 0 {
		return ""
	}
	if DisplayWidth(s) <= columns {
		return s
	}
	var b strings.Builder
	n := 0
	for _, r := range s {
		w := runeWidth(r)
		if n+w > columns-1 {
			break
		}
		b.WriteRune(r)
		n += w
	}
	return b.String() + "…"
}

// Escape sequences of a redrawn line.
const (
	eraseLine = "\r\x1b[K" // back to the first column, erase to the end
	dim       = "\x1b[2m"
	reset     = "\x1b[0m"
)

// StatusLine is a progress line under a command's other output. On a
// terminal it stays at the bottom and is redrawn in place, cut to one
// column less than the width (the cursor never wraps, so the carriage
// return always reaches the line's start and nothing is left behind), dim
// when colour is allowed. Anywhere else each status is a plain line of its
// own, cut to the width, with no carriage return and no escape sequence.
// It is safe for concurrent use.
type StatusLine struct {
	mu    sync.Mutex
	w     io.Writer
	t     Terminal
	shown string // the status on the terminal; "" for none
}

// NewStatusLine writes to w, which can do what t says (see
// DetectTerminal).
func NewStatusLine(w io.Writer, t Terminal) *StatusLine {
	return &StatusLine{w: w, t: t}
}

// Set shows text as the status: control characters neutralised, on one
// line, cut to fit.
func (s *StatusLine) Set(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text = strings.TrimSpace(printable.Line(text))
	if !s.t.Redraw {
		io.WriteString(s.w, Fit(text, s.t.Width())+"\n")
		return
	}
	s.shown = Fit(text, s.t.Width()-1)
	io.WriteString(s.w, eraseLine)
	s.drawLocked()
}

// Print writes text (whole lines; control characters other than newline
// and tab neutralised) above the status line, and draws the status again
// under it.
func (s *StatusLine) Print(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearLocked()
	io.WriteString(s.w, printable.Text(text))
	s.drawLocked()
}

// Clear removes the status line, until the next Set.
func (s *StatusLine) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clearLocked()
	s.shown = ""
}

func (s *StatusLine) clearLocked() {
	if s.t.Redraw && s.shown != "" {
		io.WriteString(s.w, eraseLine)
	}
}

func (s *StatusLine) drawLocked() {
	if !s.t.Redraw || s.shown == "" {
		return
	}
	if s.t.Color {
		io.WriteString(s.w, dim+s.shown+reset)
	} else {
		io.WriteString(s.w, s.shown)
	}
}
