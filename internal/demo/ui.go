package demo

import (
	"fmt"
	"io"
	"time"

	"github.com/baton-go/baton/internal/cli"
)

// ui prints the demo's narrative. On a terminal a status line stays at the
// bottom and is redrawn in place; otherwise progress is logged as plain
// lines every few seconds. Either way the line fits the width
// (cli.StatusLine).
type ui struct {
	line  *cli.StatusLine
	tty   bool
	start time.Time
}

func newUI(w io.Writer, t cli.Terminal) *ui {
	return &ui{line: cli.NewStatusLine(w, t), tty: t.Redraw, start: time.Now()}
}

func (u *ui) elapsed() string {
	return fmt.Sprintf("[%5.1fs]", time.Since(u.start).Seconds())
}

// logf prints one narrative line, stamped with the time since the start.
func (u *ui) logf(format string, args ...any) {
	u.line.Print(u.elapsed() + " " + fmt.Sprintf(format, args...) + "\n")
}

// textf prints lines without a stamp (the header and the summary).
func (u *ui) textf(format string, args ...any) {
	u.line.Print(fmt.Sprintf(format, args...))
}

// progress shows the status line: redrawn on a terminal, logged otherwise.
func (u *ui) progress(s string) {
	if u.tty {
		u.line.Set(s)
		return
	}
	u.line.Set(u.elapsed() + "   · " + s)
}

// done removes the status line for good.
func (u *ui) done() { u.line.Clear() }
