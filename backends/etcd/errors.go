package etcd

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
)

// ErrClosed is returned by a store or provider used after its Close.
var ErrClosed = errors.New("baton/etcd: closed")

// errLeaseGone marks an etcd lease that no longer exists: it expired or
// was revoked, and every key attached to it is gone with it. It always
// comes wrapped together with lock.ErrNotHeld.
var errLeaseGone = errors.New("the etcd lease is gone")

// mapErr translates what the etcd client returns into core's sentinels,
// with the operation named; it is the only place this package does so.
func mapErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("baton/etcd: %s: %w", op, err)
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return fmt.Errorf("baton/etcd: %s: %w: %w", op, lock.ErrNotHeld, errLeaseGone)
	case errors.Is(err, rpctypes.ErrTooManyOps):
		return fmt.Errorf("baton/etcd: %s: %w: the cluster allows fewer operations per transaction than LeaseStoreOptions.MaxTxnOps; set it to the cluster's --max-txn-ops", op, lease.ErrInvalidConfig)
	}
	// Errors the server sent as a gRPC status that the client did not turn
	// into one of its own: a deadline or cancellation on the server side is
	// still the caller's context error.
	switch status.Code(err) {
	case codes.DeadlineExceeded:
		return fmt.Errorf("baton/etcd: %s: %w (%v)", op, context.DeadlineExceeded, err)
	case codes.Canceled:
		return fmt.Errorf("baton/etcd: %s: %w (%v)", op, context.Canceled, err)
	}
	return fmt.Errorf("baton/etcd: %s: %w", op, err)
}
