package pgsql

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/baton-go/baton/core/outbox"
)

// insertMessage builds a pgoutput Insert message of protocol 1, without
// its kind byte: relation rel, a new tuple of cols.
func insertMessage(rel uint32, cols ...logColumn) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, rel)
	b.WriteByte('N')
	_ = binary.Write(&b, binary.BigEndian, uint16(len(cols)))
	for _, c := range cols {
		b.WriteByte(c.kind)
		if c.kind == pglogrepl.TupleDataTypeText || c.kind == pglogrepl.TupleDataTypeBinary {
			_ = binary.Write(&b, binary.BigEndian, uint32(len(c.data)))
			b.Write(c.data)
		}
	}
	return b.Bytes()
}

// parseInsert reads what pglogrepl reads from the same message.
func TestParseInsert_ReadsWhatPglogreplReads(t *testing.T) {
	cols := []logColumn{
		{kind: pglogrepl.TupleDataTypeBinary, data: []byte{0, 0, 0, 0, 0, 0, 1, 2}},
		{kind: pglogrepl.TupleDataTypeNull},
		{kind: pglogrepl.TupleDataTypeText, data: []byte("bench.1")},
		{kind: pglogrepl.TupleDataTypeToast},
		{kind: pglogrepl.TupleDataTypeBinary, data: []byte{}},
	}
	msg := insertMessage(16_385, cols...)
	rel, got, err := parseInsert(msg, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pglogrepl.Parse(append([]byte{byte(pglogrepl.MessageTypeInsert)}, msg...))
	if err != nil {
		t.Fatal(err)
	}
	want := m.(*pglogrepl.InsertMessage)
	if rel != want.RelationID || len(got) != len(want.Tuple.Columns) {
		t.Fatalf("relation %d with %d columns, pglogrepl reads %d with %d", rel, len(got), want.RelationID, len(want.Tuple.Columns))
	}
	for i, c := range want.Tuple.Columns {
		if got[i].kind != c.DataType || !bytes.Equal(got[i].data, c.Data) {
			t.Errorf("column %d: %q %q, pglogrepl reads %q %q", i, got[i].kind, got[i].data, c.DataType, c.Data)
		}
	}
}

// A message cut anywhere is an error, never a panic or a short tuple.
func TestParseInsert_RefusesEveryTruncation(t *testing.T) {
	msg := insertMessage(7,
		logColumn{kind: pglogrepl.TupleDataTypeBinary, data: []byte("0123456789")},
		logColumn{kind: pglogrepl.TupleDataTypeText, data: []byte("lane")})
	for n := range len(msg) {
		if _, _, err := parseInsert(msg[:n], nil); err == nil {
			t.Errorf("a message cut to %d of %d bytes was read", n, len(msg))
		}
	}
	bad := append([]byte(nil), msg...)
	bad[4] = 'K' // an old key instead of a new tuple
	if _, _, err := parseInsert(bad, nil); err == nil || !strings.Contains(err.Error(), "no new tuple") {
		t.Errorf("an insert without a new tuple: err = %v", err)
	}
}

// decodeBinary reads each type as pgtype does, and leaves what it does not
// read itself to pgtype.
func TestDecodeBinary_ReadsAsPgtypeDoes(t *testing.T) {
	m := pgtype.NewMap()
	encode := func(oid uint32, v any) []byte {
		b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, at := range []time.Time{
		time.Date(2026, 12, 1, 21, 0, 0, 123456000, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC), // before the epoch: negative, with microseconds
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 1000, time.UTC),
	} {
		data := encode(oidTimestamptz, at)
		var got, want time.Time
		if !decodeBinary(oidTimestamptz, data, &got) {
			t.Fatalf("%v: not decoded", at)
		}
		if err := m.Scan(oidTimestamptz, pgtype.BinaryFormatCode, data, &want); err != nil {
			t.Fatal(err)
		}
		if !got.Equal(want) || got.Location() != want.Location() || !got.Equal(at) {
			t.Errorf("%v: decoded %v, pgtype reads %v", at, got, want)
		}
	}

	xid := uint64(1)<<63 + 12_345
	var gotXID uint64
	if !decodeBinary(oidXID8, encode(oidXID8, xid), &gotXID) || gotXID != xid {
		t.Errorf("xid8 %d decoded as %d", xid, gotXID)
	}
	id := outbox.NewID()
	var gotID outbox.ID
	if !decodeBinary(oidUUID, encode(oidUUID, [16]byte(id)), &gotID) || gotID != id {
		t.Errorf("uuid %s decoded as %s", id, gotID)
	}
	var lane string
	if !decodeBinary(oidText, encode(oidText, "bench.2"), &lane) || lane != "bench.2" {
		t.Errorf("text decoded as %q", lane)
	}
	doc := []byte(`{"a": [1, 2]}`)
	data := encode(oidJSONB, doc)
	var payload []byte
	if !decodeBinary(oidJSONB, data, &payload) || !bytes.Equal(payload, doc) {
		t.Errorf("jsonb decoded as %q", payload)
	}
	data[1] = 'X'
	if payload[0] != '{' {
		t.Error("the payload shares the message's bytes")
	}

	// Left to pgtype: another type, another jsonb version, infinity, and a
	// target decodeBinary does not know.
	var s string
	if decodeBinary(1043, []byte("varchar"), &s) {
		t.Error("a varchar was decoded as text")
	}
	if decodeBinary(oidJSONB, []byte{2, '{', '}'}, &payload) {
		t.Error("jsonb of version 2 was decoded")
	}
	inf := make([]byte, 8)
	binary.BigEndian.PutUint64(inf, 1<<63-1)
	var at time.Time
	if decodeBinary(oidTimestamptz, inf, &at) {
		t.Error("infinity was decoded as a time")
	}
	var tc pgtype.Text
	if decodeBinary(oidText, []byte("x"), &tc) {
		t.Error("a pgtype.Text target was decoded")
	}
}
