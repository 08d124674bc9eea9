package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/lease"
)

// DefaultMaxTxnOps is etcd's default limit on the operations of one
// transaction (--max-txn-ops).
const DefaultMaxTxnOps = 128

// opsPerClaim is what one claim costs of a transaction's operation budget:
// etcd counts a nested transaction's operations against the budget its
// parent leaves, and a claim is a transaction two levels deep with two
// operations at each (see claimOp).
const opsPerClaim = 4

// LeaseStoreOptions configure a LeaseStore. The zero value uses the
// defaults.
type LeaseStoreOptions struct {
	// Prefix starts every key of the store (default DefaultPrefix): roles
	// live under Prefix+"lease/". Every instance sharing the leases must use
	// the same prefix.
	Prefix string
	// MaxTxnOps is the cluster's --max-txn-ops (default DefaultMaxTxnOps).
	// Heartbeats with more claims than one transaction can carry are split
	// into as few transactions as it allows.
	MaxTxnOps int
	// Logger receives cleanups of terms nobody claims any more. nil
	// discards.
	Logger *slog.Logger
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o LeaseStoreOptions) withDefaults() LeaseStoreOptions {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.MaxTxnOps == 0 {
		o.MaxTxnOps = DefaultMaxTxnOps
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validate checks options that have their defaults.
func (o LeaseStoreOptions) validate() error {
	if err := checkPrefix(lease.ErrInvalidConfig, "etcd.LeaseStoreOptions.Prefix", o.Prefix); err != nil {
		return err
	}
	if o.MaxTxnOps < opsPerClaim+1 {
		return config.Invalid(lease.ErrInvalidConfig, "etcd.LeaseStoreOptions.MaxTxnOps", "is %d; it must be at least %d (etcd's default is %d)",
			o.MaxTxnOps, opsPerClaim+1, DefaultMaxTxnOps)
	}
	return nil
}

// LeaseStore is the lease.Store on etcd, a lease.ReleaseWatcher and a
// lease.Lister.
// Create it with NewLeaseStore.
//
// A held role is the key Prefix+"lease/role/"+role, attached to an etcd
// lease of its holder's: the holder's session. All of a holder's roles
// (for one LeaseDuration) hang on that one lease, so a heartbeat that only
// renews is one KeepAlive, whatever the number of roles (with a count-only
// read beside it, which fails when the cluster has lost its quorum), and
// expiry is etcd's: when the holder stops renewing, etcd revokes the lease and
// deletes every role key on it at once.
//
// A role's fencing token is its key's create revision, the revision of
// the transaction that took it. Revisions only grow, cluster-wide, so the
// token of every new term is larger than any before it: after a release,
// after an expiry, whatever happened to the old key. A release deletes the
// role key (which wakes watchers) and writes Prefix+"lease/free/"+role, a
// record of the released term without a lease, so that Read still shows
// the role with its last token, as the other stores do; a take deletes it.
//
// etcd has no clock of its own that clients can read. Records' times are
// the clock of the instance that wrote them, at the start of its request,
// for display only; no rule ever compares them. A renewal that is only a
// KeepAlive writes nothing, so Read shows RenewedAt and ExpiresAt as of the
// term's last write (its take, or a renewal that changed its address or
// LeaseDuration).
type LeaseStore struct {
	client     *clientv3.Client
	opts       LeaseStoreOptions
	rolePrefix string
	freePrefix string
	batch      int // claims per transaction

	// seenRev is the latest revision a heartbeat of this store saw: the
	// release watch starts after it, so that a release between a
	// follower's heartbeat and the moment its watch is live still wakes it.
	seenRev atomic.Int64

	mu      sync.Mutex
	closed  bool
	holders map[string]*holderState
}

var (
	_ lease.Store          = (*LeaseStore)(nil)
	_ lease.ReleaseWatcher = (*LeaseStore)(nil)
	_ lease.Lister         = (*LeaseStore)(nil)
)

// holderState is what this store instance knows of one holder's sessions
// and terms. Only this instance attaches keys to its sessions' leases, so
// a key on one of them is this holder's, taken through this instance.
type holderState struct {
	mu       sync.Mutex // one heartbeat or release of the holder at a time
	sessions map[int64]*session
	terms    map[string]*term
}

// session is one etcd lease, for one requested TTL.
type session struct {
	id  clientv3.LeaseID
	ttl int64 // seconds, as granted: at least the request, maybe the cluster's floor
}

// term is a role this holder holds (as far as this instance knows).
type term struct {
	token uint64 // the key's create revision
	lease clientv3.LeaseID
	value roleValue
	// reported is set once a heartbeat that returned successfully gave the
	// term to its caller. An unreported term (its heartbeat failed after
	// the take committed) is handed over at the next claim of the role.
	reported bool
	claimed  time.Time // the last heartbeat that claimed the role
}

// roleValue is what a role key holds, as JSON. Times are Unix nanoseconds.
type roleValue struct {
	Holder  string `json:"holder"`
	Address string `json:"address,omitempty"`
	// Token is set in released records only: a held key's token is its
	// create revision, which is not known until the take commits.
	Token      uint64 `json:"token,omitempty"`
	AcquiredAt int64  `json:"acquired_at"`
	RenewedAt  int64  `json:"renewed_at"`
	ExpiresAt  int64  `json:"expires_at"`
}

func (v roleValue) record(role string, token uint64, held bool) lease.Record {
	return lease.Record{
		Role:          role,
		Holder:        v.Holder,
		HolderAddress: v.Address,
		Token:         token,
		AcquiredAt:    time.Unix(0, v.AcquiredAt),
		RenewedAt:     time.Unix(0, v.RenewedAt),
		ExpiresAt:     time.Unix(0, v.ExpiresAt),
		Held:          held,
	}
}

func (v roleValue) encode() string {
	b, _ := json.Marshal(v) // a struct of strings and integers always encodes
	return string(b)
}

func decodeValue(kv *mvccpb.KeyValue) (roleValue, error) {
	var v roleValue
	if err := json.Unmarshal(kv.Value, &v); err != nil {
		return v, fmt.Errorf("baton/etcd: key %q does not hold a baton lease record: %w", kv.Key, err)
	}
	return v, nil
}

// NewLeaseStore returns a LeaseStore over client, or an error naming the
// first invalid option. It sends nothing to etcd.
func NewLeaseStore(client *clientv3.Client, opts LeaseStoreOptions) (*LeaseStore, error) {
	if client == nil {
		return nil, config.Invalid(lease.ErrInvalidConfig, "etcd.NewLeaseStore: client", "is nil")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &LeaseStore{
		client:     client,
		opts:       opts,
		rolePrefix: opts.Prefix + "lease/role/",
		freePrefix: opts.Prefix + "lease/free/",
		batch:      opts.MaxTxnOps - opsPerClaim,
		holders:    map[string]*holderState{},
	}, nil
}

// RoleKey is the key of a held role, for operators and tests.
func (s *LeaseStore) RoleKey(role string) string { return s.rolePrefix + role }

// ReleasedKey is the key of a role's released record.
func (s *LeaseStore) ReleasedKey(role string) string { return s.freePrefix + role }

func (s *LeaseStore) holder(id string) (*holderState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	hs := s.holders[id]
	if hs == nil {
		hs = &holderState{sessions: map[int64]*session{}, terms: map[string]*term{}}
		s.holders[id] = hs
	}
	return hs, nil
}

// ttlSeconds is a LeaseDuration as an etcd lease TTL: whole seconds,
// rounded up, so that etcd never ends a term before the duration asked for.
func ttlSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

// Heartbeat implements lease.Store. The request is checked first; a bad
// one sends nothing.
//
// Claims of terms this instance holds for the holder on the session of
// this LeaseDuration, at the same address, are renewed by the session's
// KeepAlive, with a count-only read beside it that needs the cluster's
// quorum. Every other claim is a small transaction of its own
// (take the key if absent; or move a known term to this session and
// address, and take it if it is gone), nested in as few transactions as
// MaxTxnOps allows, sent together with the KeepAlive.
func (s *LeaseStore) Heartbeat(ctx context.Context, req lease.HeartbeatRequest) ([]lease.Record, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if len(req.Claims) == 0 {
		return nil, nil
	}
	hs, err := s.holder(req.Holder)
	if err != nil {
		return nil, err
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	ttl := ttlSeconds(req.LeaseDuration)
	recs, err := s.beat(ctx, hs, req, ttl)
	if errors.Is(err, errLeaseGone) {
		// The session's lease expired or was revoked, and its keys with it:
		// one more try, on a new lease.
		recs, err = s.beat(ctx, hs, req, ttl)
	}
	return recs, err
}

// claimKind is what a heartbeat does for one claim.
type claimKind int

const (
	renewByKeepAlive claimKind = iota // a known term on this session: nothing to write
	moveTerm                          // a known term, to move to this session or address
	takeRole                          // anything else: take it if free
)

type plannedClaim struct {
	role string
	kind claimKind
	t    *term // for renewByKeepAlive and moveTerm
}

func (s *LeaseStore) beat(ctx context.Context, hs *holderState, req lease.HeartbeatRequest, ttl int64) ([]lease.Record, error) {
	start := time.Now()
	sess := hs.sessions[ttl]
	var (
		wg      sync.WaitGroup
		kaTTL   int64
		kaErr   error
		granted = sess == nil
	)
	if granted {
		resp, err := s.client.Grant(ctx, ttl)
		if err != nil {
			return nil, mapErr("grant the session lease", err)
		}
		sess = &session{id: resp.ID, ttl: resp.TTL}
		hs.sessions[ttl] = sess
		kaTTL = resp.TTL
	} else {
		// The KeepAlive runs beside the transactions: its lease covers the
		// keys they attach, and a lease that is gone fails both.
		wg.Go(func() {
			resp, err := s.client.KeepAliveOnce(ctx, sess.id)
			if err != nil {
				kaErr = mapErr("renew the session lease", err)
				return
			}
			kaTTL = resp.TTL
			s.saw(resp.ResponseHeader.GetRevision())
		})
	}

	plan := make([]plannedClaim, len(req.Claims))
	var txnClaims []int // indexes into plan
	for i, c := range req.Claims {
		t := hs.terms[c.Role]
		p := plannedClaim{role: c.Role, kind: takeRole}
		if t != nil && (c.Token == t.token || !t.reported) {
			p.t = t
			p.kind = moveTerm
			if t.lease == sess.id && t.value.Address == req.Address {
				p.kind = renewByKeepAlive
			}
		}
		if t != nil {
			t.claimed = start
		}
		plan[i] = p
		if p.kind != renewByKeepAlive {
			txnClaims = append(txnClaims, i)
		}
	}

	fresh := roleValue{
		Holder:     req.Holder,
		Address:    req.Address,
		AcquiredAt: start.UnixNano(),
		RenewedAt:  start.UnixNano(),
		ExpiresAt:  start.Add(time.Duration(sess.ttl) * time.Second).UnixNano(),
	}
	batches := (len(txnClaims) + s.batch - 1) / s.batch
	results := make([]*clientv3.TxnResponse, batches)
	errs := make([]error, batches)
	var quorumErr error
	if batches == 0 && !granted {
		// Only renewals, and a KeepAlive is answered by the leader alone: a
		// leader cut off from its quorum goes on answering until it steps
		// down, up to two election timeouts later. A linearizable read
		// needs the quorum, so with it the heartbeat fails as soon as the
		// quorum is gone, and the holders fail closed on time. (A
		// transaction, or a grant, goes through consensus anyway.)
		wg.Go(func() {
			if _, err := s.client.Get(ctx, s.opts.Prefix+"lease/quorum", clientv3.WithCountOnly()); err != nil {
				quorumErr = mapErr("confirm the cluster's quorum", err)
			}
		})
	}
	for b := range batches {
		part := txnClaims[b*s.batch : min((b+1)*s.batch, len(txnClaims))]
		ops := make([]clientv3.Op, len(part))
		for j, i := range part {
			ops[j] = s.claimOp(plan[i], sess, fresh)
		}
		wg.Go(func() {
			results[b], errs[b] = s.client.Txn(ctx).Then(ops...).Commit()
		})
	}
	wg.Wait()

	if errors.Is(kaErr, errLeaseGone) || anyLeaseGone(errs) {
		s.forgetSession(hs, ttl, sess)
		if kaErr == nil {
			kaErr = mapErr("attach roles to the session lease", firstErr(errs))
		}
		return nil, kaErr
	}
	// What the transactions did is recorded before any error is returned:
	// a term taken in a heartbeat that then failed is handed over at the
	// next claim.
	records := make([]lease.Record, len(plan))
	found := make([]bool, len(plan))
	for b, resp := range results {
		if errs[b] != nil {
			continue
		}
		s.saw(resp.Header.Revision)
		part := txnClaims[b*s.batch : min((b+1)*s.batch, len(txnClaims))]
		for j, i := range part {
			rec, ok, err := s.claimResult(hs, plan[i], sess, fresh, resp.Header.Revision, resp.Responses[j].GetResponseTxn())
			if err != nil {
				return nil, err
			}
			records[i], found[i] = rec, ok
		}
	}
	if kaErr != nil {
		return nil, kaErr
	}
	if quorumErr != nil {
		return nil, quorumErr
	}
	if err := firstErr(errs); err != nil {
		return nil, mapErr("heartbeat transaction", err)
	}
	out := make([]lease.Record, 0, len(plan))
	for i, p := range plan {
		if p.kind == renewByKeepAlive {
			v := p.t.value
			v.RenewedAt = start.UnixNano()
			v.ExpiresAt = start.Add(time.Duration(kaTTL) * time.Second).UnixNano()
			records[i], found[i] = v.record(p.role, p.t.token, true), true
		}
		if !found[i] {
			// Not held, and no key: a role that was never held, expired
			// while nobody took it, or was released. Take it at the next
			// heartbeat; there is no row to show.
			records[i] = lease.Record{Role: p.role}
		}
		if records[i].Held {
			hs.terms[p.role].reported = true
		}
		out = append(out, records[i])
	}
	s.dropUnclaimed(ctx, hs, start)
	return out, nil
}

// claimOp is the transaction of one claim that is not a plain renewal:
//
//	take:  if the role key is absent, put it on the session and delete the
//	       released record; else read it.
//	move:  if the key is still the term's (same create revision, same
//	       lease), put it again on the session with the request's address;
//	       else the take above.
func (s *LeaseStore) claimOp(p plannedClaim, sess *session, fresh roleValue) clientv3.Op {
	key := s.rolePrefix + p.role
	take := clientv3.OpTxn(
		[]clientv3.Cmp{clientv3.Compare(clientv3.Version(key), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(key, fresh.encode(), clientv3.WithLease(sess.id)), clientv3.OpDelete(s.freePrefix + p.role)},
		[]clientv3.Op{clientv3.OpGet(key)},
	)
	if p.kind == takeRole {
		return take
	}
	moved := p.t.value
	moved.Address = fresh.Address
	moved.RenewedAt = fresh.RenewedAt
	moved.ExpiresAt = fresh.ExpiresAt
	return clientv3.OpTxn(
		[]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(key), "=", int64(p.t.token)),
			clientv3.Compare(clientv3.LeaseValue(key), "=", int64(p.t.lease)),
		},
		[]clientv3.Op{clientv3.OpPut(key, moved.encode(), clientv3.WithLease(sess.id))},
		[]clientv3.Op{take},
	)
}

// claimResult reads the answer to claimOp and updates what the holder's
// state knows. found is false when the role has no key.
func (s *LeaseStore) claimResult(hs *holderState, p plannedClaim, sess *session, fresh roleValue, rev int64, r *etcdserverpb.TxnResponse) (lease.Record, bool, error) {
	if p.kind == moveTerm {
		if r.Succeeded {
			p.t.lease = sess.id
			p.t.value.Address = fresh.Address
			p.t.value.RenewedAt, p.t.value.ExpiresAt = fresh.RenewedAt, fresh.ExpiresAt
			return p.t.value.record(p.role, p.t.token, true), true, nil
		}
		delete(hs.terms, p.role) // the term is over; the nested take decides the rest
		r = r.Responses[0].GetResponseTxn()
	}
	if r.Succeeded {
		hs.terms[p.role] = &term{token: uint64(rev), lease: sess.id, value: fresh, claimed: time.Now()}
		return fresh.record(p.role, uint64(rev), true), true, nil
	}
	kvs := r.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return lease.Record{}, false, nil
	}
	kv := kvs[0]
	v, err := decodeValue(kv)
	if err != nil {
		return lease.Record{}, false, err
	}
	token := uint64(kv.CreateRevision)
	if !hs.ownsLease(clientv3.LeaseID(kv.Lease)) {
		return v.record(p.role, token, false), true, nil
	}
	// The key is on one of this holder's sessions: a term this instance
	// took. Either the caller was told of it and claims another token (the
	// contract: refuse, leave it alone), or the answer of its take was lost
	// (hand it over now if it is on this session, else move it next time).
	t := hs.terms[p.role]
	if t != nil && t.token == token && t.reported {
		return v.record(p.role, token, false), true, nil
	}
	hs.terms[p.role] = &term{token: token, lease: clientv3.LeaseID(kv.Lease), value: v, claimed: time.Now()}
	held := clientv3.LeaseID(kv.Lease) == sess.id && v.Holder == fresh.Holder
	return v.record(p.role, token, held), true, nil
}

// saw records a revision a heartbeat's answer carried.
func (s *LeaseStore) saw(rev int64) {
	for {
		cur := s.seenRev.Load()
		if rev <= cur || s.seenRev.CompareAndSwap(cur, rev) {
			return
		}
	}
}

func (hs *holderState) ownsLease(id clientv3.LeaseID) bool {
	if id == clientv3.NoLease {
		return false
	}
	for _, sess := range hs.sessions {
		if sess.id == id {
			return true
		}
	}
	return false
}

// forgetSession drops a session whose lease is gone, with its terms: etcd
// deleted their keys with the lease.
func (s *LeaseStore) forgetSession(hs *holderState, ttl int64, sess *session) {
	if hs.sessions[ttl] == sess {
		delete(hs.sessions, ttl)
	}
	for role, t := range hs.terms {
		if t.lease == sess.id {
			delete(hs.terms, role)
		}
	}
}

// dropUnclaimed releases the terms that no heartbeat has claimed for longer
// than their lease: the caller gave them up without a successful release
// (its answer was lost, say). In the other stores they would have expired;
// here the session's KeepAlive would keep them forever.
func (s *LeaseStore) dropUnclaimed(ctx context.Context, hs *holderState, now time.Time) {
	for role, t := range hs.terms {
		ttl := time.Duration(t.value.ExpiresAt - t.value.RenewedAt)
		if now.Sub(t.claimed) <= ttl {
			continue
		}
		released, err := s.releaseTerm(ctx, role, t, now)
		if err != nil {
			s.opts.Logger.Warn("releasing a role nobody claims failed; retrying at the next heartbeat", "role", role, "err", err)
			continue
		}
		delete(hs.terms, role)
		s.opts.Logger.Info("released a role nobody claimed for longer than its lease", "role", role, "token", t.token, "released", released)
	}
}

// releaseTerm ends t if it is still current: the role key goes (watchers
// hear of it) and the released record takes its place.
func (s *LeaseStore) releaseTerm(ctx context.Context, role string, t *term, now time.Time) (bool, error) {
	key := s.rolePrefix + role
	free := t.value
	free.Token = t.token
	free.ExpiresAt = now.UnixNano()
	resp, err := s.client.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(key), "=", int64(t.token)),
		clientv3.Compare(clientv3.LeaseValue(key), "=", int64(t.lease)),
	).Then(clientv3.OpDelete(key), clientv3.OpPut(s.freePrefix+role, free.encode())).Commit()
	if err != nil {
		return false, mapErr("release", err)
	}
	return resp.Succeeded, nil
}

func anyLeaseGone(errs []error) bool {
	for _, err := range errs {
		if errors.Is(mapErr("", err), errLeaseGone) {
			return true
		}
	}
	return false
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Release implements lease.Store: if the role's key is holder's term with
// this token, it is deleted and the released record written, in one
// transaction that checks the key did not change since it was read.
func (s *LeaseStore) Release(ctx context.Context, role, holder string, token uint64) (bool, error) {
	if err := lease.ValidateRole(role); err != nil {
		return false, err
	}
	if holder == "" {
		return false, errors.New("baton/etcd: release: the holder is empty")
	}
	hs, err := s.holder(holder)
	if err != nil {
		return false, err
	}
	if token == 0 {
		return false, nil
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	key := s.rolePrefix + role
	// A heartbeat that moved the term to another address changes the key
	// under a release: read again, a few times, as long as it is ours.
	for range 3 {
		resp, err := s.client.Get(ctx, key)
		if err != nil {
			return false, mapErr("release", err)
		}
		if len(resp.Kvs) == 0 || uint64(resp.Kvs[0].CreateRevision) != token {
			return false, nil
		}
		kv := resp.Kvs[0]
		v, err := decodeValue(kv)
		if err != nil {
			return false, err
		}
		if v.Holder != holder {
			return false, nil
		}
		released, err := s.releaseTerm(ctx, role, &term{token: token, lease: clientv3.LeaseID(kv.Lease), value: v}, time.Now())
		if err != nil {
			return false, err
		}
		if released {
			if t := hs.terms[role]; t != nil && t.token == token {
				delete(hs.terms, role)
			}
			return true, nil
		}
	}
	return false, nil
}

// Read implements lease.Store with linearizable reads of the roles' keys
// and released records, as few transactions as MaxTxnOps allows.
func (s *LeaseStore) Read(ctx context.Context, roles []string) ([]lease.Record, error) {
	for i, role := range roles {
		if err := lease.ValidateRole(role); err != nil {
			return nil, fmt.Errorf("baton/etcd: read: roles[%d]: %w", i, err)
		}
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	var out []lease.Record
	per := s.opts.MaxTxnOps / 2
	for len(roles) > 0 {
		part := roles[:min(per, len(roles))]
		roles = roles[len(part):]
		ops := make([]clientv3.Op, 0, 2*len(part))
		for _, role := range part {
			ops = append(ops, clientv3.OpGet(s.rolePrefix+role), clientv3.OpGet(s.freePrefix+role))
		}
		resp, err := s.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, mapErr("read", err)
		}
		for i, role := range part {
			if kvs := resp.Responses[2*i].GetResponseRange().Kvs; len(kvs) > 0 {
				v, err := decodeValue(kvs[0])
				if err != nil {
					return nil, err
				}
				out = append(out, v.record(role, uint64(kvs[0].CreateRevision), false))
				continue
			}
			if kvs := resp.Responses[2*i+1].GetResponseRange().Kvs; len(kvs) > 0 {
				v, err := decodeValue(kvs[0])
				if err != nil {
					return nil, err
				}
				out = append(out, v.record(role, v.Token, false))
			}
		}
	}
	return out, nil
}

// List implements lease.Lister: the role keys and released records under
// the prefix, read in one linearizable transaction. A role key is a live
// term (etcd deletes it when its lease runs out), whose Remaining is its
// etcd lease's time to live, in etcd's whole seconds. A released record
// is not live; etcd has no clock to read, so its Remaining counts from
// the release by this instance's clock.
func (s *LeaseStore) List(ctx context.Context) ([]lease.Listed, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	resp, err := s.client.Txn(ctx).Then(
		clientv3.OpGet(s.rolePrefix, clientv3.WithPrefix()),
		clientv3.OpGet(s.freePrefix, clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, mapErr("list", err)
	}
	var out []lease.Listed
	held := map[string]bool{}
	left := map[clientv3.LeaseID]time.Duration{} // one question per session, shared by its roles
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		v, err := decodeValue(kv)
		if err != nil {
			return nil, err
		}
		id := clientv3.LeaseID(kv.Lease)
		d, asked := left[id]
		if !asked {
			ttl, err := s.client.TimeToLive(ctx, id)
			switch {
			case errors.Is(mapErr("list", err), errLeaseGone):
				d = -time.Second // revoked since the read: the term has just ended
			case err != nil:
				return nil, mapErr("list", err)
			default:
				d = time.Duration(ttl.TTL) * time.Second
			}
			left[id] = d
		}
		role := strings.TrimPrefix(string(kv.Key), s.rolePrefix)
		held[role] = true
		out = append(out, lease.Listed{Record: v.record(role, uint64(kv.CreateRevision), false), Live: d > 0, Remaining: d})
	}
	now := time.Now()
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		role := strings.TrimPrefix(string(kv.Key), s.freePrefix)
		if held[role] {
			continue // taken again; Read shows the role key too
		}
		v, err := decodeValue(kv)
		if err != nil {
			return nil, err
		}
		out = append(out, lease.Listed{Record: v.record(role, v.Token, false), Remaining: min(0, time.Unix(0, v.ExpiresAt).Sub(now))})
	}
	return out, nil
}

func (s *LeaseStore) checkOpen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// WatchReleases implements lease.ReleaseWatcher: it watches the role keys
// for deletions, which are releases and expiries alike (either frees the
// role), from the revision after the last one a heartbeat of this store
// saw (or, before any, after the present one). The watch requires a leader, so a member cut off from its cluster
// ends it with an error instead of going quiet.
func (s *LeaseStore) WatchReleases(ctx context.Context, released func(role string)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// A watch goes live at the server some time after the call; starting it
	// at a known revision makes it report every release after that one,
	// whenever it goes live: the last one a heartbeat saw, or else the
	// present. A heartbeat may finish while the present is asked for, so
	// the revision it saw is looked at again after the answer, and the
	// earlier of the two wins.
	rev := s.seenRev.Load()
	if rev == 0 {
		resp, err := s.client.Get(wctx, s.opts.Prefix+"lease/quorum", clientv3.WithCountOnly())
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return mapErr("watch releases", err)
		}
		rev = resp.Header.Revision
		if seen := s.seenRev.Load(); seen > 0 && seen < rev {
			rev = seen
		}
	}
	watch := s.client.Watch(wctx, s.rolePrefix, clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(rev+1))
	for resp := range watch {
		if err := ctx.Err(); err != nil {
			return err
		}
		if resp.CompactRevision != 0 {
			// The revision to start from is compacted away: the caller
			// restarts the watch, from the present this time.
			s.seenRev.Store(0)
			return fmt.Errorf("baton/etcd: watch releases: revision %d is compacted", resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return mapErr("watch releases", err)
		}
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				released(strings.TrimPrefix(string(ev.Kv.Key), s.rolePrefix))
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("baton/etcd: the release watch closed")
}

// Close revokes every session lease of the store, which frees at once every
// role still held through it, and refuses further calls. Close the
// managers first: they release their roles one by one and announce it.
func (s *LeaseStore) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	holders := s.holders
	s.mu.Unlock()
	var errs []error
	for _, hs := range holders {
		hs.mu.Lock()
		for _, sess := range hs.sessions {
			if _, err := s.client.Revoke(ctx, sess.id); err != nil && !errors.Is(mapErr("", err), errLeaseGone) {
				errs = append(errs, mapErr("revoke a session lease", err))
			}
		}
		hs.sessions, hs.terms = map[int64]*session{}, map[string]*term{}
		hs.mu.Unlock()
	}
	return errors.Join(errs...)
}
