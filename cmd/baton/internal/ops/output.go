package ops

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/printable"
)

// writeJSON prints v as indented JSON.
var writeJSON = cli.WriteJSON

// table prints aligned columns.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// row prints one row. A cell is one line, and shows no control character
// (tabs and newlines become spaces, the rest their escapes): cells hold
// what the database holds.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = printable.Line(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// FormatTime is the tables' time format: UTC, to the millisecond.
func FormatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return FormatTime(*t)
}

func formatStringPtr(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}
