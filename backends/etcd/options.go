package etcd

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-go/baton/core/config"
)

// Defaults shared by the client, the lease store and the lock provider.
const (
	// DefaultPrefix starts every key baton writes.
	DefaultPrefix = "baton/"
	// DefaultDialTimeout bounds how long NewClient waits for a first
	// connection.
	DefaultDialTimeout = 5 * time.Second
	// MaxPrefixLength bounds a key prefix, in bytes.
	MaxPrefixLength = 256
)

// ClientOptions say how to reach an etcd cluster. NewClient checks them.
type ClientOptions struct {
	// Endpoints lists the members, as host:port or http(s)://host:port.
	// Required. The client spreads its requests over them and moves on
	// when one fails, so list every member.
	Endpoints []string
	// TLS, when set, secures every connection; endpoints must then be
	// written host:port or https://host:port.
	TLS *tls.Config
	// Username and Password authenticate with etcd's own users; both or
	// neither.
	Username, Password string
	// DialTimeout bounds the first connection (default DefaultDialTimeout).
	DialTimeout time.Duration
}

// ErrInvalidClientOptions is returned (wrapped, naming the field and the
// reason) by NewClient for ClientOptions it cannot connect with.
var ErrInvalidClientOptions = errors.New("baton/etcd: invalid client options")

// withDefaults returns a copy of o with its zero fields set to the
// defaults.
func (o ClientOptions) withDefaults() ClientOptions {
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	return o
}

// validate checks options that have their defaults.
func (o ClientOptions) validate() error {
	bad := func(field, format string, args ...any) error {
		return config.Invalid(ErrInvalidClientOptions, "ClientOptions."+field, format, args...)
	}
	if len(o.Endpoints) == 0 {
		return bad("Endpoints", "is empty; list the cluster's members as host:port")
	}
	for i, ep := range o.Endpoints {
		if err := checkEndpoint(ep, o.TLS != nil); err != nil {
			return bad(fmt.Sprintf("Endpoints[%d]", i), "%q: %v", ep, err)
		}
	}
	switch {
	case o.Username == "" && o.Password != "":
		return bad("Password", "is set but Username is empty; give both or neither")
	case o.Username != "" && o.Password == "":
		return bad("Username", "%q has no Password; give both or neither", o.Username)
	case o.DialTimeout < 0:
		return bad("DialTimeout", "is %v; it must be positive", o.DialTimeout)
	}
	return nil
}

// checkEndpoint accepts host:port, http://host:port and, with TLS,
// https://host:port.
func checkEndpoint(ep string, withTLS bool) error {
	hostport := ep
	if scheme, rest, ok := strings.Cut(ep, "://"); ok {
		switch {
		case scheme == "https" && !withTLS:
			return errors.New("https needs ClientOptions.TLS")
		case scheme == "http" && withTLS:
			return errors.New("http with ClientOptions.TLS set; write https:// or host:port")
		case scheme != "http" && scheme != "https":
			return fmt.Errorf("scheme %q; use http, https or none", scheme)
		}
		u, err := url.Parse(ep)
		if err != nil {
			return err
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return errors.New("an endpoint is only a scheme, a host and a port")
		}
		hostport = strings.TrimSuffix(rest, "/")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("not host:port: %v", err)
	}
	if host == "" {
		return errors.New("the host is empty")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// NewClient checks opts and returns an etcd client for them, or an error
// naming the first option that is wrong. The caller closes the client,
// after the stores and providers that use it.
func NewClient(opts ClientOptions) (*clientv3.Client, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   opts.Endpoints,
		TLS:         opts.TLS,
		Username:    opts.Username,
		Password:    opts.Password,
		DialTimeout: opts.DialTimeout,
		Logger:      zap.NewNop(),
	})
}

// checkPrefix applies the default and the rules of a key prefix; field
// names the option in the error.
func checkPrefix(kind error, field, p string) error {
	switch {
	case len(p) > MaxPrefixLength:
		return config.Invalid(kind, field, "is %d bytes; at most %d", len(p), MaxPrefixLength)
	case !utf8.ValidString(p):
		return config.Invalid(kind, field, "%q is not valid UTF-8", p)
	case strings.ContainsRune(p, 0):
		return config.Invalid(kind, field, "%q contains a NUL byte", p)
	case !strings.HasSuffix(p, "/"):
		return config.Invalid(kind, field, "%q must end with '/', so that no other prefix's keys fall under it", p)
	}
	return nil
}
