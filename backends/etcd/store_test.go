package etcd_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/baton-go/baton/backends/etcd"
	"github.com/baton-go/baton/backends/etcd/internal/etcdtest"
	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/lease"
	"github.com/baton-go/baton/core/lock"
)

func TestNewClient_RejectsInvalidOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		opts etcd.ClientOptions
		want string
	}{
		"no endpoints":        {etcd.ClientOptions{}, "Endpoints is empty"},
		"empty endpoint":      {etcd.ClientOptions{Endpoints: []string{""}}, "Endpoints[0]"},
		"no port":             {etcd.ClientOptions{Endpoints: []string{"etcd-0"}}, "not host:port"},
		"bad port":            {etcd.ClientOptions{Endpoints: []string{"a:1", "etcd-1:99999"}}, "Endpoints[1]"},
		"unknown scheme":      {etcd.ClientOptions{Endpoints: []string{"unix://x:1"}}, "scheme"},
		"https without TLS":   {etcd.ClientOptions{Endpoints: []string{"https://etcd-0:2379"}}, "needs ClientOptions.TLS"},
		"http with TLS":       {etcd.ClientOptions{Endpoints: []string{"http://etcd-0:2379"}, TLS: &tls.Config{}}, "http with ClientOptions.TLS"},
		"path in endpoint":    {etcd.ClientOptions{Endpoints: []string{"http://etcd-0:2379/v3"}}, "only a scheme"},
		"password alone":      {etcd.ClientOptions{Endpoints: []string{"etcd-0:2379"}, Password: "p"}, "Username is empty"},
		"username alone":      {etcd.ClientOptions{Endpoints: []string{"etcd-0:2379"}, Username: "u"}, "has no Password"},
		"negative dial limit": {etcd.ClientOptions{Endpoints: []string{"etcd-0:2379"}, DialTimeout: -time.Second}, "DialTimeout"},
	} {
		t.Run(name, func(t *testing.T) {
			cli, err := etcd.NewClient(tc.opts)
			if err == nil {
				cli.Close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
			if !errors.Is(err, etcd.ErrInvalidClientOptions) {
				t.Fatalf("err = %v, want etcd.ErrInvalidClientOptions", err)
			}
			if errors.Is(err, lease.ErrInvalidConfig) || errors.Is(err, lock.ErrInvalidOptions) {
				t.Fatalf("err = %v wraps a lease or lock sentinel; NewClient's is etcd.ErrInvalidClientOptions", err)
			}
			var fe *config.FieldError
			if !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "ClientOptions.") {
				t.Fatalf("err = %v, want a *config.FieldError naming a ClientOptions field", err)
			}
		})
	}
}

func TestNewClient_ConnectsWithAndWithoutAScheme(t *testing.T) {
	env := etcdtest.New(t)
	for _, ep := range env.Endpoints {
		for _, form := range []string{ep, strings.TrimPrefix(ep, "http://")} {
			cli, err := etcd.NewClient(etcd.ClientOptions{Endpoints: []string{form}})
			if err != nil {
				t.Fatalf("NewClient(%q): %v", form, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = cli.Get(ctx, env.Prefix+"x")
			cancel()
			cli.Close()
			if err != nil {
				t.Fatalf("Get through %q: %v", form, err)
			}
		}
	}
}

// offlineClient is a client of nothing: constructors send nothing, so it
// is enough to check options.
func offlineClient(t *testing.T) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func TestNewLeaseStore_RejectsInvalidOptions(t *testing.T) {
	cli := offlineClient(t)
	for name, opts := range map[string]etcd.LeaseStoreOptions{
		"prefix without slash": {Prefix: "baton"},
		"prefix with NUL":      {Prefix: "a\x00/"},
		"prefix not UTF-8":     {Prefix: "a\xff/"},
		"prefix too long":      {Prefix: strings.Repeat("p", etcd.MaxPrefixLength) + "/"},
		"tiny MaxTxnOps":       {MaxTxnOps: 4},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := etcd.NewLeaseStore(cli, opts); !errors.Is(err, lease.ErrInvalidConfig) {
				t.Fatalf("err = %v, want lease.ErrInvalidConfig", err)
			}
		})
	}
	if _, err := etcd.NewLeaseStore(nil, etcd.LeaseStoreOptions{}); !errors.Is(err, lease.ErrInvalidConfig) {
		t.Fatalf("nil client: err = %v", err)
	}
}

func TestNewLockProvider_RejectsInvalidOptions(t *testing.T) {
	cli := offlineClient(t)
	for name, opts := range map[string]etcd.LockProviderOptions{
		"prefix without slash": {Prefix: "baton"},
		"TTL below a second":   {TTL: 500 * time.Millisecond},
		"TTL not whole":        {TTL: 1500 * time.Millisecond},
		"negative margin":      {SafetyMargin: -time.Second},
		"margin too large":     {TTL: 3 * time.Second, SafetyMargin: 2 * time.Second},
		"inverted backoff":     {Backoff: lock.Backoff{Min: time.Second, Max: time.Millisecond}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := etcd.NewLockProvider(cli, opts); !errors.Is(err, lock.ErrInvalidOptions) {
				t.Fatalf("err = %v, want lock.ErrInvalidOptions", err)
			}
		})
	}
	if _, err := etcd.NewLockProvider(nil, etcd.LockProviderOptions{}); !errors.Is(err, lock.ErrInvalidOptions) {
		t.Fatalf("nil client: err = %v", err)
	}
}

// rpcCounter counts the calls a client makes, by method, and can fail the
// calls of one method on demand.
type rpcCounter struct {
	mu    sync.Mutex
	calls map[string]int
	fail  atomic.Pointer[string] // a method name whose calls fail
	lose  atomic.Pointer[string] // a method name whose answers are lost after the call
}

func (c *rpcCounter) count(method string) error {
	c.mu.Lock()
	c.calls[method]++
	c.mu.Unlock()
	if f := c.fail.Load(); f != nil && strings.HasSuffix(method, *f) {
		return fmt.Errorf("injected failure of %s", method)
	}
	return nil
}

func (c *rpcCounter) reset() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	got := c.calls
	c.calls = map[string]int{}
	return got
}

// countingClient is a client of env's cluster whose calls c counts.
func countingClient(t *testing.T, env *etcdtest.Env) (*clientv3.Client, *rpcCounter) {
	c := &rpcCounter{calls: map[string]int{}}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: env.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if err := c.count(method); err != nil {
					return err
				}
				err := invoker(ctx, method, req, reply, cc, opts...)
				if l := c.lose.Load(); err == nil && l != nil && strings.HasSuffix(method, *l) {
					return fmt.Errorf("injected loss of the answer to %s", method)
				}
				return err
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				if err := c.count(method); err != nil {
					return nil, err
				}
				return streamer(ctx, desc, cc, method, opts...)
			}),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli, c
}

func manyClaims(n int, tokens map[string]uint64) []lease.Claim {
	return claimsOf(fmt.Sprintf("of-%d", n), n, tokens)
}

func claimsOf(set string, n int, tokens map[string]uint64) []lease.Claim {
	claims := make([]lease.Claim, n)
	for i := range claims {
		role := fmt.Sprintf("%s-%04d", set, i)
		claims[i] = lease.Claim{Role: role, Token: tokens[role]}
	}
	return claims
}

func heartbeatAll(t *testing.T, s lease.Store, holder string, claims []lease.Claim) map[string]uint64 {
	t.Helper()
	recs, err := s.Heartbeat(context.Background(), lease.HeartbeatRequest{
		Holder: holder, Address: "http://" + holder, LeaseDuration: time.Minute, Claims: claims,
	})
	if err != nil {
		t.Fatalf("Heartbeat of %d claims: %v", len(claims), err)
	}
	tokens := map[string]uint64{}
	for _, r := range recs {
		if !r.Held {
			t.Fatalf("%s was refused %q: %+v", holder, r.Role, r)
		}
		tokens[r.Role] = r.Token
	}
	if len(tokens) != len(claims) {
		t.Fatalf("%d records held for %d claims", len(tokens), len(claims))
	}
	return tokens
}

// A renewal of every role is one KeepAlive and one quorum read, sent
// together, however many roles there are; takes go in as few transactions
// as the operation limit allows.
func TestHeartbeat_RenewalIsOneKeepAliveForAnyNumberOfRoles(t *testing.T) {
	env := etcdtest.New(t)
	cli, calls := countingClient(t, env)
	s, err := etcd.NewLeaseStore(cli, etcd.LeaseStoreOptions{Prefix: env.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	const keepAlive, txn, rng = "/etcdserverpb.Lease/LeaseKeepAlive", "/etcdserverpb.KV/Txn", "/etcdserverpb.KV/Range"
	for _, n := range []int{1, 100, 1000} {
		holder := fmt.Sprintf("holder-%d", n)
		calls.reset()
		tokens := heartbeatAll(t, s, holder, manyClaims(n, nil))
		got := calls.reset()
		perTxn := etcd.DefaultMaxTxnOps - 4
		if want := (n + perTxn - 1) / perTxn; got[txn] != want {
			t.Errorf("%d takes: %d transactions, want %d", n, got[txn], want)
		}
		for range 2 {
			heartbeatAll(t, s, holder, manyClaims(n, tokens))
			got = calls.reset()
			if got[keepAlive] != 1 || got[rng] != 1 || len(got) != 2 {
				t.Fatalf("renewing %d roles made the calls %v; want one LeaseKeepAlive, one Range (the quorum check) and nothing else", n, got)
			}
		}
	}
}

// MaxTxnOps above the cluster's limit is a configuration error, not a
// failed heartbeat to retry.
func TestHeartbeat_MaxTxnOpsAboveTheClustersLimitIsAConfigError(t *testing.T) {
	env := etcdtest.New(t)
	s := newLeaseStore(t, env, etcd.LeaseStoreOptions{MaxTxnOps: 4 * etcd.DefaultMaxTxnOps})
	_, err := s.Heartbeat(context.Background(), lease.HeartbeatRequest{
		Holder: "a", LeaseDuration: time.Minute, Claims: manyClaims(2*etcd.DefaultMaxTxnOps, nil),
	})
	if !errors.Is(err, lease.ErrInvalidConfig) {
		t.Fatalf("err = %v, want lease.ErrInvalidConfig", err)
	}
	// A smaller limit than the cluster's only makes more transactions.
	small := newLeaseStore(t, env, etcd.LeaseStoreOptions{MaxTxnOps: 8})
	heartbeatAll(t, small, "b", manyClaims(30, nil))
}

// A take whose heartbeat failed after the transaction committed is handed
// to the holder at its next claim, with the same token: without that the
// role would stay on the holder's session, renewed forever and used by
// nobody. Either the KeepAlive beside the transaction failed (the store saw
// the take) or the transaction's answer was lost (it did not).
func TestHeartbeat_TakeWhoseAnswerWasLostIsHandedOverAtTheNextClaim(t *testing.T) {
	for _, tc := range []struct{ name, fail, lose string }{
		{name: "KeepAliveFailed", fail: "LeaseKeepAlive"},
		{name: "TransactionAnswerLost", lose: "KV/Txn"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := etcdtest.New(t)
			cli, calls := countingClient(t, env)
			s, err := etcd.NewLeaseStore(cli, etcd.LeaseStoreOptions{Prefix: env.Prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			ctx := context.Background()
			req := lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "first"}}}
			if _, err := s.Heartbeat(ctx, req); err != nil { // the session exists from here
				t.Fatal(err)
			}
			if tc.fail != "" {
				calls.fail.Store(&tc.fail)
			}
			if tc.lose != "" {
				calls.lose.Store(&tc.lose)
			}
			req.Claims = []lease.Claim{{Role: "lost"}}
			if _, err := s.Heartbeat(ctx, req); err == nil {
				t.Fatal("the heartbeat succeeded despite the injected failure")
			}
			calls.fail.Store(nil)
			calls.lose.Store(nil)
			other := newLeaseStore(t, env, etcd.LeaseStoreOptions{})
			stored, err := other.Read(ctx, []string{"lost"})
			if err != nil || len(stored) != 1 || stored[0].Holder != "a" {
				t.Fatalf("Read = %+v, %v; want the role taken by a", stored, err)
			}
			recs, err := s.Heartbeat(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if !recs[0].Held || recs[0].Token != stored[0].Token {
				t.Fatalf("the next claim got %+v; want the term taken before, token %d", recs[0], stored[0].Token)
			}
		})
	}
}

// A term the holder stops claiming without releasing it is released once
// it has gone unclaimed for its lease, as it would have expired in the
// other stores; the session's KeepAlive does not keep it forever.
func TestHeartbeat_ReleasesATermNobodyClaimsForLongerThanItsLease(t *testing.T) {
	env := etcdtest.New(t)
	s := newLeaseStore(t, env, etcd.LeaseStoreOptions{})
	ctx := context.Background()
	d := etcdtest.MinLeaseTTL
	beat := func(claims ...lease.Claim) []lease.Record {
		recs, err := s.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: d, Claims: claims})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	recs := beat(lease.Claim{Role: "kept"}, lease.Claim{Role: "dropped"})
	tokens := map[string]uint64{}
	for _, r := range recs {
		tokens[r.Role] = r.Token
	}
	for end := time.Now().Add(d + time.Second); time.Now().Before(end); time.Sleep(d / 4) {
		if r := beat(lease.Claim{Role: "kept", Token: tokens["kept"]}); !r[0].Held {
			t.Fatalf("the claimed role was lost: %+v", r[0])
		}
	}
	got, err := s.Read(ctx, []string{"dropped"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Token != tokens["dropped"] || !got[0].ExpiresAt.Before(time.Now()) {
		t.Fatalf("Read of the unclaimed role = %+v; want its released record with token %d", got, tokens["dropped"])
	}
	other := newLeaseStore(t, env, etcd.LeaseStoreOptions{})
	r, err := other.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "b", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: "dropped"}}})
	if err != nil || !r[0].Held {
		t.Fatalf("another instance could not take the unclaimed role: %+v, %v", r, err)
	}
}

// Close revokes the sessions: every role still held is free at once.
func TestLeaseStoreClose_FreesEveryRoleAtOnce(t *testing.T) {
	env := etcdtest.New(t)
	ctx := context.Background()
	a := newLeaseStore(t, env, etcd.LeaseStoreOptions{})
	heartbeatAll(t, a, "a", manyClaims(10, nil))
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "a", LeaseDuration: time.Minute, Claims: manyClaims(1, nil)}); !errors.Is(err, etcd.ErrClosed) {
		t.Fatalf("Heartbeat after Close: err = %v, want ErrClosed", err)
	}
	b := newLeaseStore(t, env, etcd.LeaseStoreOptions{})
	heartbeatAll(t, b, "b", manyClaims(10, nil))
}

// Revoking the provider's session takes its locks away: Lost closes.
func TestLock_LostClosesWhenTheSessionIsRevoked(t *testing.T) {
	env := etcdtest.New(t)
	p := newLockProvider(t, env, etcd.LockProviderOptions{TTL: testLockTTL, SafetyMargin: testLockMargin})
	ctx := context.Background()
	l, err := p.Acquire(ctx, "revoked", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.Revoke(ctx, p.Session()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Lost():
	case <-time.After(2 * testLockTTL):
		t.Fatal("Lost did not close after the session was revoked")
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Release after revocation: err = %v, want ErrNotHeld", err)
	}
	// The provider starts a new session for the next lock.
	l, err = p.Acquire(ctx, "revoked", lock.AcquireOptions{})
	if err != nil {
		t.Fatalf("Acquire after the session was revoked: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A release after a follower's heartbeat wakes it even when its watch goes
// live only after the release: the watch starts at the revision that
// heartbeat saw. (A manager starts its heartbeat and its watch together;
// without this, one handover in a few hundred waited for the next
// heartbeat.)
func TestWatchReleases_StartsAfterTheLastHeartbeatNotAtTheCall(t *testing.T) {
	env := etcdtest.New(t)
	ctx := context.Background()
	holder := newLeaseStore(t, env, etcd.LeaseStoreOptions{})
	follower := newLeaseStore(t, env, etcd.LeaseStoreOptions{})
	recs := heartbeatAll(t, holder, "a", claimsOf("late", 1, nil))
	role := claimsOf("late", 1, nil)[0].Role
	r, err := follower.Heartbeat(ctx, lease.HeartbeatRequest{Holder: "b", LeaseDuration: time.Minute, Claims: []lease.Claim{{Role: role}}})
	if err != nil || r[0].Held {
		t.Fatalf("the follower's heartbeat: %+v, %v", r, err)
	}
	if ok, err := holder.Release(ctx, role, "a", recs[role]); err != nil || !ok {
		t.Fatalf("Release: %v, %v", ok, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- follower.WatchReleases(wctx, func(r string) {
			select {
			case got <- r:
			default:
			}
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case r := <-got:
		if r != role {
			t.Fatalf("announced %q, want %q", r, role)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the release before the watch started, after the follower's heartbeat, was never announced")
	}
}
