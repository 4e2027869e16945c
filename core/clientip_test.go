package slidelimit_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// headerFunc returns the values of h by name, as adapters pass them.
func headerFunc(h http.Header) func(string) []string {
	return func(name string) []string { return h.Values(name) }
}

func TestClientIPAddr(t *testing.T) {
	t.Parallel()
	trusted := slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	xff, fwd, real := slidelimit.HeaderXForwardedFor, slidelimit.HeaderForwarded, slidelimit.HeaderXRealIP
	tests := []struct {
		name   string
		header string // ClientIP.Header
		peer   string
		h      http.Header
		want   string
	}{
		{"untrusted peer, XFF ignored", "", "203.0.113.9", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "203.0.113.9"},
		{"untrusted peer, Forwarded ignored", fwd, "203.0.113.9", http.Header{"Forwarded": {"for=198.51.100.1"}}, "203.0.113.9"},
		{"untrusted peer, X-Real-IP ignored", real, "203.0.113.9", http.Header{"X-Real-Ip": {"198.51.100.1"}}, "203.0.113.9"},
		{"default header is XFF", "", "10.0.0.1", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "198.51.100.1"},
		{"two XFF lines: the proxy's wins", xff, "10.0.0.1", http.Header{"X-Forwarded-For": {"198.51.100.66", "203.0.113.77"}}, "203.0.113.77"},
		{"XFF line split over trusted hops", xff, "10.0.0.1", http.Header{"X-Forwarded-For": {"1.1.1.1, 203.0.113.77", "10.0.0.3"}}, "203.0.113.77"},
		{"X-Real-IP not read unless configured", "", "10.0.0.1", http.Header{"X-Real-Ip": {"198.51.100.1"}}, "10.0.0.1"},
		{"Forwarded not read unless configured", "", "10.0.0.1", http.Header{"Forwarded": {"for=198.51.100.1"}}, "10.0.0.1"},
		{"XFF not read when Forwarded is configured", fwd, "10.0.0.1", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "10.0.0.1"},
		{"X-Real-IP", real, "10.0.0.1", http.Header{"X-Real-Ip": {"198.51.100.1"}}, "198.51.100.1"},
		{"X-Real-IP, last line", real, "10.0.0.1", http.Header{"X-Real-Ip": {"1.1.1.1", "198.51.100.1"}}, "198.51.100.1"},
		{"X-Real-IP list is garbage", real, "10.0.0.1", http.Header{"X-Real-Ip": {"1.1.1.1, 198.51.100.1"}}, "10.0.0.1"},
		{"X-Real-IP mapped", real, "10.0.0.1", http.Header{"X-Real-Ip": {"::ffff:198.51.100.9"}}, "198.51.100.9"},
		{"header name in any case", "x-real-ip", "10.0.0.1", http.Header{"X-Real-Ip": {"198.51.100.1"}}, "198.51.100.1"},
		{"Forwarded", fwd, "10.0.0.1", http.Header{"Forwarded": {"for=198.51.100.1"}}, "198.51.100.1"},
		{"Forwarded, right-most untrusted", fwd, "10.0.0.1", http.Header{"Forwarded": {"for=1.1.1.1, for=198.51.100.1;proto=https, for=10.0.0.2"}}, "198.51.100.1"},
		{"Forwarded, two lines", fwd, "10.0.0.1", http.Header{"Forwarded": {"for=1.1.1.1", "for=198.51.100.1"}}, "198.51.100.1"},
		{"Forwarded, quoted IPv4 with port", fwd, "10.0.0.1", http.Header{"Forwarded": {`for="198.51.100.1:4711"`}}, "198.51.100.1"},
		{"Forwarded, quoted IPv6", fwd, "10.0.0.1", http.Header{"Forwarded": {`For="[2001:db8:cafe::17]"`}}, "2001:db8:cafe::17"},
		{"Forwarded, quoted IPv6 with port", fwd, "10.0.0.1", http.Header{"Forwarded": {`for="[2001:db8:cafe::17]:4711"`}}, "2001:db8:cafe::17"},
		{"Forwarded, obfuscated port", fwd, "10.0.0.1", http.Header{"Forwarded": {`for="198.51.100.1:_abc"`}}, "198.51.100.1"},
		{"Forwarded, IPv4-mapped", fwd, "10.0.0.1", http.Header{"Forwarded": {`for="[::ffff:198.51.100.1]:80"`}}, "198.51.100.1"},
		{"Forwarded, IPv4-mapped trusted hop", fwd, "10.0.0.1", http.Header{"Forwarded": {`for=198.51.100.1, for="[::ffff:10.0.0.2]"`}}, "198.51.100.1"},
		{"Forwarded, other parameters first", fwd, "10.0.0.1", http.Header{"Forwarded": {"by=10.0.0.1;proto=http; for=198.51.100.1;host=x"}}, "198.51.100.1"},
		{"Forwarded, unknown stops at trusted hop", fwd, "10.0.0.1", http.Header{"Forwarded": {"for=198.51.100.1, for=unknown, for=10.0.0.2"}}, "10.0.0.2"},
		{"Forwarded, obfuscated node stops at peer", fwd, "10.0.0.1", http.Header{"Forwarded": {"for=198.51.100.1, for=_hidden"}}, "10.0.0.1"},
		{"Forwarded, element without for", fwd, "10.0.0.1", http.Header{"Forwarded": {"for=198.51.100.1, proto=https"}}, "10.0.0.1"},
		{"Forwarded, two for in one element", fwd, "10.0.0.1", http.Header{"Forwarded": {"for=198.51.100.1;for=1.1.1.1"}}, "10.0.0.1"},
		{"Forwarded, unquoted bracket garbage", fwd, "10.0.0.1", http.Header{"Forwarded": {`for=[2001:db8::1`}}, "10.0.0.1"},
		{"Forwarded, bad port", fwd, "10.0.0.1", http.Header{"Forwarded": {`for="198.51.100.1:port"`}}, "10.0.0.1"},
		{"Forwarded, escaped quote", fwd, "10.0.0.1", http.Header{"Forwarded": {`for="198.51.100.1\""`}}, "10.0.0.1"},
		{"IPv4-mapped trusted peer", "", "::ffff:10.0.0.1", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "198.51.100.1"},
		{"IPv4-mapped in every XFF position", "", "::ffff:10.0.0.1", http.Header{"X-Forwarded-For": {"::ffff:198.51.100.1, ::ffff:10.0.0.2", "[::ffff:10.0.0.3]:80"}}, "198.51.100.1"},
		{"zone dropped from a hop", "", "10.0.0.1", http.Header{"X-Forwarded-For": {"fe80::1%eth0"}}, "fe80::1"},
		{"zone dropped from a hop with port", "", "10.0.0.1", http.Header{"X-Forwarded-For": {"[2001:db8::1%x]:80"}}, "2001:db8::1"},
		{"zone dropped from a Forwarded node", fwd, "10.0.0.1", http.Header{"Forwarded": {`for="[fe80::1%eth0]:80"`}}, "fe80::1"},
		{"no headers", "", "10.0.0.1", nil, "10.0.0.1"},
		{"invalid peer", "", "", http.Header{"X-Forwarded-For": {"198.51.100.1"}}, "invalid IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var peer netip.Addr
			if tt.peer != "" {
				peer = netip.MustParseAddr(tt.peer)
			}
			c := slidelimit.ClientIP{TrustedProxies: trusted, Header: tt.header}
			if got := c.Addr(peer, headerFunc(tt.h)).String(); got != tt.want {
				t.Errorf("ClientIP{Header: %q}.Addr(%s, %q) = %s, want %s", tt.header, tt.peer, tt.h, got, tt.want)
			}
		})
	}
}

func TestClientIPBounded(t *testing.T) {
	t.Parallel()
	c := slidelimit.ClientIP{TrustedProxies: slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8")}}
	peer := netip.MustParseAddr("10.0.0.1")
	// 5,000 trusted hops with a client at the far left: the walk stops
	// after MaxForwardedHops, at a hop a trusted proxy vouches for.
	hops := make([]string, 5000)
	for i := range hops {
		hops[i] = fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)
	}
	hops[0] = "198.51.100.1"
	h := http.Header{"X-Forwarded-For": {strings.Join(hops, ", ")}}
	got := c.Addr(peer, headerFunc(h))
	want := netip.MustParseAddr(hops[len(hops)-slidelimit.MaxForwardedHops])
	if got != want {
		t.Errorf("Addr over %d trusted hops = %s, want %s, the last hop walked", len(hops), got, want)
	}
	// 64 KB of garbage: the peer.
	h = http.Header{"X-Forwarded-For": {strings.Repeat("x", 64<<10)}}
	if got := c.Addr(peer, headerFunc(h)); got != peer {
		t.Errorf("Addr(64 KB of garbage) = %s, want the peer %s", got, peer)
	}
}

func TestClientIPIdentity(t *testing.T) {
	t.Parallel()
	c := slidelimit.ClientIP{TrustedProxies: slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8")}, IPv6Prefix: 48}
	h := headerFunc(http.Header{"X-Forwarded-For": {"2001:db8:1:2::7"}})
	if got, err := c.Identity(netip.MustParseAddr("10.0.0.1"), h); got != "ip:2001:db8:1::/48" || err != nil {
		t.Errorf("Identity = %q, %v, want ip:2001:db8:1::/48", got, err)
	}
	if _, err := c.Identity(netip.Addr{}, h); !errors.Is(err, slidelimit.ErrInvalidKey) {
		t.Errorf("Identity(invalid peer) error = %v, want ErrInvalidKey", err)
	}
}

// FuzzClientIP feeds any bytes to every header the resolver reads, behind
// a trusted peer and an untrusted one, and checks that the client is the
// untrusted peer itself, or, behind a trusted peer, either the peer or an
// address the header names whose hops to the right are all trusted.
func FuzzClientIP(f *testing.F) {
	seeds := [][2]string{
		{"198.51.100.1", "203.0.113.77"},
		{"1.1.1.1, 10.0.0.2", "::ffff:198.51.100.9"},
		{"for=198.51.100.1, for=10.0.0.2", `for="[2001:db8::1]:80";proto=https`},
		{"for=unknown", "for=_hidden, for=10.0.0.3"},
		{`for="[::ffff:10.0.0.3]"`, `for=198.51.100.1;for=1.1.1.1`},
		{"[2001:db8::1]:443,,", " , unknown"},
		{"\x00\xff,", "10.0.0.2,10.0.0.3,10.0.0.4"},
		{`for="198.51.100.1:_x"`, `for="`},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	trusted := slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	trustedPeer, untrustedPeer := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("203.0.113.9")
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		lines := []string{line1, line2}
		header := func(string) []string { return lines }
		for _, name := range []string{slidelimit.HeaderXForwardedFor, slidelimit.HeaderForwarded, slidelimit.HeaderXRealIP} {
			c := slidelimit.ClientIP{TrustedProxies: trusted, Header: name}
			if got := c.Addr(untrustedPeer, header); got != untrustedPeer {
				t.Fatalf("%s from an untrusted peer: Addr = %s, want the peer %s", name, got, untrustedPeer)
			}
			got := c.Addr(trustedPeer, header)
			if got == trustedPeer {
				continue
			}
			if got.Is4In6() || got.Zone() != "" {
				t.Fatalf("%s: Addr = %s, an IPv4-mapped address or one with a zone", name, got)
			}
			hops := candidates(lines)
			i := slicesIndex(hops, got)
			if i < 0 {
				t.Fatalf("%s %q: Addr = %s, neither the peer nor an address in the header %v", name, lines, got, hops)
			}
			if name == slidelimit.HeaderXForwardedFor {
				// The exact chain: every hop right of the client is trusted.
				chain := xffHops(lines)
				j := len(chain) - 1
				for ; j >= 0 && chain[j].WithZone("") != got; j-- {
					if !chain[j].IsValid() || !trusted.Contains(chain[j]) {
						t.Fatalf("XFF %q: Addr = %s, but hop %d (%s) right of it is not trusted", lines, got, j, chain[j])
					}
				}
				if j < 0 {
					t.Fatalf("XFF %q: Addr = %s, not a hop of %v", lines, got, chain)
				}
			}
		}
	})
}

// xffHops parses X-Forwarded-For lines left to right, the invalid address
// standing for a hop that is not an IP address.
func xffHops(lines []string) []netip.Addr {
	var hops []netip.Addr
	for _, hop := range strings.Split(strings.Join(lines, ","), ",") {
		if strings.TrimSpace(hop) == "" {
			continue
		}
		a, _ := slidelimit.PeerAddr(hop)
		hops = append(hops, a)
	}
	return hops
}

// candidates returns every address written anywhere in lines, between any
// of the separators a forwarding header uses.
func candidates(lines []string) []netip.Addr {
	var out []netip.Addr
	for _, l := range lines {
		for _, f := range strings.FieldsFunc(l, func(r rune) bool { return strings.ContainsRune(",;=\" \t", r) }) {
			for _, s := range []string{f, strings.TrimPrefix(f, "for=")} {
				if a, ok := slidelimit.PeerAddr(s); ok {
					out = append(out, a)
				}
				if host, _, ok := strings.Cut(s, ":"); ok {
					if a, ok := slidelimit.PeerAddr(host); ok {
						out = append(out, a)
					}
				}
				if host, _, ok := strings.Cut(s, "%"); ok {
					if a, ok := slidelimit.PeerAddr(strings.TrimPrefix(host, "[")); ok {
						out = append(out, a)
					}
				}
				if i := strings.IndexByte(s, ']'); strings.HasPrefix(s, "[") && i > 0 {
					if a, ok := slidelimit.PeerAddr(s[1:i]); ok {
						out = append(out, a)
					}
				}
			}
		}
	}
	return out
}

func slicesIndex(s []netip.Addr, a netip.Addr) int {
	for i, x := range s {
		if x.WithZone("") == a.WithZone("") {
			return i
		}
	}
	return -1
}
