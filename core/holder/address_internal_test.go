package holder

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func ipNet(s string) net.Addr {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	n.IP = ip
	return n
}

// withInterfaces replaces the interface list for one test.
func withInterfaces(t *testing.T, ifs []netInterface, err error) {
	t.Helper()
	old := interfaces
	interfaces = func() ([]netInterface, error) { return ifs, err }
	t.Cleanup(func() { interfaces = old })
}

func TestInstanceAddress_WildcardHostBecomesFirstUsableIPv4(t *testing.T) {
	withInterfaces(t, []netInterface{
		{name: "lo", up: true, loopback: true, addrs: []net.Addr{ipNet("127.0.0.1/8"), ipNet("::1/128")}},
		{name: "down0", up: false, addrs: []net.Addr{ipNet("10.9.9.9/24")}},
		{name: "eth0", up: true, addrs: []net.Addr{
			ipNet("fe80::1/64"),
			ipNet("169.254.10.1/16"), // link-local: not reachable from other hosts
			&net.IPAddr{IP: net.ParseIP("192.168.1.20")},
			ipNet("10.0.0.7/8"),
		}},
	}, nil)
	for _, listen := range []string{":8080", "0.0.0.0:8080", "[::]:8080"} {
		got, err := InstanceAddress(listen, "")
		if err != nil || got != "http://192.168.1.20:8080" {
			t.Errorf("InstanceAddress(%q) = %q, %v; want http://192.168.1.20:8080", listen, got, err)
		}
	}
}

func TestInstanceAddress_SpecificHostIsKept(t *testing.T) {
	withInterfaces(t, nil, errors.New("must not be consulted"))
	for listen, want := range map[string]string{
		"10.1.2.3:8080":        "http://10.1.2.3:8080",
		"127.0.0.1:9000":       "http://127.0.0.1:9000",
		"[2001:db8::1]:8080":   "http://[2001:db8::1]:8080",
		"app-03.internal:8080": "http://app-03.internal:8080",
	} {
		got, err := InstanceAddress(listen, "")
		if err != nil || got != want {
			t.Errorf("InstanceAddress(%q) = %q, %v; want %q", listen, got, err, want)
		}
		if _, err := parseAddress(got, true); err != nil {
			t.Errorf("the proxy would not accept %q: %v", got, err)
		}
	}
}

func TestInstanceAddress_ExplicitAddressWins(t *testing.T) {
	withInterfaces(t, nil, errors.New("must not be consulted"))
	for _, explicit := range []string{"https://app-03.internal:8443", "http://10.0.0.5:8080", "https://app-03.internal/"} {
		got, err := InstanceAddress("0.0.0.0:8080", explicit)
		if err != nil || got != explicit {
			t.Errorf("explicit %q: got %q, %v; want it as is", explicit, got, err)
		}
	}
}

func TestInstanceAddress_Errors(t *testing.T) {
	withInterfaces(t, []netInterface{
		{name: "lo", up: true, loopback: true, addrs: []net.Addr{ipNet("127.0.0.1/8")}},
		{name: "eth0", up: true, addrs: []net.Addr{ipNet("2001:db8::5/64")}},
	}, nil)
	for _, tc := range []struct{ listen, explicit, want string }{
		{"8080", "", "missing port"},
		{"10.0.0.1", "", "missing port"},
		{":0", "", "port must be a number"},
		{":http", "", "port must be a number"},
		{":70000", "", "port must be a number"},
		{":8080", "", "no up, non-loopback IPv4"},
		{":8080", "app-03.internal:8443", "not an absolute http or https URL"},
		{":8080", "ftp://app-03.internal", "scheme must be http or https"},
		{":8080", "https://", "no host"},
		{":8080", "https://user:pw@app-03.internal", "user information"},
		{":8080", "https://app-03.internal/base", "no path"},
		{":8080", "https://app-03.internal?x=1", "no path, query"},
		{":8080", "https://app-03.internal:0", "port must be a number"},
	} {
		got, err := InstanceAddress(tc.listen, tc.explicit)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("InstanceAddress(%q, %q) = %q, %v; want an error containing %q", tc.listen, tc.explicit, got, err, tc.want)
		}
	}
	if _, err := InstanceAddress(":8080", ""); !errors.Is(err, ErrNoIPv4Address) {
		t.Errorf("no IPv4: %v does not wrap ErrNoIPv4Address", err)
	}
	withInterfaces(t, nil, errors.New("netlink: permission denied"))
	if _, err := InstanceAddress(":8080", ""); !errors.Is(err, ErrNoIPv4Address) || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("interface listing failed: %v", err)
	}
}

func TestInstanceAddress_OnThisMachineIsNotLoopback(t *testing.T) {
	ip, err := firstIPv4()
	if err != nil {
		t.Skipf("this machine has no usable non-loopback IPv4 address: %v", err)
	}
	got, err := InstanceAddress("[::]:8080", "")
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ := net.SplitHostPort(strings.TrimPrefix(got, "http://"))
	if a := net.ParseIP(host); a == nil || a.To4() == nil || a.IsLoopback() || !a.Equal(ip) {
		t.Fatalf("InstanceAddress = %q; want a non-loopback IPv4 address", got)
	}
}

func TestParseAddress_AcceptedFormsCompareEqual(t *testing.T) {
	for _, pair := range [][2]string{
		{"10.0.0.5:8080", "http://10.0.0.5:8080"},
		{"HTTP://App-03.Internal", "http://app-03.internal:80"},
		{"https://app-03.internal/", "https://app-03.internal:443"},
		{"[::1]:8080", "http://[::1]:8080"},
	} {
		a, err := parseAddress(pair[0], false)
		if err != nil {
			t.Fatalf("%q: %v", pair[0], err)
		}
		b, err := parseAddress(pair[1], false)
		if err != nil {
			t.Fatalf("%q: %v", pair[1], err)
		}
		if addressKey(a) != addressKey(b) {
			t.Errorf("%q and %q differ: %s vs %s", pair[0], pair[1], addressKey(a), addressKey(b))
		}
	}
	if a, b := mustKey(t, "http://h:8080"), mustKey(t, "https://h:8080"); a == b {
		t.Errorf("schemes must differ: %s", a)
	}
}

func mustKey(t *testing.T, s string) string {
	u, err := parseAddress(s, false)
	if err != nil {
		t.Fatal(err)
	}
	return addressKey(u)
}
