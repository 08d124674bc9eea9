package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/baton-go/baton/core/config"
)

// ErrInvalidConfig is returned (wrapped, naming the field and the reason)
// by the constructors for a Config they cannot run with.
var ErrInvalidConfig = errors.New("baton/projection: invalid config")

func invalid(field, format string, args ...any) error {
	return config.Invalid(ErrInvalidConfig, field, format, args...)
}

// LocalReader answers permission questions from the store alone: no
// network, no refresh. When the subject has no active generation it
// returns ErrNoProjection, which means "refresh it" and never "no access";
// use Reader to refresh through instead.
type LocalReader struct {
	store Store
}

// NewLocalReader returns a LocalReader over store.
func NewLocalReader(store Store) (*LocalReader, error) {
	if store == nil {
		return nil, invalid("NewLocalReader: store", "is nil")
	}
	return &LocalReader{store: store}, nil
}

// Mask returns the subject's mask on a resource. found is false when the
// subject's projection has no grant for the resource: no access there. An
// absent projection is an error wrapping ErrNoProjection.
func (r *LocalReader) Mask(ctx context.Context, subject Subject, resourceType, resourceID string) (Mask, bool, error) {
	return r.store.Mask(ctx, subject, resourceType, resourceID)
}

// Snapshot returns the subject's whole active generation, or an error
// wrapping ErrNoProjection.
func (r *LocalReader) Snapshot(ctx context.Context, subject Subject) (Snapshot, error) {
	return r.store.Snapshot(ctx, subject)
}

// HasPermission reports whether the subject holds the named permission on
// a resource, the permission's bit taken from bits. The name is resolved
// before the store is asked, so an unknown name is ErrUnknownPermission
// whatever the projection holds. An absent projection is an error wrapping
// ErrNoProjection, not false.
func (r *LocalReader) HasPermission(ctx context.Context, subject Subject, resourceType, resourceID string, bits Bits, permission string) (bool, error) {
	return hasPermission(ctx, r.Mask, subject, resourceType, resourceID, bits, permission)
}

func hasPermission(ctx context.Context, read func(context.Context, Subject, string, string) (Mask, bool, error),
	subject Subject, resourceType, resourceID string, bits Bits, permission string,
) (bool, error) {
	bit, err := bits.Bit(permission)
	if err != nil {
		return false, err
	}
	m, found, err := read(ctx, subject, resourceType, resourceID)
	if err != nil || !found {
		return false, err
	}
	return m.Has(bit), nil
}

// ReaderConfig configures a Reader.
type ReaderConfig struct {
	// Store holds the projections. Required.
	Store Store
	// Source fetches a subject's grants when its projection is absent.
	// Required.
	Source Source
	// Logger receives a Debug record per refresh-through and a Warn record
	// per failed one. nil discards them.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o ReaderConfig) withDefaults() ReaderConfig {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validate checks options that have their defaults.
func (o ReaderConfig) validate() error {
	switch {
	case o.Store == nil:
		return invalid("ReaderConfig.Store", "is nil")
	case o.Source == nil:
		return invalid("ReaderConfig.Source", "is nil")
	}
	return nil
}

// Reader answers from the store like LocalReader, and refreshes through
// from the Source when a subject has no projection: the answer then comes
// from the generation just written. At most one refresh per subject runs
// at a time in a Reader: concurrent callers needing the same subject share
// one Source call and one Replace.
//
// A Reader refreshes only absent projections. Keeping present ones fresh is
// the Refresher's job.
type Reader struct {
	store  Store
	source Source
	logger *slog.Logger

	mu      sync.Mutex
	flights map[Subject]*flight
}

// flight is one refresh of a subject, shared by every caller that asks
// while it runs.
type flight struct {
	done chan struct{} // closed when gen and err are set
	gen  Generation
	err  error
	// abandoned is set when the refresh failed because the context of the
	// caller running it ended: the others have learned nothing and try
	// again under their own contexts.
	abandoned bool
}

// NewReader validates cfg and returns a Reader.
func NewReader(cfg ReaderConfig) (*Reader, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Reader{store: cfg.Store, source: cfg.Source, logger: cfg.Logger, flights: make(map[Subject]*flight)}, nil
}

// Mask returns the subject's mask on a resource, refreshing the subject's
// projection first when it is absent. found is false when the subject has
// no grant for the resource. When the projection is absent and the refresh
// fails, the error wraps both ErrNoProjection and the refresh's error:
// nothing is known, which is not "no access".
func (r *Reader) Mask(ctx context.Context, subject Subject, resourceType, resourceID string) (Mask, bool, error) {
	m, found, err := r.store.Mask(ctx, subject, resourceType, resourceID)
	if !errors.Is(err, ErrNoProjection) {
		return m, found, err
	}
	if err := r.refreshThrough(ctx, subject); err != nil {
		return 0, false, err
	}
	return r.store.Mask(ctx, subject, resourceType, resourceID)
}

// Snapshot returns the subject's whole active generation, refreshing it
// first when it is absent, as Mask does.
func (r *Reader) Snapshot(ctx context.Context, subject Subject) (Snapshot, error) {
	s, err := r.store.Snapshot(ctx, subject)
	if !errors.Is(err, ErrNoProjection) {
		return s, err
	}
	if err := r.refreshThrough(ctx, subject); err != nil {
		return Snapshot{}, err
	}
	return r.store.Snapshot(ctx, subject)
}

// HasPermission is LocalReader.HasPermission with refresh-through.
func (r *Reader) HasPermission(ctx context.Context, subject Subject, resourceType, resourceID string, bits Bits, permission string) (bool, error) {
	return hasPermission(ctx, r.Mask, subject, resourceType, resourceID, bits, permission)
}

func (r *Reader) refreshThrough(ctx context.Context, subject Subject) error {
	_, err := r.Refresh(ctx, subject)
	if errors.Is(err, ErrStale) {
		// A fresher refresh flipped while this one fetched: read that.
		r.logger.DebugContext(ctx, "baton: projection refresh-through overtaken by a fresher one", "subject", subject.String())
		return nil
	}
	if err != nil {
		r.logger.WarnContext(ctx, "baton: projection refresh-through failed", "subject", subject.String(), "err", err)
		return fmt.Errorf("%w (and the refresh-through failed): %w", ErrNoProjection, err)
	}
	r.logger.DebugContext(ctx, "baton: projection refreshed through", "subject", subject.String())
	return nil
}

// Refresh reserves a generation, fetches the subject's grants from the
// Source and replaces its projection with them, returning the new
// generation. An error wrapping ErrStale means a refresh that reserved
// later (another node's, say) flipped first: the projection is at least as
// fresh as this one would have made it, and nothing needs redoing. When a
// refresh of the subject is already running in this Reader, Refresh waits
// for it and returns its result instead of starting another. A caller whose context
// ends stops waiting without disturbing the others; when the context of
// the caller running the refresh ends, the waiting callers start a new one.
func (r *Reader) Refresh(ctx context.Context, subject Subject) (Generation, error) {
	if err := subject.Validate(); err != nil {
		return 0, err
	}
	for {
		r.mu.Lock()
		f, running := r.flights[subject]
		if !running {
			f = &flight{done: make(chan struct{})}
			r.flights[subject] = f
		}
		r.mu.Unlock()
		if !running {
			r.fly(ctx, subject, f)
			return f.gen, f.err
		}
		select {
		case <-f.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		if f.abandoned && ctx.Err() == nil {
			continue
		}
		return f.gen, f.err
	}
}

// fly runs the refresh on the calling goroutine and lands the flight, also
// when the Source or the store panics: the waiting callers get an error,
// and the panic goes on up the calling goroutine.
func (r *Reader) fly(ctx context.Context, subject Subject, f *flight) {
	landed := false
	defer func() {
		if !landed {
			f.err = fmt.Errorf("baton/projection: refresh %s: the Source or the Store panicked", subject)
		}
		r.mu.Lock()
		delete(r.flights, subject)
		r.mu.Unlock()
		close(f.done)
	}()
	f.gen, f.err = refresh(ctx, r.store, r.source, subject)
	f.abandoned = f.err != nil && ctx.Err() != nil
	landed = true
}
