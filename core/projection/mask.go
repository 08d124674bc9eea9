package projection

import (
	"errors"
	"fmt"
	"math/bits"
)

// MaxBit is the highest bit a Mask has. Permission bits run from 0 to MaxBit.
const MaxBit = 63

var (
	// ErrUnknownPermission is returned (wrapped, with the name) when a
	// permission name is not in the Bits it is looked up in. It says
	// nothing about access: the caller's Bits do not match the engine's
	// definitions.
	ErrUnknownPermission = errors.New("baton/projection: unknown permission")

	// ErrInvalidBit is returned (wrapped, with the name and the bit) for a
	// permission whose bit is beyond MaxBit.
	ErrInvalidBit = errors.New("baton/projection: permission bit out of range")
)

// Mask is the set of permission bits a subject holds on one resource, as the
// engine computed it. Bit n is set when the subject holds the permission
// whose bit is n. All 64 bits are usable, bit 63 included.
type Mask uint64

// Has reports whether bit is set. A bit beyond MaxBit is never set.
func (m Mask) Has(bit uint) bool {
	return bit <= MaxBit && m&(1<<bit) != 0
}

// HasPermission reports whether the permission called name is set, its bit
// taken from bits. A name missing from bits is ErrUnknownPermission, and a
// bit beyond MaxBit is ErrInvalidBit: neither is reported as "not held",
// since both mean the caller's definitions do not match the engine's.
func (m Mask) HasPermission(bits Bits, name string) (bool, error) {
	bit, err := bits.Bit(name)
	if err != nil {
		return false, err
	}
	return m.Has(bit), nil
}

// Count is the number of bits set.
func (m Mask) Count() int { return bits.OnesCount64(uint64(m)) }

// String prints the mask as 16 hexadecimal digits, e.g. 0x8000000000000001.
func (m Mask) String() string { return fmt.Sprintf("%#016x", uint64(m)) }

// Bits maps permission names to their bit in a Mask. The engine defines
// them (a definitions client supplies the map); baton only looks names up.
type Bits map[string]uint

// Bit returns the bit of the permission called name.
func (b Bits) Bit(name string) (uint, error) {
	bit, ok := b[name]
	if !ok {
		return 0, fmt.Errorf("%w %q: it is not among the %d known permission names", ErrUnknownPermission, name, len(b))
	}
	if bit > MaxBit {
		return 0, fmt.Errorf("%w: permission %q has bit %d; bits run from 0 to %d", ErrInvalidBit, name, bit, MaxBit)
	}
	return bit, nil
}

// Mask returns the mask with the bits of the named permissions set.
func (b Bits) Mask(names ...string) (Mask, error) {
	var m Mask
	for _, n := range names {
		bit, err := b.Bit(n)
		if err != nil {
			return 0, err
		}
		m |= 1 << bit
	}
	return m, nil
}

// Validate reports a permission whose bit is beyond MaxBit, if there is
// one. Check a definitions map once when it arrives; Bit checks each
// look-up anyway.
func (b Bits) Validate() error {
	for name, bit := range b {
		if bit > MaxBit {
			return fmt.Errorf("%w: permission %q has bit %d; bits run from 0 to %d", ErrInvalidBit, name, bit, MaxBit)
		}
	}
	return nil
}
