// Package lock defines baton's distributed lock: the Provider interface that
// lock adapters implement, the Lock a caller holds, the sentinel errors, and
// the keepalive loop shared by every TTL-based provider.
//
// # Contract
//
// The rules every provider keeps are numbered (K1, K2, ...) on the methods
// of Provider and Lock. In short: Provider.Acquire blocks until the lock is held, until AcquireOptions.Wait
// elapses (ErrNotAcquired), or until ctx ends (an error wrapping ctx.Err()).
// A held Lock reports:
//
//   - Name: the name it was acquired under.
//   - Token: a fencing token, strictly increasing per name across
//     acquisitions and issued only while the lock is held. Pass it to the
//     resource the lock protects so that resource can refuse writes from a
//     holder that has since been replaced. A provider that cannot fence
//     returns 0.
//   - Lost: a channel closed as soon as the lock can no longer be trusted:
//     the hold was taken away, its connection died, its TTL could not be
//     refreshed in time, or it was released. Work done under the lock must
//     stop when it closes.
//   - Trusted: the same fact as Lost, asked synchronously: false once the
//     lock can no longer be trusted, even before Lost has been closed.
//   - Release: gives the lock up. It returns ErrNotHeld when the lock had
//     already been lost or released, and never disturbs a newer holder.
//
// # State model
//
//	waiting ──acquired──▶ held ──Release──▶ released   (Lost closed)
//	                        │
//	                        └──taken away / refresh failed / conn died──▶ lost (Lost closed)
//
// A lock never goes back from released or lost to held; acquire again.
//
// # Failure semantics
//
// Locks fail closed. A TTL lock (see Keepalive) trusts itself only until the
// start of its last successful refresh plus the TTL minus a safety margin,
// measured on the monotonic clock, so a stalled refresh, an unreachable
// server or a paused process all end in Lost closing, never in two holders
// that both believe they hold. A paused process can still act between the
// moment its trust ends and the moment it notices; fencing tokens close that
// gap at the resource.
package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/internal/name"
)

// MaxNameLength is the longest lock name, in bytes, that every provider
// accepts. It matches the role-name limit of role leases so a role name can
// always double as a lock name.
const MaxNameLength = 128

// WaitForever makes Acquire wait until the lock is held or ctx ends.
const WaitForever time.Duration = 1<<63 - 1

var (
	// ErrNotAcquired is returned by Acquire when the lock was not free within
	// AcquireOptions.Wait.
	ErrNotAcquired = errors.New("baton/lock: not acquired")

	// ErrNotHeld is returned by Release when the lock was no longer held: it
	// was lost (taken away, expired, connection gone) or already released.
	ErrNotHeld = errors.New("baton/lock: not held")

	// ErrInvalidName is returned (wrapped, with the reason) for a lock name
	// that no provider may accept.
	ErrInvalidName = errors.New("baton/lock: invalid lock name")

	// ErrInvalidOptions is returned (wrapped, naming the field) for
	// AcquireOptions or provider options that cannot be honoured.
	ErrInvalidOptions = errors.New("baton/lock: invalid options")
)

// Provider hands out named, mutually exclusive locks.
//
// Implementations must be safe for concurrent use. The rules a provider
// keeps are numbered K1 to K13 on the methods below;
// conformance.RunLockProvider checks each one with a subtest of its own
// (docs/adapters.md lists which).
type Provider interface {
	// Acquire blocks until the named lock is held, opts.Wait elapses
	// (ErrNotAcquired) or ctx ends (an error wrapping ctx.Err()).
	//
	//   - K1 acquire: a free lock is held at once; the Lock has the name
	//     it was acquired under, Lost open and Trusted true.
	//   - K2 exclusion: at most one Lock of a name is held at any moment,
	//     across every provider over the same store.
	//   - K4 wait: while another holds the lock, Acquire returns
	//     ErrNotAcquired once opts.Wait has elapsed, and not before.
	//   - K5 try once: with opts.Wait 0 it tries once and returns at once.
	//   - K6 context: when ctx ends while it waits, it returns at once an
	//     error wrapping ctx.Err(), and leaves nothing behind that would
	//     delay the next Acquire.
	//   - K7 names: a name that fails ValidateName yields an error wrapping
	//     ErrInvalidName and touches nothing.
	//   - K8 options: options that fail AcquireOptions.Validate yield an
	//     error wrapping ErrInvalidOptions.
	Acquire(ctx context.Context, name string, opts AcquireOptions) (Lock, error)
}

// Lock is one acquisition of a named lock.
type Lock interface {
	// Name is the name the lock was acquired under (K1).
	Name() string
	// Token is the fencing token of this acquisition.
	//
	//   - K3 tokens: strictly greater than every token issued before for
	//     the same name, by any provider over the same store; or always 0
	//     from a provider that cannot fence.
	Token() uint64
	// Lost is closed as soon as the lock can no longer be trusted,
	// including after Release.
	//
	//   - K11 loss: once the hold is taken away behind the holder's back
	//     (the key deleted, the session's backend terminated), Lost closes
	//     within the provider's loss-detection bound.
	Lost() <-chan struct{}
	// Trusted reports, without blocking and on the monotonic clock, whether
	// the lock may be relied on at this moment. It is already false in the
	// moment between a lock's trust running out and Lost closing: a process
	// resumed after a pause longer than its TTL sees false at once, before
	// any timer or goroutine of the lock has run (Keepalive gives a TTL
	// provider that; core/lock's own tests prove it). Check it right before
	// each step done under the lock; the channel alone can be late.
	//
	//   - K13 trust: Trusted is false once Lost is closed, and after
	//     Release, and stays false.
	Trusted() bool
	// Release gives the lock up.
	//
	//   - K9 handoff: after Release, a waiting Acquire gets the lock within
	//     the provider's handoff bound.
	//   - K10 released: Release closes Lost, and a second Release returns
	//     ErrNotHeld.
	//   - K12 stale release: Release of a lock that was lost returns
	//     ErrNotHeld and never disturbs a newer holder: its hold and its
	//     Lost stay as they are.
	Release(ctx context.Context) error
}

// AcquireOptions tune one Acquire call. The zero value tries exactly once.
type AcquireOptions struct {
	// Wait bounds how long Acquire waits for a held lock to become free.
	// 0 tries once; WaitForever waits until ctx ends. Negative is invalid.
	Wait time.Duration
}

// Validate reports whether the options can be honoured.
func (o AcquireOptions) Validate() error {
	if o.Wait < 0 {
		return config.Invalid(ErrInvalidOptions, "Wait", "is %v; use 0 to try once or WaitForever to block", o.Wait)
	}
	return nil
}

// ValidateName reports whether name may be used as a lock name: 1 to
// MaxNameLength bytes of valid UTF-8 with no NUL byte (PostgreSQL text cannot
// hold one). Every provider calls it before touching its store.
func ValidateName(s string) error {
	if p := name.Problem(s, MaxNameLength); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, p)
	}
	return nil
}

// CheckAcquire validates a name and options together; providers call it
// first thing in Acquire.
func CheckAcquire(name string, opts AcquireOptions) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	return opts.Validate()
}
