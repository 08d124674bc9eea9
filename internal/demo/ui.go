package demo

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/baton-go/baton/internal/printable"
)

// ui prints the demo's narrative. On a terminal a status line stays at the
// bottom and is redrawn in place; otherwise progress is logged as plain
// lines every few seconds.
type ui struct {
	mu     sync.Mutex
	w      io.Writer
	tty    bool
	start  time.Time
	status string
}

func newUI(w io.Writer, tty bool) *ui {
	return &ui{w: w, tty: tty, start: time.Now()}
}

func (u *ui) elapsed() string {
	return fmt.Sprintf("[%5.1fs]", time.Since(u.start).Seconds())
}

// logf prints one narrative line, stamped with the time since the start.
func (u *ui) logf(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.clearLocked()
	fmt.Fprintf(u.w, "%s %s\n", u.elapsed(), printable.Text(fmt.Sprintf(format, args...)))
	u.drawLocked()
}

// textf prints lines without a stamp (the header and the summary).
func (u *ui) textf(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.clearLocked()
	fmt.Fprint(u.w, printable.Text(fmt.Sprintf(format, args...)))
	u.drawLocked()
}

// progress shows the status line: redrawn on a terminal, logged otherwise.
func (u *ui) progress(s string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	s = printable.Line(s)
	if !u.tty {
		fmt.Fprintf(u.w, "%s   · %s\n", u.elapsed(), s)
		return
	}
	u.status = s
	u.clearLocked()
	u.drawLocked()
}

// done removes the status line for good.
func (u *ui) done() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.clearLocked()
	u.status = ""
}

func (u *ui) clearLocked() {
	if u.tty && u.status != "" {
		fmt.Fprint(u.w, "\r\x1b[K")
	}
}

func (u *ui) drawLocked() {
	if u.tty && u.status != "" {
		fmt.Fprint(u.w, "\x1b[2m"+strings.TrimSpace(u.status)+"\x1b[0m")
	}
}
