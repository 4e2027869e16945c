package httplimit_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

func TestClientIPAddr(t *testing.T) {
	t.Parallel()
	trusted := slidelimit.TrustedProxies{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	tests := []struct {
		name    string
		ip      httplimit.ClientIP
		remote  string
		headers [][2]string
		want    string // "" for no address
	}{
		// The peer is read from RemoteAddr in each of its forms.
		{"peer", httplimit.ClientIP{}, "203.0.113.9:4711", nil, "203.0.113.9"},
		{"peer without port", httplimit.ClientIP{}, "203.0.113.9", nil, "203.0.113.9"},
		{"IPv6 peer", httplimit.ClientIP{}, "[2001:db8::1]:443", nil, "2001:db8::1"},
		{"IPv4-mapped peer", httplimit.ClientIP{}, "[::ffff:203.0.113.9]:443", nil, "203.0.113.9"},
		{"unix socket peer", httplimit.ClientIP{}, "@", nil, ""},
		{"unix socket peer, proxies trusted", httplimit.ClientIP{TrustedProxies: trusted}, "@", [][2]string{{"X-Forwarded-For", "198.51.100.1"}}, ""},
		// Headers count only from a trusted peer.
		{"no proxy trusted ignores X-Forwarded-For", httplimit.ClientIP{}, "203.0.113.9:1", [][2]string{{"X-Forwarded-For", "198.51.100.1"}}, "203.0.113.9"},
		{"no proxy trusted ignores X-Real-IP", httplimit.ClientIP{}, "203.0.113.9:1", [][2]string{{"X-Real-IP", "198.51.100.1"}}, "203.0.113.9"},
		{"untrusted peer ignores X-Forwarded-For", httplimit.ClientIP{TrustedProxies: trusted}, "203.0.113.9:1", [][2]string{{"X-Forwarded-For", "198.51.100.1"}}, "203.0.113.9"},
		{"trusted peer without header", httplimit.ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", nil, "10.0.0.1"},
		{"trusted peer, one hop", httplimit.ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "198.51.100.1"}}, "198.51.100.1"},
		{"IPv4-mapped trusted peer", httplimit.ClientIP{TrustedProxies: trusted}, "[::ffff:10.0.0.1]:1", [][2]string{{"X-Forwarded-For", "198.51.100.1"}}, "198.51.100.1"},
		{"IPv6 trusted peer", httplimit.ClientIP{TrustedProxies: trusted}, "[2001:db8:ffff::1]:1", [][2]string{{"X-Forwarded-For", "[2001:db8:1::7]:80"}}, "2001:db8:1::7"},
		// The header's hops are walked by slidelimit.ClientIP
		// (see its tests); these prove the values reach it whole and in order.
		{"right-most untrusted hop", httplimit.ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "1.2.3.4, 198.51.100.1, 10.9.9.9"}}, "198.51.100.1"},
		{"several header lines", httplimit.ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "1.2.3.4"}, {"X-Forwarded-For", "198.51.100.1, 10.0.0.2"}}, "198.51.100.1"},
		{"walk into an earlier header line", httplimit.ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "198.51.100.1"}, {"X-Forwarded-For", "10.0.0.2"}}, "198.51.100.1"},
		// Which header is read: X-Forwarded-For by default, one header only.
		{"X-Real-IP not read by default", httplimit.ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", [][2]string{{"X-Real-IP", "198.51.100.1"}}, "10.0.0.1"},
		{"X-Real-IP when configured", httplimit.ClientIP{TrustedProxies: trusted, Header: "X-Real-IP"}, "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "1.2.3.4"}, {"X-Real-IP", "198.51.100.2"}}, "198.51.100.2"},
		{"Forwarded when configured", httplimit.ClientIP{TrustedProxies: trusted, Header: "Forwarded"}, "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "1.2.3.4"}, {"Forwarded", `for="[::ffff:198.51.100.2]:80"`}}, "198.51.100.2"},
		{"chosen header absent", httplimit.ClientIP{TrustedProxies: trusted, Header: "X-Client-IP"}, "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "1.2.3.4"}}, "10.0.0.1"},
		{"client line first, proxy line second", httplimit.ClientIP{TrustedProxies: trusted}, "10.0.0.1:1", [][2]string{{"X-Forwarded-For", "198.51.100.66"}, {"X-Forwarded-For", "203.0.113.77"}}, "203.0.113.77"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.remote
			for _, h := range tt.headers {
				r.Header.Add(h[0], h[1])
			}
			addr, ok := tt.ip.Addr(r)
			got := ""
			if ok {
				got = addr.String()
			}
			if got != tt.want {
				t.Errorf("Addr(RemoteAddr %q, %v) = %q, want %q", tt.remote, tt.headers, got, tt.want)
			}
		})
	}
}

func TestClientIPKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		ip     httplimit.ClientIP
		remote string
		want   string
	}{
		{"IPv4", httplimit.ClientIP{}, "203.0.113.9:1", "ip:203.0.113.9"},
		{"IPv6 grouped by /64", httplimit.ClientIP{}, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2::/64"},
		{"IPv6 grouped by /48", httplimit.ClientIP{IPv6Prefix: 48}, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1::/48"},
		{"IPv6 kept apart", httplimit.ClientIP{IPv6Prefix: 128}, "[2001:db8:1:2:3:4:5:6]:1", "ip:2001:db8:1:2:3:4:5:6/128"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.remote
			got, err := tt.ip.Key(r)
			if err != nil || got != tt.want {
				t.Errorf("Key(%q) = %q, %v, want %q, nil", tt.remote, got, err, tt.want)
			}
		})
	}

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = ""
	if got, err := (httplimit.ClientIP{}).Key(r); !errors.Is(err, slidelimit.ErrInvalidKey) {
		t.Errorf("Key(empty RemoteAddr) = %q, %v, want error wrapping ErrInvalidKey", got, err)
	}
}
