package cli

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/baton-go/baton/internal/printable"
)

// openPTY opens a pseudo-terminal of cols columns and returns its
// terminal side, as a command's stdout would be.
func openPTY(t *testing.T, cols uint16) *os.File {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("cannot open the pseudo-terminal's side: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	if err := unix.IoctlSetWinsize(int(tty.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols}); err != nil {
		t.Fatal(err)
	}
	return tty
}

func TestDetectTerminal_ATerminalIsRedrawnAtItsWidthAndColourFollowsNoColor(t *testing.T) {
	tty := openPTY(t, 42)
	t.Setenv(EnvColumns, "200") // the terminal's own width wins
	for _, noColor := range []string{"", "1"} {
		t.Setenv(EnvNoColor, noColor)
		w, term := DetectTerminal(printable.NewWriter(tty))
		if w != tty {
			t.Errorf("NO_COLOR=%q: the line would not write to the terminal itself", noColor)
		}
		if !term.Redraw || term.Color != (noColor == "") || term.Width() != 42 {
			t.Errorf("NO_COLOR=%q: redraw %v, colour %v, width %d; want true, %v, 42", noColor, term.Redraw, term.Color, term.Width(), noColor == "")
		}
	}
}
