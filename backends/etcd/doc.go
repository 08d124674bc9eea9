// Package etcd puts baton's role leases and locks on an etcd cluster (v3
// API, through go.etcd.io/etcd/client/v3): a lease.Store, with a
// lease.ReleaseWatcher, and a lock.Provider. It is a module of its own, so
// that etcd's dependencies stay out of the main module.
//
// Wire it where the PostgreSQL store or the Redis locks were:
//
//	cli, err := etcd.NewClient(etcd.ClientOptions{Endpoints: []string{"etcd-0:2379", "etcd-1:2379", "etcd-2:2379"}})
//	store, err := etcd.NewLeaseStore(cli, etcd.LeaseStoreOptions{})
//	mgr, err := lease.NewManager(lease.Config{Store: store})
//	locks, err := etcd.NewLockProvider(cli, etcd.LockProviderOptions{})
//
// See LeaseStore and LockProvider for the key layout, the fencing tokens
// and how expiry works, and docs/etcd.md for the figures and when to move.
package etcd
