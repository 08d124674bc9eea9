package outbox

import (
	"context"
	"errors"
)

// ErrFenced is what a Processor returns, wrapped, when the destination
// refused the leader's fencing token because it has seen a newer one: a
// successor holds the leader lock, and this leader only believes it still
// does (a pause, a partition). The driver then stops the pass at once,
// settles nothing (no failure is recorded, nothing is parked) and gives
// up leadership.
var ErrFenced = errors.New("baton/outbox: the destination refused this leader's fencing token; a newer leader exists")

type fencingTokenKey struct{}

// FencingToken returns the fencing token of the leader lock under which
// the driver called Processor.Deliver with ctx. Send it to the destination
// with every delivery, so that it can refuse a leader whose token is lower
// than one it has already seen (graph's processors send it as
// graph.FencingTokenHeader). ok is false on a context the driver did not
// make, and when the lock provider cannot fence (lock.Lock.Token is 0).
func FencingToken(ctx context.Context) (token uint64, ok bool) {
	token, ok = ctx.Value(fencingTokenKey{}).(uint64)
	return token, ok && token != 0
}

// WithFencingToken returns ctx carrying token, as the driver gives it to
// processors; tests of a processor use it to play a leader. A zero token
// (a lock that cannot fence) leaves ctx as it is.
func WithFencingToken(ctx context.Context, token uint64) context.Context {
	if token == 0 {
		return ctx
	}
	return context.WithValue(ctx, fencingTokenKey{}, token)
}
