package holder

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"

	"github.com/baton-go/baton/core/config"
	"github.com/baton-go/baton/core/lease"
)

// RoleProxy returns middleware that runs requests under prefixes on the
// holder of role and forwards them there from every other instance (see the
// package documentation for the full behaviour). The lease is looked up in
// reg per request; while role is not registered, covered requests are
// answered 503, or run locally with Config.PassThroughUnregistered. A role
// not registered when RoleProxy is called is logged at error level (or, with
// the pass-through, as a warning): it is often a misspelled name.
//
// It reports ErrInvalidConfig for a nil reg, an invalid role name, no
// prefixes, a prefix that is not a clean absolute path, or bad Config.
func RoleProxy(reg *lease.Registry, role string, cfg Config, prefixes ...string) (func(http.Handler) http.Handler, error) {
	if reg == nil {
		return nil, invalid("reg", "is nil")
	}
	if err := lease.ValidateRole(role); err != nil {
		return nil, config.Wrap(ErrInvalidConfig, "role", err)
	}
	f, err := newForwarder(cfg, prefixes)
	if err != nil {
		return nil, err
	}
	rp := &roleProxy{f: f, reg: reg, role: role}
	if _, ok := reg.Lease(role); ok {
		rp.seen.Store(true)
	} else {
		f.startupUnregistered("role", role)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !f.cfg.covers(r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			rp.serve(w, r, next)
		})
	}, nil
}

type roleProxy struct {
	f    *forwarder
	reg  *lease.Registry
	role string
	// seen is set once the role was found registered: a role missing after
	// that was closed, and must not fall back to local execution.
	seen atomic.Bool
}

func (p *roleProxy) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	l, ok := p.reg.Lease(p.role)
	if !ok {
		if p.seen.Load() {
			p.f.unavailable(w, r, p.role, "the lease was closed on this instance")
			return
		}
		p.f.unregistered(w, r, next, p.role)
		return
	}
	p.seen.Store(true)
	p.f.dispatch(w, r, next, p.role, l.IsHeld(), l.CurrentHolderAddress())
}

// PartitionProxy is RoleProxy for a partition set: key selects the
// partition (lease.Partition.Resolve) and the request goes to that
// partition's holder. A request for which key reports false or an empty key
// is answered 400 Bad Request and never forwarded. While no partition set
// called partition is registered in reg, covered requests are answered 503,
// or run locally with Config.PassThroughUnregistered.
//
// key runs on every covered request, before any body is read; it should
// only look at the path, query or headers.
func PartitionProxy(reg *lease.Registry, partition string, key func(*http.Request) (string, bool),
	cfg Config, prefixes ...string) (func(http.Handler) http.Handler, error) {
	return newPartitionProxy(reg, partition, "", false, key, cfg, prefixes)
}

// PartitionProxyScoped is PartitionProxy for keys within a scope
// (lease.Partition.ResolveScoped): pass the same stable scope the owning
// subsystem hashes with, or requests land on the wrong partition.
func PartitionProxyScoped(reg *lease.Registry, partition, scope string, key func(*http.Request) (string, bool),
	cfg Config, prefixes ...string) (func(http.Handler) http.Handler, error) {
	return newPartitionProxy(reg, partition, scope, true, key, cfg, prefixes)
}

func newPartitionProxy(reg *lease.Registry, partition, scope string, scoped bool,
	key func(*http.Request) (string, bool), cfg Config, prefixes []string) (func(http.Handler) http.Handler, error) {
	switch {
	case reg == nil:
		return nil, invalid("reg", "is nil")
	case key == nil:
		return nil, invalid("key", "is nil")
	}
	if err := lease.ValidateRole(partition); err != nil {
		return nil, config.Wrap(ErrInvalidConfig, "partition", err)
	}
	f, err := newForwarder(cfg, prefixes)
	if err != nil {
		return nil, err
	}
	pp := &partitionProxy{f: f, reg: reg, name: partition, scope: scope, scoped: scoped, key: key}
	if _, ok := reg.Partition(partition); !ok {
		f.startupUnregistered("partition set", partition)
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !f.cfg.covers(r.URL.Path) {
				next.ServeHTTP(w, r)
				return
			}
			pp.serve(w, r, next)
		})
	}, nil
}

type partitionProxy struct {
	f      *forwarder
	reg    *lease.Registry
	name   string
	scope  string
	scoped bool
	key    func(*http.Request) (string, bool)
}

func (p *partitionProxy) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	part, ok := p.reg.Partition(p.name)
	if !ok {
		p.f.unregistered(w, r, next, p.name)
		return
	}
	k, ok := p.key(r)
	if !ok || k == "" {
		p.f.log.Debug("holder proxy: no partition key", "partition", p.name, "path", r.URL.Path)
		http.Error(w, "missing partition key for "+p.name, http.StatusBadRequest)
		return
	}
	var t lease.Target
	if p.scoped {
		t = part.ResolveScoped(p.scope, k)
	} else {
		t = part.Resolve(k)
	}
	if !t.IsHeld {
		// A closed partition lease leaves the registry but keeps a frozen
		// snapshot in the partition set.
		if l, ok := p.reg.Lease(t.Role); !ok || l != part.Lease(t.Index) {
			p.f.unavailable(w, r, t.Role, "the lease was closed on this instance")
			return
		}
	}
	p.f.dispatch(w, r, next, t.Role, t.IsHeld, t.HolderAddress)
}

// forwarder holds what the role and partition forms share: the decision
// after the lease is known, and the reverse proxy.
type forwarder struct {
	cfg *resolved
	log *slog.Logger
	rp  *httputil.ReverseProxy
}

// routeKey carries the chosen holder from dispatch to Rewrite and
// ErrorHandler, so one ReverseProxy serves every holder.
type routeKey struct{}

type route struct {
	target *url.URL
	role   string
}

func newForwarder(opts Config, prefixes []string) (*forwarder, error) {
	cfg, err := opts.resolve(prefixes)
	if err != nil {
		return nil, err
	}
	f := &forwarder{cfg: cfg, log: cfg.log}
	f.rp = &httputil.ReverseProxy{
		Rewrite:       f.rewrite,
		Transport:     cfg.transport,
		FlushInterval: -1, // relay every write at once: SSE and other streams
		ErrorHandler:  f.proxyError,
		ErrorLog:      slog.NewLogLogger(cfg.log.Handler(), slog.LevelWarn),
	}
	return f, nil
}

// startupUnregistered logs, when a proxy is built, that what it routes by
// is not registered: loudly unless the pass-through was asked for, since a
// misspelled name would otherwise go unnoticed until requests fail.
func (f *forwarder) startupUnregistered(kind, name string) {
	if f.cfg.passThrough {
		f.log.Warn("holder proxy: the "+kind+" is not registered; with PassThroughUnregistered its requests run locally "+
			"on this instance until it is (meant for a single instance without a lease store)", kind, name)
		return
	}
	f.log.Error("holder proxy: the "+kind+" is not registered in the registry; its requests are answered 503 until it is. "+
		"Is the name misspelled? A single instance without a lease store sets Config.PassThroughUnregistered", kind, name)
}

// unregistered handles a covered request while the role or partition set
// is not registered.
func (f *forwarder) unregistered(w http.ResponseWriter, r *http.Request, next http.Handler, name string) {
	if f.cfg.passThrough {
		next.ServeHTTP(w, r)
		return
	}
	f.unavailable(w, r, name, "it is not registered on this instance")
}

// dispatch runs the request locally, forwards it, or answers 503.
func (f *forwarder) dispatch(w http.ResponseWriter, r *http.Request, next http.Handler, role string, held bool, addr string) {
	if held {
		next.ServeHTTP(w, r)
		return
	}
	if _, forwarded := r.Header[LoopGuardHeader]; forwarded {
		f.unavailable(w, r, role, "a forwarded request reached an instance that does not hold the lease (loop guard)",
			"forwarded_by", r.Header.Get(LoopGuardHeader))
		return
	}
	if addr == "" {
		f.unavailable(w, r, role, "the holder is unknown")
		return
	}
	target, err := parseAddress(addr, false)
	if err != nil {
		f.unavailable(w, r, role, "the holder's address is invalid", "err", err)
		return
	}
	if f.cfg.self != "" && addressKey(target) == f.cfg.self {
		f.unavailable(w, r, role, "the holder snapshot names this instance, which does not hold the lease (failover in progress)")
		return
	}
	if err := f.cfg.peers.check(target); err != nil {
		f.refusePeer(w, r, role, target, err)
		return
	}
	f.log.Debug("holder proxy: forwarding", "role", role, "holder", target.String(), "path", r.URL.Path)
	ctx := context.WithValue(r.Context(), routeKey{}, &route{target: target, role: role})
	f.rp.ServeHTTP(w, r.WithContext(ctx))
}

// rewrite makes the outbound request: to the holder, with the same path and
// query, hop-by-hop headers already stripped by ReverseProxy (which also
// removed the inbound Forwarded and X-Forwarded-* headers), the loop guard
// set and the X-Forwarded-* headers describing the original request.
func (f *forwarder) rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(routeKey{}).(*route)
	pr.SetURL(rt.target)
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery // as received: the holder parses it, not us
	// This instance is one more hop: append it to the inbound chain.
	if prior := pr.In.Header.Values("X-Forwarded-For"); len(prior) > 0 {
		pr.Out.Header["X-Forwarded-For"] = slices.Clone(prior)
	}
	pr.SetXForwarded()
	if f.cfg.trustFwd {
		// An ingress in front of every instance set these, and knows the
		// client's host and scheme better than this hop does.
		for _, h := range []string{"X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded"} {
			if v := pr.In.Header.Values(h); len(v) > 0 {
				pr.Out.Header[h] = slices.Clone(v)
			}
		}
	}
	if f.cfg.strip {
		pr.Out.Header.Del("Authorization")
		pr.Out.Header.Del("Cookie")
	}
	pr.Out.Header.Set(LoopGuardHeader, f.cfg.guard)
}

// proxyError answers a failure before the holder's response started.
func (f *forwarder) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	rt, _ := r.Context().Value(routeKey{}).(*route)
	role, holder := "", ""
	if rt != nil {
		role, holder = rt.role, rt.target.String()
	}
	if rt != nil && errors.Is(err, errNotPeer) {
		// A host name in Peers resolved to an address the policy refuses.
		f.refusePeer(w, r, role, rt.target, err)
		return
	}
	if r.Context().Err() != nil {
		// The client went away; nobody reads the answer.
		f.log.Debug("holder proxy: client gone while forwarding", "role", role, "holder", holder, "err", err)
	}
	f.unavailable(w, r, role, "the holder is unreachable", "holder", holder, "err", err)
}

// refusePeer answers 503 for a holder address outside Config.Peers. It is
// logged as an error: either the peer list misses an instance, or someone
// wrote a lease row to receive the clients' requests.
func (f *forwarder) refusePeer(w http.ResponseWriter, r *http.Request, role string, target *url.URL, err error) {
	f.log.Error("holder proxy: the holder's address is not an allowed peer; nothing was forwarded",
		"role", role, "holder", target.String(), "path", r.URL.Path, "err", err)
	f.answer503(w, role, "the holder's address is not an allowed peer")
}

// unavailable answers 503 with Retry-After. It never retries: see the
// package documentation.
func (f *forwarder) unavailable(w http.ResponseWriter, r *http.Request, role, reason string, attrs ...any) {
	if r.Context().Err() == nil {
		f.log.Warn("holder proxy: "+reason, append([]any{"role", role, "path", r.URL.Path}, attrs...)...)
	}
	f.answer503(w, role, reason)
}

func (f *forwarder) answer503(w http.ResponseWriter, role, reason string) {
	h := w.Header()
	h.Set("Retry-After", f.cfg.retryAfter)
	h.Set("Cache-Control", "no-store")
	http.Error(w, "role "+role+": "+reason+"; retry later", http.StatusServiceUnavailable)
}
