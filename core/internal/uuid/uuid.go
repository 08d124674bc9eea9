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
	"sync"
	"time"
)

// ErrSyntax is returned by Parse for text that is not a UUID.
var ErrSyntax = errors.New("not a UUID")

// v7 state: the last timestamp and counter handed out, so that ids made by
// one process strictly increase even within one millisecond.
var (
	v7mu      sync.Mutex
	v7ms      uint64
	v7counter uint16 // 12 bits
)

// NewV7 returns a version 7 UUID (RFC 9562): 48 bits of Unix milliseconds,
// a 12-bit counter, then 62 random bits, with the version and variant set.
// Ids made by one process strictly increase (bytewise, as PostgreSQL's uuid
// type compares): within one millisecond the counter increments, and when
// it runs out, or the clock steps back, the timestamp moves forward by one.
// It panics only if the system's random source fails.
func NewV7() [16]byte {
	var id [16]byte
	if _, err := rand.Read(id[8:]); err != nil {
		panic("baton: crypto/rand failed: " + err.Error())
	}
	now := uint64(time.Now().UnixMilli())
	v7mu.Lock()
	switch {
	case now > v7ms:
		// A new millisecond: start the counter at a random point in its
		// lower half, leaving room to count up.
		v7ms, v7counter = now, uint16(id[8])<<3&0x7ff
	case v7counter < 0xfff:
		v7counter++
	default:
		v7ms, v7counter = v7ms+1, 0
	}
	ms, counter := v7ms, v7counter
	v7mu.Unlock()

	var b [8]byte
	binary.BigEndian.PutUint64(b[:], ms)
	copy(id[:6], b[2:])
	id[6] = 0x70 | byte(counter>>8) // version 7, counter high bits
	id[7] = byte(counter)
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
