package projection_test

import (
	"errors"
	"math"
	"testing"

	"github.com/baton-go/baton/core/projection"
)

func TestMask_HasEveryBitIncludingTheTopOne(t *testing.T) {
	for bit := uint(0); bit <= projection.MaxBit; bit++ {
		m := projection.Mask(1) << bit
		if !m.Has(bit) {
			t.Errorf("Mask(1<<%d).Has(%d) = false", bit, bit)
		}
		if bit > 0 && m.Has(bit-1) {
			t.Errorf("Mask(1<<%d).Has(%d) = true", bit, bit-1)
		}
	}
	all := projection.Mask(math.MaxUint64)
	if !all.Has(63) || !all.Has(0) || all.Count() != 64 {
		t.Errorf("all bits: Has(63)=%v Has(0)=%v Count=%d", all.Has(63), all.Has(0), all.Count())
	}
	for _, beyond := range []uint{64, 65, 1 << 20} {
		if all.Has(beyond) {
			t.Errorf("Has(%d) = true; bits beyond 63 are never set", beyond)
		}
	}
	if got := projection.Mask(1 << 63).String(); got != "0x8000000000000000" {
		t.Errorf("String() = %q", got)
	}
	if got := projection.Mask(5).String(); got != "0x0000000000000005" {
		t.Errorf("String() = %q", got)
	}
}

func TestMask_HasPermissionLooksTheNameUp(t *testing.T) {
	bits := projection.Bits{"read": 0, "write": 1, "admin": 63}
	m := projection.Mask(1<<63 | 1)
	for name, want := range map[string]bool{"read": true, "write": false, "admin": true} {
		got, err := m.HasPermission(bits, name)
		if err != nil || got != want {
			t.Errorf("HasPermission(%q) = %v, %v; want %v", name, got, err, want)
		}
	}
}

func TestMask_HasPermissionOfAnUnknownNameIsAnErrorNotFalse(t *testing.T) {
	bits := projection.Bits{"read": 0}
	held, err := projection.Mask(math.MaxUint64).HasPermission(bits, "delete")
	if !errors.Is(err, projection.ErrUnknownPermission) || held {
		t.Errorf("HasPermission(unknown) = %v, %v; want ErrUnknownPermission", held, err)
	}
	held, err = projection.Mask(math.MaxUint64).HasPermission(projection.Bits{"huge": 64}, "huge")
	if !errors.Is(err, projection.ErrInvalidBit) || held {
		t.Errorf("HasPermission(bit 64) = %v, %v; want ErrInvalidBit", held, err)
	}
}

func TestBits_MaskSetsTheNamedBitsAndValidateFindsBitsOutOfRange(t *testing.T) {
	bits := projection.Bits{"read": 0, "write": 5, "admin": 63}
	m, err := bits.Mask("read", "admin")
	if err != nil || m != 1<<63|1 {
		t.Errorf("Mask(read, admin) = %v, %v", m, err)
	}
	if _, err := bits.Mask("read", "nope"); !errors.Is(err, projection.ErrUnknownPermission) {
		t.Errorf("Mask(nope) err = %v", err)
	}
	if err := bits.Validate(); err != nil {
		t.Errorf("Validate = %v", err)
	}
	bits["broken"] = 64
	if err := bits.Validate(); !errors.Is(err, projection.ErrInvalidBit) {
		t.Errorf("Validate with bit 64 = %v, want ErrInvalidBit", err)
	}
}
