package bunstore

import (
	"context"

	"github.com/uptrace/bun"

	"github.com/baton-go/baton/backends/internal/pgsql"
	"github.com/baton-go/baton/core/lease"
)

// DefaultLeaseChannel is the NOTIFY channel of releases when
// LeaseStoreOptions.Channel is empty. It is the pgx adapter's default too,
// so bun and pgx nodes hear each other's releases.
const DefaultLeaseChannel = pgsql.DefaultLeaseChannel

// LeaseStoreOptions configure a LeaseStore: Schema (the schema of
// baton_role_leases, "" for the search_path), Channel (the NOTIFY channel of
// releases, default DefaultLeaseChannel) and Logger (nil discards). The zero
// value uses the defaults. The pgx adapter takes the same type.
type LeaseStoreOptions = pgsql.LeaseStoreOptions

// LeaseStore is the lease.Store over baton_role_leases, on any bun.IDB
// (its Heartbeat, Release and Read), a lease.Lister (List, for operators)
// and a lease.ReleaseWatcher through LISTEN/NOTIFY. Create it with
// NewLeaseStore.
//
// Its statements are the pgx adapter's, so bun and pgx nodes can share one
// lease table: every rule is decided inside single statements by the
// database clock, and a heartbeat is one statement whatever the number of
// claims. On a bun.Tx the statements run inside that transaction: a
// heartbeat there is only seen by others once the transaction commits, so
// give a Manager a *bun.DB.
type LeaseStore struct {
	*pgsql.LeaseStore
	db bun.IDB
}

var (
	_ lease.Store          = (*LeaseStore)(nil)
	_ lease.ReleaseWatcher = (*LeaseStore)(nil)
	_ lease.Lister         = (*LeaseStore)(nil)
)

// NewLeaseStore returns a LeaseStore over db, or an error naming the first
// invalid option. db must run on pgx's database/sql driver
// (ErrUnsupportedDriver). It asks the database one thing,
// standard_conforming_strings, and refuses a session without it
// (ErrNonStandardStrings); run Migrate first.
func NewLeaseStore(ctx context.Context, db bun.IDB, opts LeaseStoreOptions) (*LeaseStore, error) {
	h, err := open(db, "NewLeaseStore")
	if err != nil {
		return nil, err
	}
	st, err := pgsql.NewLeaseStore(h, adapter, opts)
	if err != nil {
		return nil, err
	}
	if err := checkSession(ctx, h, "NewLeaseStore"); err != nil {
		return nil, err
	}
	return &LeaseStore{st, db}, nil
}

// WatchReleases implements lease.ReleaseWatcher. It needs the store to be
// over a *bun.DB (ErrListenUnsupported): it takes one connection of its
// pool and LISTENs on pgx's connection under it until ctx ends (it returns
// ctx's error) or the connection fails; the connection is then discarded
// rather than returned to the pool, since it may still be listening.
// Behind PgBouncer in transaction mode it hears nothing: give it a direct
// or session-pooled connection.
func (s *LeaseStore) WatchReleases(ctx context.Context, released func(role string)) error {
	return s.WatchSession(ctx, session(s.db), released)
}
