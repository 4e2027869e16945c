package slidelimit

import (
	"fmt"
	"net/netip"
	"strings"
)

// TrustedProxies lists the networks of the proxies, such as load balancers
// and reverse proxies, whose forwarding headers (or gRPC metadata) are
// believed: netip.MustParsePrefix("10.0.0.0/8"). A single address is a /32
// or /128. Nil trusts none, so the client is always the peer. Every adapter
// of this project that resolves client IPs itself (package httplimit and
// the gRPC interceptors) uses ClientAddr, so all of them believe exactly
// the same addresses.
//
// A TrustedProxies is safe for concurrent use while no one changes it.
type TrustedProxies []netip.Prefix

// ParseTrustedProxies parses a list of trusted proxies, each a network in
// CIDR form ("10.0.0.0/8", "2001:db8::/32") or a single address
// ("192.0.2.7"). Host bits of a network are cleared, and IPv4-mapped IPv6
// forms ("::ffff:10.0.0.0/104") become IPv4. Surrounding spaces and empty
// entries are ignored, so strings.Split(os.Getenv("TRUSTED_PROXIES"), ",")
// may be passed as it is, and an empty list is nil. An entry that is neither
// a network nor an address is an error wrapping ErrInvalidOption.
func ParseTrustedProxies(list ...string) (TrustedProxies, error) {
	var out TrustedProxies
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		var p netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			if p, err = netip.ParsePrefix(s); err != nil {
				return nil, fmt.Errorf("%w: trusted proxy %q: %w", ErrInvalidOption, s, err)
			}
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("%w: trusted proxy %q: %w", ErrInvalidOption, s, err)
			}
			a = a.Unmap().WithZone("")
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Contains reports whether addr is in one of the networks of t. An
// IPv4-mapped IPv6 address counts as its IPv4 address, and an IPv6 zone is
// ignored. The invalid netip.Addr is in none.
func (t TrustedProxies) Contains(addr netip.Addr) bool {
	addr = addr.Unmap().WithZone("")
	for _, p := range t {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// ClientAddr returns the address of the client behind peer, the address
// the connection came from. Unless peer is a trusted proxy, the client is
// peer itself, whatever forwarded says, since any client can send
// forwarding headers.
//
// When peer is trusted, the client is found in forwarded: the values of one
// forwarding header or metadata key such as X-Forwarded-For, in the order
// they arrived, each a comma-separated list of hops that may carry ports
// ("198.51.100.7", "[2001:db8::7]:443"). The hops are walked from the right
// (the one the nearest proxy appended) past every trusted address to the
// first untrusted one: that right-most untrusted hop is the last address no
// client could forge. If every hop is trusted, the left-most is the client.
// A hop that is not an IP address ends the walk at the hop to its right (or
// at peer). Empty hops are skipped, and no hops at all leave peer.
//
// IPv4-mapped IPv6 addresses are returned as IPv4 addresses.
func (t TrustedProxies) ClientAddr(peer netip.Addr, forwarded []string) netip.Addr {
	client := peer.Unmap()
	if !t.Contains(client) {
		return client
	}
	for i := len(forwarded) - 1; i >= 0; i-- {
		rest := forwarded[i]
		for rest != "" {
			var item string
			if j := strings.LastIndexByte(rest, ','); j >= 0 {
				item, rest = rest[j+1:], rest[:j]
			} else {
				item, rest = rest, ""
			}
			if strings.TrimSpace(item) == "" {
				continue
			}
			hop, ok := PeerAddr(item)
			if !ok {
				return client
			}
			client = hop
			if !t.Contains(hop) {
				return hop
			}
		}
	}
	return client
}

// PeerAddr returns the IP address in s, an address as net/http's
// Request.RemoteAddr, a gRPC peer's net.Addr or a forwarding header gives
// it: "203.0.113.9", "203.0.113.9:1234", "2001:db8::1", "[2001:db8::1]" or
// "[2001:db8::1]:1234", surrounding spaces allowed. An IPv4-mapped IPv6
// address is returned as its IPv4 address. It returns false when s holds
// no IP address, such as the "@" of a Unix socket peer or a host name.
func PeerAddr(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}
