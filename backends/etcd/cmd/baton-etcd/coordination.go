package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/backends/etcd"
	"github.com/baton-go/baton/backends/etcd/internal/member"
	"github.com/baton-go/baton/internal/cli"
	"github.com/baton-go/baton/internal/demo"
)

// throwawayTiming is the raft timing of the throwaway cluster: etcd's
// defaults, whose shortest lease is 2 s, the demo's lease.
var throwawayTiming = member.Timing{TickMs: 100, ElectionMs: 1000}

// expiryCheck is how often etcd's leader looks for expired leases; a lease
// may outlive its TTL by that much, and the revoke's consensus round.
const expiryCheck = 500 * time.Millisecond

// closeTimeout bounds revoking an instance's sessions as it stops.
const closeTimeout = 10 * time.Second

// coordination is the demo's role leases, partitions and locks on etcd.
type coordination struct {
	opts   etcd.ClientOptions
	where  string // which cluster, for the header
	prefix string // every key of this run
	minTTL time.Duration
	admin  *clientv3.Client // the cluster's minimum lease, the teardown
}

var _ demo.Coordination = (*coordination)(nil)

// startThrowaway starts a three-member cluster of child processes and
// connects the demo to it.
func startThrowaway(ctx context.Context) (demo.Coordination, func(), error) {
	cluster, err := member.Start(ctx, 3, throwawayTiming)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, cli.ErrInterrupted
		}
		return nil, nil, fmt.Errorf("start a throwaway etcd cluster: %w", err)
	}
	eps := cluster.Endpoints()
	where := "a throwaway three-member cluster (child processes)\n            at " + strings.Join(eps, ", ")
	c, stop, err := newCoordination(ctx, etcd.ClientOptions{Endpoints: eps}, where)
	if err != nil {
		_ = cluster.Close()
		return nil, nil, err
	}
	return c, func() {
		stop()
		_ = cluster.Close()
	}, nil
}

// connect connects the demo to a cluster of the caller's.
func connect(ctx context.Context, endpoints []string, username, password string) (demo.Coordination, func(), error) {
	opts := etcd.ClientOptions{Endpoints: endpoints, Username: username, Password: password}
	c, stop, err := newCoordination(ctx, opts, "the cluster at "+strings.Join(endpoints, ", "))
	if errors.Is(err, etcd.ErrInvalidClientOptions) {
		return nil, nil, cli.Usagef("--etcd-endpoints: %v", err)
	}
	return c, stop, err
}

// newCoordination connects to the cluster and asks it for its shortest
// lease: a grant of one second comes back raised to it.
func newCoordination(ctx context.Context, opts etcd.ClientOptions, where string) (*coordination, func(), error) {
	admin, err := etcd.NewClient(opts)
	if err != nil {
		return nil, nil, err
	}
	gctx, cancel := context.WithTimeout(ctx, cli.ConnectTimeout)
	defer cancel()
	resp, err := admin.Grant(gctx, 1)
	if err != nil {
		admin.Close()
		if ctx.Err() != nil {
			return nil, nil, cli.ErrInterrupted
		}
		return nil, nil, fmt.Errorf("cannot reach etcd at %s: %w", strings.Join(opts.Endpoints, ", "), err)
	}
	_, _ = admin.Revoke(gctx, resp.ID)
	c := &coordination{
		opts:   opts,
		where:  where,
		prefix: "baton-demo-" + randomHex(4) + "/",
		minTTL: time.Duration(resp.TTL) * time.Second,
		admin:  admin,
	}
	return c, func() { admin.Close() }, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *coordination) Name() string { return "etcd" }

func (c *coordination) Describe() string {
	return fmt.Sprintf("etcd (backends/etcd): %s,\n            keys under %s, no lease shorter than %s", c.where, c.prefix, c.minTTL)
}

// grant is what the cluster makes of a lease of d: whole seconds, rounded
// up, no fewer than its minimum.
func (c *coordination) grant(d time.Duration) time.Duration {
	return max((d+time.Second-1)/time.Second*time.Second, c.minTTL)
}

// Timings sets the lease and the lock TTL to what etcd grants for them, so
// that the managers, the lock keepalives and the failover bounds count
// with the leases etcd really runs.
func (c *coordination) Timings(t demo.Timings) demo.Timings {
	t.LeaseDuration = c.grant(t.LeaseDuration)
	t.LockTTL = c.grant(t.LockTTL)
	return t
}

func (c *coordination) LockTiming(t demo.Timings) (string, string) {
	return "etcd lock TTL " + t.LockTTL.String(), etcd.DefaultLockTTL.String()
}

func (c *coordination) KillStory() string {
	return "its etcd client is closed with nothing revoked: etcd expires its sessions after their TTL and deletes its role keys and its lock key with them"
}

func (c *coordination) RoleFailover(t demo.Timings) (time.Duration, string) {
	// The survivors are woken by their watch on the role keys.
	return t.LeaseDuration + expiryCheck, "etcd lease " + t.LeaseDuration.String() + " + expiry check " + expiryCheck.String()
}

func (c *coordination) LockFailover(t demo.Timings) (time.Duration, string) {
	return t.LockTTL + expiryCheck + t.LockBackoff.Max, "etcd lock TTL " + t.LockTTL.String() +
		" + expiry check " + expiryCheck.String() + " + retry " + t.LockBackoff.Max.String()
}

// Instance gives the instance an etcd client of its own, with a lease
// store and a lock provider over it.
func (c *coordination) Instance(_ context.Context, name string, t demo.Timings) (*demo.CoordinatedInstance, error) {
	client, err := etcd.NewClient(c.opts)
	if err != nil {
		return nil, err
	}
	leases, err := etcd.NewLeaseStore(client, etcd.LeaseStoreOptions{Prefix: c.prefix})
	if err != nil {
		client.Close()
		return nil, err
	}
	locks, err := etcd.NewLockProvider(client, etcd.LockProviderOptions{
		Prefix: c.prefix, TTL: t.LockTTL, SafetyMargin: t.LockSafetyMargin, Backoff: t.LockBackoff,
	})
	if err != nil {
		client.Close()
		return nil, err
	}
	var (
		mu      sync.Mutex
		crashed bool
		closed  bool
	)
	closeClient := func() {
		if !closed {
			closed = true
			client.Close()
		}
	}
	return &demo.CoordinatedInstance{
		Leases: leases,
		Locks:  locks,
		// A killed process's connections die with it, and nothing is
		// revoked: the sessions' leases run out.
		Crash: func(context.Context) error {
			mu.Lock()
			defer mu.Unlock()
			crashed = true
			closeClient()
			return nil
		},
		Close: func() {
			mu.Lock()
			defer mu.Unlock()
			if !crashed && !closed {
				// The manager and the driver released what they held; revoking
				// the sessions frees whatever is left at once.
				ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
				defer cancel()
				_ = locks.Close(ctx)
				_ = leases.Close(ctx)
			}
			closeClient()
		},
	}, nil
}

// Teardown deletes the keys of the run: the released roles' records are
// all that is left once the sessions are gone.
func (c *coordination) Teardown(ctx context.Context) error {
	if _, err := c.admin.Delete(ctx, c.prefix, clientv3.WithPrefix()); err != nil {
		return fmt.Errorf("delete the demo's etcd keys under %s: %w", c.prefix, err)
	}
	return nil
}
