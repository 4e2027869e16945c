package slidelimit_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

func TestParseTrustedProxies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		list []string
		want []string // nil for a nil result
	}{
		{"none", nil, nil},
		{"only empty entries", []string{"", " ", "\t"}, nil},
		{"network", []string{"10.0.0.0/8"}, []string{"10.0.0.0/8"}},
		{"surrounding spaces", []string{" 10.0.0.0/8 "}, []string{"10.0.0.0/8"}},
		{"single IPv4 address", []string{"192.0.2.7"}, []string{"192.0.2.7/32"}},
		{"single IPv6 address", []string{"2001:db8::7"}, []string{"2001:db8::7/128"}},
		{"IPv6 network", []string{"2001:db8::/32"}, []string{"2001:db8::/32"}},
		{"host bits cleared", []string{"10.1.2.3/16"}, []string{"10.1.0.0/16"}},
		{"IPv4-mapped address", []string{"::ffff:192.0.2.7"}, []string{"192.0.2.7/32"}},
		{"IPv4-mapped network", []string{"::ffff:10.0.0.0/104"}, []string{"10.0.0.0/8"}},
		{"zone dropped", []string{"fe80::1%eth0"}, []string{"fe80::1/128"}},
		{"several, empty ones ignored", []string{"10.0.0.0/8", "", "192.0.2.7", " 2001:db8::/32"},
			[]string{"10.0.0.0/8", "192.0.2.7/32", "2001:db8::/32"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := slidelimit.ParseTrustedProxies(tt.list...)
			if err != nil {
				t.Fatalf("ParseTrustedProxies(%q) error = %v, want nil", tt.list, err)
			}
			if tt.want == nil {
				if got != nil {
					t.Errorf("ParseTrustedProxies(%q) = %v, want nil", tt.list, got)
				}
				return
			}
			var gotS []string
			for _, p := range got {
				gotS = append(gotS, p.String())
			}
			if !slices.Equal(gotS, tt.want) {
				t.Errorf("ParseTrustedProxies(%q) = %q, want %q", tt.list, gotS, tt.want)
			}
		})
	}
}

func TestParseTrustedProxiesErrors(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"10.0.0.0/33", "proxy.example", "10.0.0", "10.0.0.0/", "fe80::/64%eth0"} {
		t.Run(bad, func(t *testing.T) {
			got, err := slidelimit.ParseTrustedProxies("10.0.0.0/8", bad)
			if !errors.Is(err, slidelimit.ErrInvalidOption) || got != nil {
				t.Errorf("ParseTrustedProxies(%q) = %v, %v, want nil and an error wrapping ErrInvalidOption", bad, got, err)
			}
		})
	}
}

func TestTrustedProxiesContains(t *testing.T) {
	t.Parallel()
	trusted := slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	tests := []struct {
		proxies slidelimit.TrustedProxies
		addr    netip.Addr
		want    bool
	}{
		{trusted, netip.MustParseAddr("10.1.2.3"), true},
		{trusted, netip.MustParseAddr("11.0.0.1"), false},
		{trusted, netip.MustParseAddr("::ffff:10.1.2.3"), true},
		{trusted, netip.MustParseAddr("2001:db8:ffff::1"), true},
		{trusted, netip.MustParseAddr("2001:db8:ffff::1%eth0"), true},
		{trusted, netip.MustParseAddr("2001:db8:1::1"), false},
		{trusted, netip.Addr{}, false},
		{nil, netip.MustParseAddr("10.1.2.3"), false},
	}
	for _, tt := range tests {
		if got := tt.proxies.Contains(tt.addr); got != tt.want {
			t.Errorf("%v.Contains(%v) = %v, want %v", tt.proxies, tt.addr, got, tt.want)
		}
	}
}

func TestTrustedProxiesClientAddr(t *testing.T) {
	t.Parallel()
	trusted := slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	tests := []struct {
		name      string
		proxies   slidelimit.TrustedProxies
		peer      string
		forwarded []string
		want      string
	}{
		{"no proxy trusted", nil, "203.0.113.9", []string{"198.51.100.1"}, "203.0.113.9"},
		{"untrusted peer", trusted, "203.0.113.9", []string{"198.51.100.1"}, "203.0.113.9"},
		{"invalid peer", trusted, "", []string{"198.51.100.1"}, "invalid IP"},
		{"trusted peer, nothing forwarded", trusted, "10.0.0.1", nil, "10.0.0.1"},
		{"trusted peer, empty value", trusted, "10.0.0.1", []string{""}, "10.0.0.1"},
		{"one hop", trusted, "10.0.0.1", []string{"198.51.100.1"}, "198.51.100.1"},
		{"right-most untrusted hop", trusted, "10.0.0.1", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"trusted hops skipped", trusted, "10.0.0.1", []string{"1.2.3.4, 198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"all hops trusted", trusted, "10.0.0.1", []string{"10.0.0.3,10.0.0.2"}, "10.0.0.3"},
		{"several values", trusted, "10.0.0.1", []string{"1.2.3.4", "198.51.100.1, 10.0.0.2"}, "198.51.100.1"},
		{"walk continues into earlier values", trusted, "10.0.0.1", []string{"198.51.100.1", "10.0.0.2"}, "198.51.100.1"},
		{"hop with port", trusted, "10.0.0.1", []string{"198.51.100.1:5555"}, "198.51.100.1"},
		{"IPv6 hop with port", trusted, "2001:db8:ffff::1", []string{"[2001:db8:1::7]:80"}, "2001:db8:1::7"},
		{"IPv6 hop", trusted, "10.0.0.1", []string{"2001:db8:1::7"}, "2001:db8:1::7"},
		{"IPv4-mapped hop", trusted, "10.0.0.1", []string{"::ffff:198.51.100.1"}, "198.51.100.1"},
		{"IPv4-mapped trusted hop", trusted, "10.0.0.1", []string{"198.51.100.1, ::ffff:10.0.0.2"}, "198.51.100.1"},
		{"IPv4-mapped trusted peer", trusted, "::ffff:10.0.0.1", []string{"198.51.100.1"}, "198.51.100.1"},
		{"IPv4-mapped untrusted peer unmapped", trusted, "::ffff:203.0.113.9", nil, "203.0.113.9"},
		{"garbage left of client", trusted, "10.0.0.1", []string{"unknown, 198.51.100.1"}, "198.51.100.1"},
		{"garbage from a trusted proxy", trusted, "10.0.0.1", []string{"198.51.100.1, unknown, 10.0.0.2"}, "10.0.0.2"},
		{"garbage right of every hop", trusted, "10.0.0.1", []string{"198.51.100.1, unknown"}, "10.0.0.1"},
		{"empty hops skipped", trusted, "10.0.0.1", []string{"198.51.100.1, ,", " "}, "198.51.100.1"},
		{"spaces around hops", trusted, "10.0.0.1", []string{" 198.51.100.1 ,  10.0.0.2 "}, "198.51.100.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var peer netip.Addr
			if tt.peer != "" {
				peer = netip.MustParseAddr(tt.peer)
			}
			if got := tt.proxies.ClientAddr(peer, tt.forwarded).String(); got != tt.want {
				t.Errorf("ClientAddr(%s, %q) = %s, want %s", tt.peer, tt.forwarded, got, tt.want)
			}
		})
	}
}

func TestPeerAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want string // "" for no address
	}{
		{"203.0.113.9", "203.0.113.9"},
		{"203.0.113.9:4711", "203.0.113.9"},
		{" 203.0.113.9 ", "203.0.113.9"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"[fe80::1%eth0]:443", "fe80::1%eth0"},
		{"::ffff:203.0.113.9", "203.0.113.9"},
		{"[::ffff:203.0.113.9]:443", "203.0.113.9"},
		{"@", ""},
		{"/run/app.sock", ""},
		{"", ""},
		{"unknown", ""},
		{"example.com:443", ""},
		{"203.0.113.9:port", ""},
	}
	for _, tt := range tests {
		addr, ok := slidelimit.PeerAddr(tt.in)
		got := ""
		if ok {
			got = addr.String()
		}
		if got != tt.want || ok != (tt.want != "") {
			t.Errorf("PeerAddr(%q) = %s, %v, want %q", tt.in, addr, ok, tt.want)
		}
	}
}

// Behind a load balancer at 10.0.0.0/8, believe its X-Forwarded-For, and
// only its.
func ExampleTrustedProxies_ClientAddr() {
	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		panic(err) // not a network or an address
	}
	forwarded := []string{"192.0.2.1, 198.51.100.7"} // the client forged 192.0.2.1

	lb := netip.MustParseAddr("10.1.2.3")
	fmt.Println(proxies.ClientAddr(lb, forwarded))
	client := netip.MustParseAddr("203.0.113.9")
	fmt.Println(proxies.ClientAddr(client, forwarded))
	// Output:
	// 198.51.100.7
	// 203.0.113.9
}

// Read the trusted proxies from the environment, as the example servers do.
func ExampleParseTrustedProxies() {
	env := "10.0.0.0/8, 192.0.2.7,2001:db8::/32" // os.Getenv("TRUSTED_PROXIES")
	proxies, err := slidelimit.ParseTrustedProxies(strings.Split(env, ",")...)
	fmt.Println(proxies, err)

	_, err = slidelimit.ParseTrustedProxies("lb.internal") // host names are not resolved
	fmt.Println(errors.Is(err, slidelimit.ErrInvalidOption))
	// Output:
	// [10.0.0.0/8 192.0.2.7/32 2001:db8::/32] <nil>
	// true
}
