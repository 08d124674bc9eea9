package holder

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/baton-go/baton/core/config"
)

// Defaults for Config.
const (
	// DefaultRetryAfter is the Retry-After of a 503: long enough for a
	// heartbeat to refresh the holder snapshot, short enough that a client
	// retrying after it usually lands after a failover settled.
	DefaultRetryAfter = time.Second
	// DefaultDialTimeout bounds connecting to the holder. Instances of one
	// service sit on one network; a holder that does not accept a
	// connection within it is treated as gone.
	DefaultDialTimeout = 2 * time.Second
	// DefaultResponseHeaderTimeout bounds the wait for the holder's
	// response headers (streams count from their first headers, not their
	// end). Handlers that work longer before answering need a larger value.
	DefaultResponseHeaderTimeout = 10 * time.Second
)

// LoopGuardHeader marks a forwarded request. Its value is the forwarding
// instance's Config.Self (or its host name when Self is empty), for
// diagnostics; its presence is what counts: a request carrying it is never
// forwarded again and never runs on a non-holder.
const LoopGuardHeader = "Baton-Forwarded-By"

// ErrInvalidConfig is returned, wrapped with the field and the reason, by
// the constructors for arguments or Config they cannot run with.
var ErrInvalidConfig = errors.New("baton/holder: invalid configuration")

// Config tunes the proxy. Peers (or AllowPeer) is required; everything
// else has a default.
type Config struct {
	// Peers lists where requests may be forwarded. A holder address comes
	// from the lease table, which anyone with write access to it can set;
	// before every forward the address is checked against this list, and a
	// request for any other address is answered 503 and never sent.
	//
	// An entry is an IP address ("10.1.2.3", "fd00::5"), a CIDR prefix
	// ("10.0.0.0/8"), a host name ("app-03.internal", any case) or a domain
	// suffix starting with a dot (".pods.internal" allows
	// "a.pods.internal"). Loopback and link-local addresses are allowed
	// only by an entry inside those ranges ("127.0.0.1", "::1",
	// "169.254.0.0/16", "fe80::/10"; "0.0.0.0/0" does not count), and
	// unspecified and multicast addresses never. With the default
	// Transport the same rule is applied again to the address a host name
	// resolves to, when the connection is made.
	Peers []string
	// AllowPeer, when set, is asked about a holder address (scheme and
	// host only) that Peers does not allow; true allows it. It cannot allow
	// a loopback or link-local address that Peers does not name.
	AllowPeer func(holder *url.URL) bool
	// StripCredentials removes Authorization and Cookie from forwarded
	// requests. Then the holder cannot authenticate the client itself: use
	// it when the forwarding instance authenticates, and passes on what the
	// holder needs in a form the holder accepts from peers only.
	StripCredentials bool
	// TrustForwardedHeaders relays the client's X-Forwarded-Host,
	// X-Forwarded-Proto and Forwarded headers as received. Set it only when
	// an ingress in front of every instance overwrites them; otherwise any
	// client could choose what the holder believes about the original
	// request. By default the proxy sets X-Forwarded-Host and
	// X-Forwarded-Proto from the request it received and drops Forwarded.
	TrustForwardedHeaders bool

	// PassThroughUnregistered runs covered requests locally while the role
	// (or partition set) is not registered in the registry: for a
	// single-instance deployment without a lease store. Without it such a
	// request is answered 503, so that a misspelled role name cannot make
	// every instance run the role's handlers.
	PassThroughUnregistered bool

	// Transport sends forwarded requests. nil means a clone of
	// http.DefaultTransport with DialTimeout and ResponseHeaderTimeout
	// applied, no HTTP(S)_PROXY from the environment (instances talk to
	// each other directly), and the Peers rule checked on every address it
	// connects to. When set, configure its timeouts there: DialTimeout and
	// ResponseHeaderTimeout must then be zero. A custom Transport resolves
	// host names itself: Peers then judges names by name only.
	Transport http.RoundTripper
	// DialTimeout bounds connecting to the holder (default
	// DefaultDialTimeout). Only for the default Transport.
	DialTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait, after the request was sent,
	// for the holder's response headers (default
	// DefaultResponseHeaderTimeout). Only for the default Transport.
	ResponseHeaderTimeout time.Duration
	// RetryAfter is sent with every 503, rounded up to whole seconds
	// (default DefaultRetryAfter).
	RetryAfter time.Duration
	// Self is this instance's advertised address, the lease.Config.Address
	// given to its manager. With it, a snapshot that still names this
	// instance while it does not hold the lease (a failover race) is
	// answered 503 at once; without it, the request makes one hop to
	// ourselves and the loop guard answers 503 there.
	Self string
	// Logger receives forwarding decisions and holder errors. nil discards.
	Logger *slog.Logger
}

func invalid(field, format string, args ...any) error {
	return config.Invalid(ErrInvalidConfig, field, format, args...)
}

// resolved is Config after validation and defaults.
type resolved struct {
	transport   http.RoundTripper
	retryAfter  string // header value, whole seconds
	self        string // addressKey of Config.Self; "" when unknown
	guard       string // LoopGuardHeader value
	log         *slog.Logger
	prefixes    []string
	peers       *peerPolicy
	strip       bool // Config.StripCredentials
	trustFwd    bool // Config.TrustForwardedHeaders
	passThrough bool // Config.PassThroughUnregistered
}

// withDefaults returns a copy of o with its zero fields set to the
// defaults. The timeouts have defaults only for the default Transport.
func (o Config) withDefaults() Config {
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.Transport == nil {
		if o.DialTimeout == 0 {
			o.DialTimeout = DefaultDialTimeout
		}
		if o.ResponseHeaderTimeout == 0 {
			o.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// validate checks options that have their defaults. Peers and Self are
// checked where they are parsed, by resolve.
func (o Config) validate() error {
	switch {
	case o.RetryAfter < 0:
		return invalid("Config.RetryAfter", "is %v; it must not be negative", o.RetryAfter)
	case o.DialTimeout < 0:
		return invalid("Config.DialTimeout", "is %v; it must not be negative", o.DialTimeout)
	case o.ResponseHeaderTimeout < 0:
		return invalid("Config.ResponseHeaderTimeout", "is %v; it must not be negative", o.ResponseHeaderTimeout)
	case o.Transport != nil && (o.DialTimeout != 0 || o.ResponseHeaderTimeout != 0):
		return invalid("Config.DialTimeout", "and Config.ResponseHeaderTimeout apply to the default transport only; "+
			"set the timeouts on Config.Transport instead")
	}
	return nil
}

// resolve validates o and the prefixes and parses them for the proxy.
func (o Config) resolve(prefixes []string) (*resolved, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	ps, err := checkPrefixes(prefixes)
	if err != nil {
		return nil, err
	}
	peers, err := newPeerPolicy(o.Peers, o.AllowPeer)
	if err != nil {
		return nil, err
	}
	r := &resolved{prefixes: ps, log: o.Logger, peers: peers,
		strip: o.StripCredentials, trustFwd: o.TrustForwardedHeaders, passThrough: o.PassThroughUnregistered}
	if o.Self != "" {
		u, err := parseAddress(o.Self, false)
		if err != nil {
			return nil, config.Wrap(ErrInvalidConfig, "Config.Self", err)
		}
		r.self = addressKey(u)
		r.guard = o.Self
	} else {
		r.guard, _ = os.Hostname()
		if r.guard == "" || strings.ContainsAny(r.guard, "\r\n") {
			r.guard = "unknown"
		}
	}
	r.retryAfter = strconv.FormatInt(int64((o.RetryAfter+time.Second-1)/time.Second), 10)
	r.transport = o.Transport
	if r.transport == nil {
		r.transport = defaultTransport(o.DialTimeout, o.ResponseHeaderTimeout, peers)
	}
	return r, nil
}

func defaultTransport(dial, header time.Duration, peers *peerPolicy) http.RoundTripper {
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	// Instances talk to each other directly: an HTTP(S)_PROXY meant for
	// outbound traffic must not sit between them.
	t.Proxy = nil
	d := &net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second, ControlContext: peers.dialControl}
	t.DialContext = d.DialContext
	t.TLSHandshakeTimeout = dial
	t.ResponseHeaderTimeout = header
	return t
}

// checkPrefixes validates path prefixes and returns them without trailing
// slashes ("/" stays "/", meaning every path).
func checkPrefixes(prefixes []string) ([]string, error) {
	if len(prefixes) == 0 {
		return nil, invalid("prefixes", "are none; pass at least one path prefix such as \"/maintenance\"")
	}
	out := make([]string, 0, len(prefixes))
	for _, p := range prefixes {
		if !strings.HasPrefix(p, "/") {
			return nil, config.Wrap(ErrInvalidConfig, "prefixes", fmt.Errorf("%q does not start with \"/\"", p))
		}
		if p != "/" {
			p = strings.TrimSuffix(p, "/")
		}
		if path.Clean(p) != p || strings.ContainsAny(p, "?#") {
			return nil, config.Wrap(ErrInvalidConfig, "prefixes", fmt.Errorf("%q is not a clean path (no \"//\", \".\", \"..\", \"?\" or \"#\")", p))
		}
		out = append(out, p)
	}
	return out, nil
}

// covers reports whether the request path is under one of the prefixes. Both
// the path as sent and its cleaned form are checked, so that a router that
// cleans paths ("/x/../maintenance") cannot reach a covered handler locally.
func (r *resolved) covers(p string) bool {
	if r.match(p) {
		return true
	}
	if c := path.Clean("/" + p); c != p {
		return r.match(c)
	}
	return false
}

func (r *resolved) match(p string) bool {
	for _, pre := range r.prefixes {
		if pre == "/" {
			return true
		}
		if strings.HasPrefix(p, pre) && (len(p) == len(pre) || p[len(pre)] == '/') {
			return true
		}
	}
	return false
}
