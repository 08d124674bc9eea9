package console

import (
	"bytes"
	"encoding/json"
	"html/template"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/baton-go/baton/core/lease"
)

// payloadView is a payload as the detail page shows it: JSON, indented.
type payloadView struct {
	Text   string
	Length int
}

func newPayloadView(p []byte) payloadView {
	var buf bytes.Buffer
	if err := json.Indent(&buf, p, "", "  "); err != nil {
		// Payloads are JSON (outbox.ValidateEntry); show anything else as
		// it came.
		return payloadView{Text: string(p), Length: len(p)}
	}
	return payloadView{Text: buf.String(), Length: len(p)}
}

// timeLayout is how the console writes a time: UTC, to the second.
const timeLayout = "2006-01-02 15:04:05 UTC"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return formatTime(*t)
}

// ago is how long before now t was, to the second.
func ago(t *time.Time) string {
	if t == nil {
		return ""
	}
	return time.Since(*t).Round(time.Second).String() + " ago"
}

// leaseState says whether a listed lease is held and for how long, or
// since when it is free.
func leaseState(l lease.Listed) string {
	if l.Live {
		return "held, " + l.Remaining.Round(time.Second).String() + " left"
	}
	return "free, ended " + (-l.Remaining).Round(time.Second).String() + " ago"
}

// cut shortens s to at most n runes, marking the cut.
func cut(n int, s string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n-1])) + "…"
}

var templateFuncs = template.FuncMap{
	"time":       formatTime,
	"timep":      formatTimePtr,
	"ago":        ago,
	"leaseState": leaseState,
	"cut":        cut,
	"deref": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
	"derefInt": func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	},
}
