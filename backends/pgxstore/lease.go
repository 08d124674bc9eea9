package pgxstore

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/lease"
)

// LeaseTable is the table holding one row per role lease, created by the
// 0002_role_leases migration.
const LeaseTable = pgsql.LeaseTable

// DefaultLeaseChannel is the NOTIFY channel of releases when
// LeaseStoreOptions.Channel is empty; the bun adapter's default too.
const DefaultLeaseChannel = pgsql.DefaultLeaseChannel

// LeaseStoreOptions configure a LeaseStore: Schema (the schema of
// baton_role_leases, "" for the search_path), Channel (the NOTIFY channel of
// releases, default DefaultLeaseChannel) and Logger (nil discards). The zero
// value uses the defaults. The bun adapter takes the same type.
type LeaseStoreOptions = pgsql.LeaseStoreOptions

// LeaseStore is the lease.Store over the baton_role_leases table (its
// Heartbeat, Release and Read), a lease.Lister (List, for operators) and a
// lease.ReleaseWatcher through LISTEN/NOTIFY. Create it with NewLeaseStore.
//
// Every rule is decided inside single SQL statements, by the database
// clock (now(), the statement's transaction start): the clocks of the
// competing instances never need to agree, and concurrent heartbeats of
// several instances serialize on the role's row. A heartbeat is one
// statement whatever the number of claims; a LeaseDuration that is not a
// whole number of microseconds is rounded up to the next one.
//
// Heartbeat, Release, Read and List work through any pooler; WatchReleases needs
// a session of its own for LISTEN, so behind PgBouncer in transaction mode
// it hears nothing: give it a direct or session-pooled pool.
type LeaseStore struct {
	*pgsql.LeaseStore
	pool *pgxpool.Pool
}

var (
	_ lease.Store          = (*LeaseStore)(nil)
	_ lease.ReleaseWatcher = (*LeaseStore)(nil)
	_ lease.Lister         = (*LeaseStore)(nil)
)

// NewLeaseStore returns a LeaseStore over pool, or an error naming the first
// invalid option. It sends nothing to the database; run Migrate (or the
// migrations) first.
func NewLeaseStore(pool *pgxpool.Pool, opts LeaseStoreOptions) (*LeaseStore, error) {
	if pool == nil {
		return nil, errors.New("baton/pgxstore: NewLeaseStore: the pool is nil")
	}
	st, err := pgsql.NewLeaseStore(newPoolDB(pool), adapter, opts)
	if err != nil {
		return nil, err
	}
	return &LeaseStore{st, pool}, nil
}

// WatchReleases implements lease.ReleaseWatcher. It holds one connection of
// the pool, listening on the channel, until ctx ends or the connection
// fails; the connection is then closed rather than returned to the pool,
// since it may still be listening or be cut off mid-read. It returns ctx's
// error when ctx ends, any other error as it happened.
func (s *LeaseStore) WatchReleases(ctx context.Context, released func(role string)) error {
	return s.WatchSession(ctx, session(s.pool), released)
}
