// Package uuid holds the one implementation of the UUIDs core uses as
// ids (outbox entry ids, work-row lock ids): version 7 generation, the
// canonical text form, and parsing it.
package uuid

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"time"
)

// ErrSyntax is returned by Parse for text that is not a UUID.
var ErrSyntax = errors.New("not a UUID")

// NewV7 returns a version 7 UUID: 48 bits of Unix milliseconds, then random
// bits, with the RFC 9562 version and variant, so ids made later sort
// later (bytewise, as PostgreSQL's uuid type compares). It panics only if
// the system's random source fails.
func NewV7() [16]byte {
	var id [16]byte
	if _, err := rand.Read(id[6:]); err != nil {
		panic("baton: crypto/rand failed: " + err.Error())
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(time.Now().UnixMilli()))
	copy(id[:6], ms[2:])
	id[6] = id[6]&0x0f | 0x70 // version 7
	id[8] = id[8]&0x3f | 0x80 // RFC 9562 variant
	return id
}

// Format writes id in the canonical lower-case form with hyphens.
func Format(id [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:], id[10:])
	return string(b[:])
}

// Parse reads the canonical form; the hyphens may be left out.
func Parse(s string) ([16]byte, error) {
	var id [16]byte
	h := s
	if len(s) == 36 {
		if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return id, ErrSyntax
		}
		h = strings.ReplaceAll(s, "-", "")
	}
	if len(h) != 32 {
		return id, ErrSyntax
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return [16]byte{}, ErrSyntax
	}
	return id, nil
}
