package config_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/baton-go/baton/core/config"
)

var errBad = errors.New("baton/thing: invalid config")

func TestInvalid_NamesTheFieldAndTheReasonAndWrapsTheKind(t *testing.T) {
	err := fmt.Errorf("NewThing: %w", config.Invalid(errBad, "Interval", "is %v; it must be positive", -1))
	if !errors.Is(err, errBad) {
		t.Errorf("errors.Is(%v, kind) = false", err)
	}
	var fe *config.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("errors.As(%v, *FieldError) = false", err)
	}
	if fe.Field != "Interval" || fe.Reason != "is -1; it must be positive" {
		t.Errorf("field %q, reason %q", fe.Field, fe.Reason)
	}
	if got, want := err.Error(), "NewThing: baton/thing: invalid config: Interval is -1; it must be positive"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestFieldError_WithoutAKindStillReads(t *testing.T) {
	if got := (&config.FieldError{Field: "Store", Reason: "is nil"}).Error(); got != "Store is nil" {
		t.Errorf("Error() = %q", got)
	}
}

func TestWrap_KeepsTheInnerErrorFindable(t *testing.T) {
	inner := errors.New("baton/lock: invalid lock name")
	err := config.Wrap(errBad, "LeaderLockName", fmt.Errorf("%w: the name is empty", inner))
	if !errors.Is(err, errBad) || !errors.Is(err, inner) {
		t.Errorf("errors.Is misses the kind or the inner error: %v", err)
	}
	if got, want := err.Error(), "baton/thing: invalid config: LeaderLockName: baton/lock: invalid lock name: the name is empty"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
