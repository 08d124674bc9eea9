package console

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/health"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/outbox"
)

// Defaults and bounds of Options.
const (
	// DefaultTokenTTL is how long a confirmation page's form stays valid.
	DefaultTokenTTL = 30 * time.Minute
	// MaxTokenTTL bounds TokenTTL: a token is a standing permission to
	// change things for as long as it lives.
	MaxTokenTTL = 24 * time.Hour
	// DefaultPageSize is how many dead letters one page lists.
	DefaultPageSize = 50
	// MinCSRFKeyLength is the shortest CSRFKey, in bytes: the size of the
	// HMAC-SHA256 key that leaves nothing to guess but the key.
	MinCSRFKeyLength = 32
)

// ErrInvalidOptions is returned (wrapped, naming the field) by NewHandler.
var ErrInvalidOptions = errors.New("baton/console: invalid options")

// Options configure a Handler. Zero values take the defaults.
type Options struct {
	// Outbox is the outbox's store. Required.
	Outbox outbox.Store
	// Leases, when set, shows the role leases and partitions. It must
	// implement lease.Lister (every store of this module does).
	Leases lease.Store
	// Driver, when set, is this instance's outbox driver (any
	// health.Reporter): the page shows whether it leads or stands by.
	Driver health.Reporter
	// CSRFKey signs the confirmation forms' tokens. Required: at least
	// MinCSRFKeyLength random bytes, kept secret, and the same on every
	// instance behind one address, since a form one instance served may be
	// posted to another. Changing it invalidates the forms open.
	CSRFKey []byte
	// TokenTTL is how long a confirmation page's form stays valid; up to
	// MaxTokenTTL, default DefaultTokenTTL.
	TokenTTL time.Duration
	// Prefix is the path the handler is mounted at, such as "/ops": every
	// link and form starts with it, and requests must too (mount it with
	// mux.Handle(Prefix+"/", h)). "" mounts it at the root.
	Prefix string
	// PageSize is how many dead letters one page lists, up to
	// outbox.MaxListLimit; default DefaultPageSize.
	PageSize int
	// Logger receives the requeues and the store's errors; nil discards.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.TokenTTL == 0 {
		o.TokenTTL = DefaultTokenTTL
	}
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

func (o Options) validate() error {
	bad := func(field, format string, args ...any) error {
		return config.Invalid(ErrInvalidOptions, "console.Options."+field, format, args...)
	}
	switch {
	case o.Outbox == nil:
		return bad("Outbox", "is nil; the console shows an outbox")
	case len(o.CSRFKey) == 0:
		return bad("CSRFKey", "is empty; the confirmation forms need a secret key to sign their tokens")
	case len(o.CSRFKey) < MinCSRFKeyLength:
		return bad("CSRFKey", "is %d bytes; it must be at least %d random bytes", len(o.CSRFKey), MinCSRFKeyLength)
	case o.TokenTTL < 0 || o.TokenTTL > MaxTokenTTL:
		return bad("TokenTTL", "is %v; it must be positive and at most %v", o.TokenTTL, MaxTokenTTL)
	case o.PageSize < 1 || o.PageSize > outbox.MaxListLimit:
		return bad("PageSize", "is %d; it must be from 1 to %d", o.PageSize, outbox.MaxListLimit)
	case o.Prefix != "" && (!strings.HasPrefix(o.Prefix, "/") || strings.HasSuffix(o.Prefix, "/")):
		return bad("Prefix", "is %q; it must start with / and not end with one, like /ops (or be empty)", o.Prefix)
	case strings.ContainsAny(o.Prefix, "?#%\"'<> \t\r\n\\"):
		return bad("Prefix", "is %q; it must be a plain path, without query, fragment, escapes, quotes or spaces", o.Prefix)
	}
	if o.Leases != nil {
		if _, ok := o.Leases.(lease.Lister); !ok {
			return config.Wrap(ErrInvalidOptions, "console.Options.Leases", lease.ErrNotListable)
		}
	}
	return nil
}
