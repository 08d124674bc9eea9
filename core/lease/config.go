package lease

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/internal/name"
)

// Defaults for Config. They satisfy LeaseDuration − HeldSafetyMargin >
// 2 × RenewInterval: a holder keeps its term through one heartbeat that
// fails or never answers (the next one starts 10 s after the last good one
// and has 3 s to answer), and gives the role up, on its own, 13 s after its
// last good heartbeat started.
const (
	DefaultLeaseDuration    = 15 * time.Second
	DefaultRenewInterval    = 5 * time.Second
	DefaultHeldSafetyMargin = 2 * time.Second
)

// MaxInstanceIDLength bounds Config.InstanceID.
const MaxInstanceIDLength = 200

// ErrInvalidConfig is returned (wrapped, naming the field and the reason)
// by NewManager for a Config it cannot run with.
var ErrInvalidConfig = errors.New("baton/lease: invalid config")

// ErrDuplicateRole is returned by Register and RegisterPartition for a role
// that is already registered with the manager.
var ErrDuplicateRole = errors.New("baton/lease: role already registered")

// Config configures a Manager. Zero durations take the defaults.
type Config struct {
	// Store is the lease table. Required.
	Store Store
	// InstanceID names this process in the lease table. Default:
	// DefaultInstanceID(), the host name plus a random suffix, so two
	// processes on one machine differ.
	InstanceID string
	// Address is advertised to other instances as where this one serves
	// the roles it holds (see holder.InstanceAddress). May be empty.
	Address string
	// LeaseDuration is how long a lease lasts, by the store's clock, after
	// each renewal.
	LeaseDuration time.Duration
	// RenewInterval is the heartbeat period, counted from the start of one
	// heartbeat to the start of the next, and each heartbeat's timeout; one
	// heartbeat covers every role of the manager.
	RenewInterval time.Duration
	// HeldSafetyMargin is how much earlier than the store this instance
	// stops believing it holds a role: IsHeld turns false at
	// start of the last successful renewal + LeaseDuration − HeldSafetyMargin.
	// It absorbs clock-rate drift and the delay between the store's
	// "now()" and the request's start.
	HeldSafetyMargin time.Duration
	// Logger receives heartbeat failures and role changes. nil discards.
	Logger *slog.Logger

	// Hooks observe the heartbeats and the roles' terms; nil observes
	// nothing and costs nothing. otelbaton implements them with
	// OpenTelemetry.
	Hooks Hooks
}

// withDefaults returns a copy of c with its zero fields set to the
// defaults.
func (c Config) withDefaults() Config {
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = DefaultRenewInterval
	}
	if c.HeldSafetyMargin == 0 {
		c.HeldSafetyMargin = DefaultHeldSafetyMargin
	}
	if c.InstanceID == "" {
		c.InstanceID = DefaultInstanceID()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks a Config that has its defaults.
func (c Config) validate() error {
	bad := func(field, format string, args ...any) error {
		return config.Invalid(ErrInvalidConfig, field, format, args...)
	}
	switch {
	case c.Store == nil:
		return bad("Store", "is nil")
	case c.LeaseDuration < 0:
		return bad("LeaseDuration", "is %v; it must be positive", c.LeaseDuration)
	case c.RenewInterval < 0:
		return bad("RenewInterval", "is %v; it must be positive", c.RenewInterval)
	case c.HeldSafetyMargin < 0:
		return bad("HeldSafetyMargin", "is %v; it must not be negative", c.HeldSafetyMargin)
	case c.LeaseDuration-c.HeldSafetyMargin <= 2*c.RenewInterval:
		// The trust window must outlast one failed heartbeat: the next
		// one starts 2 × RenewInterval after the last good one, and must
		// answer before trust ends. This also keeps LeaseDuration above
		// RenewInterval + HeldSafetyMargin, so a holder stops believing it
		// holds before a successor may take over.
		return bad("LeaseDuration", "(%v) − HeldSafetyMargin (%v) must exceed 2 × RenewInterval (%v), "+
			"or one failed heartbeat ends the holder's trust before the next one can renew its term",
			c.LeaseDuration, c.HeldSafetyMargin, c.RenewInterval)
	}
	if p := name.Problem(c.InstanceID, MaxInstanceIDLength); p != "" {
		return config.Wrap(ErrInvalidConfig, "InstanceID", errors.New(p))
	}
	return nil
}

// DefaultInstanceID is the host name and a random suffix.
func DefaultInstanceID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "instance"
	}
	if len(host) > MaxInstanceIDLength-9 {
		host = host[:MaxInstanceIDLength-9]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "-" + hex.EncodeToString(b)
}

// ValidateRole reports whether role can be a lease's role: 1 to
// MaxRoleLength bytes of UTF-8 with no NUL byte.
func ValidateRole(role string) error {
	if p := name.Problem(role, MaxRoleLength); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidRole, p)
	}
	return nil
}
