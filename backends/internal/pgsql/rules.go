package pgsql

// The rules on names, and the advisory-lock keys that make nodes of either
// adapter, and of every baton version, exclude each other.

import (
	"fmt"
	"hash/fnv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxIdentifierLength is the longest schema, table or column name, in
// bytes: PostgreSQL silently cuts longer names, which would make two
// different configured names meet.
const MaxIdentifierLength = 63

// IdentifierProblem describes what keeps name from being a PostgreSQL
// identifier as written, or returns "".
func IdentifierProblem(name string) string {
	switch {
	case name == "":
		return "it is empty"
	case len(name) > MaxIdentifierLength:
		return fmt.Sprintf("it is %d bytes long and the limit is %d (PostgreSQL would cut it short)", len(name), MaxIdentifierLength)
	case strings.IndexByte(name, 0) >= 0:
		return "it contains a NUL byte, which PostgreSQL cannot store in a name"
	case !utf8.ValidString(name):
		return "it is not valid UTF-8"
	}
	return ""
}

// SchemaProblem is IdentifierProblem for a schema name, which also may not
// be only white space nor take PostgreSQL's reserved "pg_" prefix.
func SchemaProblem(name string) string {
	switch {
	case name == "":
		return "it is empty"
	case strings.TrimSpace(name) == "":
		return "it is only white space"
	case strings.HasPrefix(name, "pg_"):
		return `names starting with "pg_" are reserved for PostgreSQL's system schemas`
	}
	return IdentifierProblem(name)
}

// MigrationLockKey is the pg_advisory_xact_lock key that serializes schema
// changes on one schema: the 64-bit FNV-1a hash of "baton/postgres
// migrate", a 0x1F byte, and the schema name. It is fixed, so every baton
// version and both adapters contend on the same key.
func MigrationLockKey(schema string) int64 {
	return key("baton/postgres migrate", schema)
}

// ProjectionLockKey is the advisory lock key that orders the flips of one
// projection subject: the 64-bit FNV-1a hash of "baton/postgres
// projection", 0x1F, the quoted header table, 0x1F, the subject type, 0x1F,
// the subject id. Two subjects may share a key; their flips then wait for
// each other for a moment, which costs time, not correctness.
func ProjectionLockKey(quotedHeaderTable, subjectType, subjectID string) int64 {
	return key("baton/postgres projection", quotedHeaderTable, subjectType, subjectID)
}

// key hashes its parts joined by 0x1F bytes.
func key(parts ...string) int64 {
	h := fnv.New64a()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0x1f})
		}
		h.Write([]byte(p))
	}
	return int64(h.Sum64())
}

// ChannelProblem describes what keeps name from being a LISTEN/NOTIFY
// channel both adapters can use (quoted as an identifier, sent as text), or
// returns "".
func ChannelProblem(name string) string {
	switch {
	case len(name) > MaxIdentifierLength:
		return fmt.Sprintf("it is %d bytes long and PostgreSQL channel names are at most %d", len(name), MaxIdentifierLength)
	case !utf8.ValidString(name):
		return "it is not valid UTF-8"
	case strings.ContainsAny(name, `"\`):
		return "it contains a double quote or a backslash"
	case strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "it contains a character that is not printable (a NUL byte, a control character)"
	}
	return ""
}

// NextXIDSQL reads the transaction counter both adapters' NextXID return:
// the first xid not yet assigned when the statement's snapshot was taken
// (pg_snapshot_xmax), as decimal text, which every driver reads whole.
// Every committed entry's xid is below it.
const NextXIDSQL = `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`
