// Package holder routes HTTP requests for a role to the instance that holds
// it. Some roles own live state or an ordered stream: every public instance
// accepts their routes, but only the holder of the role may execute them.
// RoleProxy and PartitionProxy are net/http middleware for that shape; the
// lease package decides who holds what, this package only routes.
//
// # Behaviour
//
// A request whose path is under one of the middleware's prefixes (whole path
// segments: "/maintenance" covers "/maintenance" and "/maintenance/x", not
// "/maintenancex") is handled as follows, judged per request:
//
//   - this instance holds the lease (Lease.IsHeld): the next handler runs
//     locally;
//   - otherwise the request is forwarded, at most one hop, to the holder's
//     advertised address (Lease.CurrentHolderAddress), and the holder's
//     response, streaming included, is relayed unbuffered;
//   - the lease (or partition set) is not registered in the Registry: 503,
//     or, with Config.PassThroughUnregistered (single-instance development
//     without a lease store), the next handler runs locally. A name that is
//     not registered when the middleware is built is logged at error level,
//     since it is often a misspelling that would otherwise run the role's
//     handlers everywhere. The lookup is made at request time, so a lease
//     registered after the middleware was built is honoured.
//
// Requests outside the prefixes always pass through untouched.
//
// # Failure semantics
//
// The proxy never retries and never queues. A request it cannot hand to the
// holder at once is answered 503 Service Unavailable with a Retry-After
// header (Config.RetryAfter, whole seconds, default DefaultRetryAfter), and
// the local handler does not run:
//
//   - unknown holder: the snapshot has no address (no holder yet, or the
//     holder advertised none);
//   - failover race: the snapshot names this instance (Config.Self) although
//     IsHeld is false, e.g. the lease just lapsed locally;
//   - unreachable holder: dial error, TLS error, no response headers within
//     Config.ResponseHeaderTimeout, or any other transport error before the
//     response started;
//   - loop guard: the request was already forwarded once (it carries
//     LoopGuardHeader) and this instance does not hold the lease either;
//   - closed lease: the lease was registered once and has since been closed
//     (e.g. during shutdown), so its holder snapshot is frozen.
//
// A dial error means the holder never saw the request. A timeout or error
// after the request was sent does not: the holder may have run it, as with
// any proxy. Once the holder's response has started, a failure aborts the
// client's connection (the client sees a truncated response, not a 503).
//
// Retrying is the client's decision because only the client knows whether
// the request is safe to repeat, and because a queue in the proxy would hold
// requests across a failover whose length is bounded only by the lease
// duration.
//
// The partition forms pick the lease with a key taken from the request
// (Partition.Resolve or Partition.ResolveScoped); a request without a key is
// answered 400 Bad Request and never forwarded.
//
// # Addresses
//
// A holder address is "http://host:port", "https://host:port" or "host:port"
// (meaning http). InstanceAddress turns a listen address into one, replacing
// a wildcard host with a non-loopback IPv4 address; an explicit address wins
// for NAT, proxies and TLS between nodes.
//
// # Peers
//
// The holder address comes from the lease table, and whoever can write that
// table chooses where clients' requests go. Every forward is therefore
// checked against Config.Peers (or Config.AllowPeer) first; an address
// outside it is answered 503, logged as an error, and sent nothing.
// Loopback and link-local addresses must be named explicitly, and the
// default transport checks the address a host name resolves to as well.
// Config.StripCredentials removes Authorization and Cookie from forwarded
// requests; TLS between instances (an https address and a Transport that
// verifies the peer) keeps them off the wire in clear.
//
// The client's X-Forwarded-Host, X-Forwarded-Proto and Forwarded headers
// are replaced by the proxy's own unless Config.TrustForwardedHeaders says
// an ingress in front of every instance set them.
//
// Install the middleware before authentication and routing, so that a
// non-holder never starts local work for a request it forwards. When the
// ingress can route to the holder directly, remove this proxy rather than
// layering both.
package holder
