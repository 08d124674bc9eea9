package holder

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// ErrNoIPv4Address is returned by InstanceAddress for a wildcard listen
// address on a machine with no up, non-loopback IPv4 address. Pass an
// explicit address then.
var ErrNoIPv4Address = errors.New("baton/holder: no up, non-loopback IPv4 address to advertise")

// InstanceAddress is the address to advertise as lease.Config.Address: where
// other instances reach this one.
//
// A non-empty explicit address wins and is returned as is, after checking it
// is an absolute http or https URL with a host and no path, query or
// fragment ("https://app-03.internal:8443"). Use it behind NAT or a proxy, or
// when instances talk TLS to each other.
//
// Otherwise listenAddr is a host:port as given to net.Listen (or, better,
// the listener's Addr().String(), which has the real port). A wildcard host
// (":8080", "0.0.0.0:8080", "[::]:8080") is replaced by the first up,
// non-loopback, non-link-local IPv4 address of the machine's interfaces; any
// other host is kept. The result is "http://host:port". The port must be
// numeric and not 0.
func InstanceAddress(listenAddr, explicit string) (string, error) {
	if explicit != "" {
		if _, err := parseAddress(explicit, true); err != nil {
			return "", fmt.Errorf("baton/holder: explicit address: %w", err)
		}
		return explicit, nil
	}
	host, port, err := net.SplitHostPort(listenAddr)
	if err != nil {
		return "", fmt.Errorf("baton/holder: listen address %q: %w", listenAddr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("baton/holder: listen address %q: the port must be a number from 1 to 65535 "+
			"(for \":0\", pass the listener's Addr().String())", listenAddr)
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		// A URL writes an IPv6 zone separator as "%25".
		return "http://" + net.JoinHostPort(strings.Replace(host, "%", "%25", 1), port), nil
	}
	ip, err := firstIPv4()
	if err != nil {
		return "", fmt.Errorf("baton/holder: listen address %q: %w", listenAddr, err)
	}
	return "http://" + net.JoinHostPort(ip.String(), port), nil
}

// netInterface is what firstIPv4 needs to know about one interface.
type netInterface struct {
	name     string
	up       bool
	loopback bool
	addrs    []net.Addr
}

// interfaces lists the machine's interfaces; tests replace it.
var interfaces = func() ([]netInterface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	out := make([]netInterface, 0, len(ifs))
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue // the interface went away meanwhile
		}
		out = append(out, netInterface{
			name:     ifc.Name,
			up:       ifc.Flags&net.FlagUp != 0,
			loopback: ifc.Flags&net.FlagLoopback != 0,
			addrs:    addrs,
		})
	}
	return out, nil
}

// firstIPv4 is the first IPv4 address, in interface order, that another
// machine could use: on an up, non-loopback interface, and neither loopback,
// link-local nor unspecified itself.
func firstIPv4() (net.IP, error) {
	ifs, err := interfaces()
	if err != nil {
		return nil, fmt.Errorf("%w: listing interfaces: %v", ErrNoIPv4Address, err)
	}
	for _, ifc := range ifs {
		if !ifc.up || ifc.loopback {
			continue
		}
		for _, a := range ifc.addrs {
			var ip net.IP
			switch a := a.(type) {
			case *net.IPNet:
				ip = a.IP
			case *net.IPAddr:
				ip = a.IP
			}
			ip4 := ip.To4()
			if ip4 == nil || ip4.IsLoopback() || ip4.IsLinkLocalUnicast() || ip4.IsUnspecified() {
				continue
			}
			return ip4, nil
		}
	}
	return nil, ErrNoIPv4Address
}

// parseAddress parses a holder address: "http://host:port",
// "https://host:port", or, unless requireScheme, "host:port" meaning http.
// It returns a URL holding only the scheme and host.
func parseAddress(raw string, requireScheme bool) (*url.URL, error) {
	s := raw
	if !strings.Contains(s, "://") {
		if requireScheme {
			return nil, fmt.Errorf("%q is not an absolute http or https URL", raw)
		}
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", raw, err)
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return nil, fmt.Errorf("%q: the scheme must be http or https", raw)
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%q has no host", raw)
	case u.User != nil:
		return nil, fmt.Errorf("%q: user information is not allowed", raw)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.ForceQuery, u.Fragment != "":
		return nil, fmt.Errorf("%q: only scheme, host and port are allowed (no path, query or fragment)", raw)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%q: the port must be a number from 1 to 65535", raw)
		}
	}
	return &url.URL{Scheme: scheme, Host: u.Host}, nil
}

// addressKey is a comparable form of a parsed address: lower-case host with
// the scheme's default port made explicit.
func addressKey(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}
