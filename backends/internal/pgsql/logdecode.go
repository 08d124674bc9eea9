package pgsql

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/baton-go/baton/core/outbox"
)

// The stream's hot path: pgoutput Insert messages of the outbox table,
// tens of thousands a second. They are read here in place, without the
// message and tuple values pglogrepl.Parse allocates for each, and the
// binary values of the columns baton reads are decoded directly; a value
// in any other form goes through pgtype, as every other message goes
// through pglogrepl.

// logColumn is one column of an inserted tuple: its kind (pgoutput's
// 'n' null, 'u' unchanged, 't' text, 'b' binary) and value, a slice of
// the message.
type logColumn struct {
	kind byte
	data []byte
}

// parseInsert reads an Insert message of protocol 1 (its kind byte taken
// off): the relation's oid and the new tuple's columns, appended to cols.
func parseInsert(msg []byte, cols []logColumn) (uint32, []logColumn, error) {
	if len(msg) < 7 || msg[4] != 'N' {
		return 0, cols, fmt.Errorf("an insert message of %d bytes has no new tuple", len(msg))
	}
	rel := binary.BigEndian.Uint32(msg)
	n := int(binary.BigEndian.Uint16(msg[5:]))
	rest := msg[7:]
	for i := range n {
		if len(rest) < 1 {
			return 0, cols, fmt.Errorf("an insert message ends before its column %d of %d", i, n)
		}
		c := logColumn{kind: rest[0]}
		rest = rest[1:]
		if c.kind == pglogrepl.TupleDataTypeText || c.kind == pglogrepl.TupleDataTypeBinary {
			if len(rest) < 4 {
				return 0, cols, fmt.Errorf("an insert message ends in the length of its column %d", i)
			}
			size := binary.BigEndian.Uint32(rest)
			rest = rest[4:]
			if uint64(size) > uint64(len(rest)) {
				return 0, cols, fmt.Errorf("column %d of an insert message claims %d bytes, %d remain", i, size, len(rest))
			}
			c.data, rest = rest[:size], rest[size:]
		}
		cols = append(cols, c)
	}
	return rel, cols, nil
}

// The type oids whose binary form decodeColumn reads itself.
const (
	oidText        = 25
	oidJSONB       = 3802
	oidUUID        = 2950
	oidTimestamptz = 1184
	oidXID8        = 5069
)

// y2k is PostgreSQL's epoch for timestamps, in Unix seconds.
const y2k = 946_684_800

// maxPlainMicros bounds the timestamps decodeBinary reads itself.
const maxPlainMicros = 100_000_000_000_000_000

// decodeColumn reads column i of an inserted outbox row into dst, one of
// *uint64 (xid8), *outbox.ID (uuid), *string (text), *[]byte (jsonb, a
// copy) or *time.Time (timestamptz, as pgx reads it); types maps the rest.
func (r *logReader) decodeColumn(rel *logRelation, cols []logColumn, i int, dst any) error {
	if i >= len(cols) {
		return fmt.Errorf("an inserted outbox row has no column %d", i)
	}
	c := cols[i]
	if c.kind == pglogrepl.TupleDataTypeBinary {
		if ok := decodeBinary(rel.oids[i], c.data, dst); ok {
			return nil
		}
	}
	format := int16(pgtype.BinaryFormatCode)
	switch c.kind {
	case pglogrepl.TupleDataTypeText:
		format = pgtype.TextFormatCode
	case pglogrepl.TupleDataTypeBinary:
	default:
		return fmt.Errorf("column %d of an inserted outbox row has no value (%q)", i, c.kind)
	}
	switch d := dst.(type) {
	case *uint64:
		var v pgtype.Uint64
		if err := r.types.Scan(rel.oids[i], format, c.data, &v); err != nil {
			return err
		}
		*d = v.Uint64
		return nil
	case *outbox.ID:
		var v pgtype.UUID
		if err := r.types.Scan(rel.oids[i], format, c.data, &v); err != nil {
			return err
		}
		*d = outbox.ID(v.Bytes)
		return nil
	case *[]byte:
		var v []byte
		if err := r.types.Scan(rel.oids[i], format, c.data, &v); err != nil {
			return err
		}
		*d = append([]byte(nil), v...)
		return nil
	}
	return r.types.Scan(rel.oids[i], format, c.data, dst)
}

// decodeBinary decodes the binary value of a column of one of the types
// above into dst, and reports whether it did: any other pairing of type
// and target, and the timestamps infinity and -infinity, are left to
// pgtype.
func decodeBinary(oid uint32, data []byte, dst any) bool {
	switch d := dst.(type) {
	case *uint64:
		if oid != oidXID8 || len(data) != 8 {
			return false
		}
		*d = binary.BigEndian.Uint64(data)
	case *outbox.ID:
		if oid != oidUUID || len(data) != 16 {
			return false
		}
		*d = outbox.ID(data)
	case *string:
		if oid != oidText {
			return false
		}
		*d = string(data)
	case *[]byte:
		// jsonb's binary form is a version byte, 1, and the text.
		if oid != oidJSONB || len(data) < 1 || data[0] != 1 {
			return false
		}
		*d = append([]byte(nil), data[1:]...)
	case *time.Time:
		if oid != oidTimestamptz || len(data) != 8 {
			return false
		}
		// Within about 3 000 years of 2000; infinity, -infinity and the
		// far ends of the range are pgtype's to read or refuse.
		us := int64(binary.BigEndian.Uint64(data))
		if us > maxPlainMicros || us < -maxPlainMicros {
			return false
		}
		// pgx's own arithmetic and location, so that a time reads the
		// same either way.
		*d = time.Unix(y2k+us/1_000_000, us%1_000_000*1000)
	default:
		return false
	}
	return true
}
