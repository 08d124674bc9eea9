// Package name holds the one rule for the names baton stores as text keys
// (lock names, role names): 1 to max bytes of UTF-8 with no NUL byte, which
// PostgreSQL text cannot hold.
package name

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Problem describes what is wrong with s as a name of at most max bytes, or
// returns "" when nothing is.
func Problem(s string, max int) string {
	switch {
	case s == "":
		return "the name is empty"
	case len(s) > max:
		return fmt.Sprintf("the name is %d bytes long, the limit is %d", len(s), max)
	case !utf8.ValidString(s):
		return fmt.Sprintf("the name %q is not valid UTF-8", s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Sprintf("the name %q contains a NUL byte", s)
	}
	return ""
}
