package holder

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"syscall"

	"github.com/baton-go/baton/core/config"
)

// errNotPeer marks a holder address, or an address it resolved to, that the
// peer policy refuses.
var errNotPeer = errors.New("not an allowed peer")

// Address ranges that no entry of Config.Peers covers by accident: an
// entry allows an address in them only if the entry lies inside the range
// itself.
var (
	loopbackV4  = netip.MustParsePrefix("127.0.0.0/8")
	loopbackV6  = netip.MustParsePrefix("::1/128")
	linkLocalV4 = netip.MustParsePrefix("169.254.0.0/16")
	linkLocalV6 = netip.MustParsePrefix("fe80::/10")
)

// peerPolicy is Config.Peers and Config.AllowPeer, parsed. A lease row is
// written by whoever can write the lease table; the policy is what keeps a
// row naming someone else's server from receiving the clients' requests.
type peerPolicy struct {
	prefixes []netip.Prefix
	// special are the prefixes that lie inside a loopback or link-local
	// range: the only ones that allow such an address.
	special  []netip.Prefix
	names    map[string]bool
	suffixes []string // each starting with "."
	allow    func(*url.URL) bool
}

func newPeerPolicy(entries []string, allow func(*url.URL) bool) (*peerPolicy, error) {
	if len(entries) == 0 && allow == nil {
		return nil, invalid("Config.Peers", "is empty and Config.AllowPeer is nil; the proxy would forward "+
			"clients' requests to whatever address a lease row names: list your instances' networks or host names, "+
			"e.g. Peers: []string{\"10.0.0.0/8\"}")
	}
	p := &peerPolicy{names: map[string]bool{}, allow: allow}
	for i, e := range entries {
		if pre, ok := parsePeerPrefix(e); ok {
			p.prefixes = append(p.prefixes, pre)
			if inside(pre, loopbackV4) || inside(pre, loopbackV6) || inside(pre, linkLocalV4) || inside(pre, linkLocalV6) {
				p.special = append(p.special, pre)
			}
			continue
		}
		name := strings.ToLower(strings.TrimSuffix(e, "."))
		if suffix, ok := strings.CutPrefix(name, "."); ok {
			if !validHostName(suffix) {
				return nil, config.Wrap(ErrInvalidConfig, fmt.Sprintf("Config.Peers[%d]", i), fmt.Errorf("%q is not a domain suffix such as \".pods.internal\"", e))
			}
			p.suffixes = append(p.suffixes, name)
			continue
		}
		if !validHostName(name) {
			return nil, config.Wrap(ErrInvalidConfig, fmt.Sprintf("Config.Peers[%d]", i), fmt.Errorf("%q is not an IP address, a CIDR prefix, a host name or a "+
				"\".domain\" suffix (no scheme, port or path)", e))
		}
		p.names[name] = true
	}
	return p, nil
}

// parsePeerPrefix reads an IP address or a CIDR prefix, without a zone.
func parsePeerPrefix(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		pre, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		if pre.Addr().Is4In6() {
			pre = netip.PrefixFrom(pre.Addr().Unmap(), pre.Bits()-96)
		}
		return pre.Masked(), pre.IsValid()
	}
	ip, err := netip.ParseAddr(s)
	if err != nil || ip.Zone() != "" {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	return netip.PrefixFrom(ip, ip.BitLen()), true
}

// inside reports whether every address of p is in r.
func inside(p, r netip.Prefix) bool {
	return p.Bits() >= r.Bits() && r.Contains(p.Addr())
}

// validHostName accepts letters, digits, '-', '_' and dots between labels.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// checkAddress judges an address the proxy is about to connect to, however
// it was found (an IP in the lease row, or a name resolved at dial time):
// never unspecified or multicast (0.0.0.0 reaches the local machine), and
// loopback or link-local only when Config.Peers names that range.
func (p *peerPolicy) checkAddress(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	switch {
	case !ip.IsValid():
		return fmt.Errorf("%w: no IP address", errNotPeer)
	case ip.IsUnspecified() || ip.IsMulticast():
		return fmt.Errorf("%w: %s is an unspecified or multicast address", errNotPeer, ip)
	case ip.IsLoopback() || ip.IsLinkLocalUnicast():
		for _, pre := range p.special {
			if pre.Contains(ip) {
				return nil
			}
		}
		return fmt.Errorf("%w: %s is a loopback or link-local address, which Config.Peers must name explicitly "+
			"(e.g. \"127.0.0.1\")", errNotPeer, ip)
	}
	return nil
}

// check judges a holder address before a request is forwarded to it.
func (p *peerPolicy) check(target *url.URL) error {
	host := target.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := p.checkAddress(ip); err != nil {
			return err
		}
		ip = ip.Unmap().WithZone("")
		for _, pre := range p.prefixes {
			if pre.Contains(ip) {
				return nil
			}
		}
	} else {
		name := strings.ToLower(strings.TrimSuffix(host, "."))
		if p.names[name] {
			return nil
		}
		for _, s := range p.suffixes {
			if strings.HasSuffix(name, s) {
				return nil
			}
		}
	}
	if p.allow != nil && p.allow(&url.URL{Scheme: target.Scheme, Host: target.Host}) {
		return nil
	}
	return fmt.Errorf("%w: %s is not in Config.Peers", errNotPeer, target.Host)
}

// dialControl checks every address the default transport connects to,
// after name resolution: a host name allowed by Peers still may not lead to
// a loopback or link-local address the policy does not name (such as a
// cloud metadata service).
func (p *peerPolicy) dialControl(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: dialing %q: %v", errNotPeer, address, err)
	}
	return p.checkAddress(ap.Addr())
}
