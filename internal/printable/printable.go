// Package printable neutralises text before a terminal sees it. Text that
// baton prints can come from elsewhere: an engine's error body quoted in a
// dead letter, a holder name or address someone wrote into the lease table.
// A terminal acts on some characters instead of showing them: ESC starts
// sequences that move the cursor, clear the screen, retitle the window or
// plant hyperlinks; CR returns to the start of the line to overwrite it;
// the 8-bit C1 controls do the same as ESC sequences on some terminals;
// Unicode's bidirectional controls reorder what is shown. Each of them is
// replaced by its \uXXXX escape, visible and, inside a JSON string, still
// the same JSON value. A byte that is not UTF-8 becomes \xNN.
package printable

import (
	"fmt"
	"io"
	"unicode/utf8"
)

// neutralised reports whether r is one of the characters replaced.
func neutralised(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f: // C0, DEL, C1
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, // bidi marks
		r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069: // embeddings, overrides, isolates
		return true
	}
	return false
}

// appendSafe appends s to dst with every neutralised character escaped.
// With layout, newlines and tabs are kept; without, they become spaces,
// and so does CR.
func appendSafe(dst []byte, s []byte, layout bool) []byte {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRune(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = fmt.Appendf(dst, `\x%02x`, s[i])
		case r == '\n' || r == '\t':
			if layout {
				dst = append(dst, byte(r))
			} else {
				dst = append(dst, ' ')
			}
		case r == '\r' && !layout:
			dst = append(dst, ' ')
		case neutralised(r):
			dst = fmt.Appendf(dst, `\u%04x`, r)
		default:
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

// Line returns s for one line of output (a table cell, an error message):
// tabs, newlines and carriage returns become spaces, every other control
// character its escape.
func Line(s string) string {
	if isPlain(s) {
		return s
	}
	return string(appendSafe(nil, []byte(s), false))
}

// Text returns s for output over several lines: newlines and tabs are
// kept, every other control character (CR included) becomes its escape.
func Text(s string) string {
	return string(appendSafe(nil, []byte(s), true))
}

// isPlain reports whether s is printable ASCII.
func isPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// Writer passes everything written to it through Text. A character split
// across two writes is held back until its last byte arrives; Flush
// writes what is still held.
type Writer struct {
	w       io.Writer
	pending []byte
	buf     []byte
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Unwrap returns the writer underneath, for output the program composes
// itself (a terminal user interface's own escape sequences).
func (w *Writer) Unwrap() io.Writer { return w.w }

// Write implements io.Writer. It reports len(p) written when the
// neutralised bytes were written.
func (w *Writer) Write(p []byte) (int, error) {
	data := p
	if len(w.pending) > 0 {
		data = append(w.pending, p...)
		w.pending = nil
	}
	// Hold back the start of a character whose remaining bytes may follow.
	cut := len(data)
	for back := 1; back < utf8.UTFMax && back <= len(data); back++ {
		c := data[len(data)-back]
		if c < utf8.RuneSelf {
			break // ASCII: nothing is split
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(data[len(data)-back:]) {
				cut = len(data) - back
			}
			break
		}
	}
	w.buf = appendSafe(w.buf[:0], data[:cut], true)
	if cut < len(data) {
		w.pending = append([]byte(nil), data[cut:]...)
	}
	if _, err := w.w.Write(w.buf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a held-back partial character, escaped, since no more
// bytes will complete it.
func (w *Writer) Flush() error {
	if len(w.pending) == 0 {
		return nil
	}
	w.buf = appendSafe(w.buf[:0], w.pending, true)
	w.pending = nil
	_, err := w.w.Write(w.buf)
	return err
}
