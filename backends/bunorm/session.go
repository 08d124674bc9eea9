package bunorm

import (
	"context"
	"errors"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/schema"
)

// ErrNonStandardStrings is returned, wrapped, by the store constructors and
// the schema functions for a session with standard_conforming_strings off.
//
// bun writes every value into the statement text as a quoted literal
// ('it”s'), doubling quotes but leaving backslashes alone, which is right
// only while backslashes are ordinary characters in such literals. With the
// setting off a backslash escapes the quote after it, so a value holding
// \' ends the literal early and the rest of it runs as SQL. bun's own
// driver refuses such a session; pgx's stdlib driver does not.
var ErrNonStandardStrings = errors.New("baton/bunorm: the session has standard_conforming_strings off")

// checkSession refuses a session in which bun's literals are not safe.
// The stores run it once, when they are built: the setting comes from the
// server, the database, the role or the connection string, which a
// session's pooled connections share.
func checkSession(ctx context.Context, db bun.IDB, caller string) error {
	var v string
	if err := db.NewRaw(`SELECT current_setting('standard_conforming_strings')`).Scan(ctx, &v); err != nil {
		return fmt.Errorf("baton/bunorm: %s: reading standard_conforming_strings: %w", caller, err)
	}
	if v != "on" {
		return fmt.Errorf("baton/bunorm: %s: %w (it is %q): bun quotes values in the statement text, where a backslash "+
			"would then end a quoted value early and let the rest run as SQL; set it on, the PostgreSQL default, "+
			"for the server, the database (ALTER DATABASE ... SET standard_conforming_strings = on), the role or the connection",
			caller, ErrNonStandardStrings, v)
	}
	return nil
}

// escapedText is a text value written as an escape string, E'...', with
// backslashes and quotes doubled. Unlike bun's plain literal it means the
// same whatever standard_conforming_strings says: Enqueue runs on the
// caller's transaction, which no store has checked.
type escapedText string

// AppendQuery implements schema.QueryAppender.
func (s escapedText) AppendQuery(_ schema.QueryGen, b []byte) ([]byte, error) {
	b = append(b, 'E', '\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			b = append(b, '\\', '\\')
		case '\'':
			b = append(b, '\'', '\'')
		default:
			b = append(b, c)
		}
	}
	return append(b, '\''), nil
}
