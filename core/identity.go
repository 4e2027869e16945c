package slidelimit

import (
	"net/netip"
	"strings"
)

// DefaultIPv6Prefix is the IPv6 network length by which IPIdentity groups
// clients: one /64 is commonly one subscriber, who can pick any of its
// 2^64 addresses.
const DefaultIPv6Prefix = 64

// IPIdentity returns the identity of a client at ip, the address as a string
// such as "203.0.113.9" or "2001:db8::1". An IPv4 address, or an IPv4-mapped
// IPv6 one, stands for itself: "ip:203.0.113.9". An IPv6 address stands for
// its network of ipv6Prefix bits, "ip:2001:db8::/64", so that one client
// cannot dodge its limit by rotating addresses; ipv6Prefix 0 means
// DefaultIPv6Prefix, and 128 keeps each address apart. A string that is not
// an IP address is kept as it is, after "ip:".
//
// Adapters pass the client IP as their framework resolves it under its
// trusted-proxy settings; never a forwarding header from an untrusted peer.
func IPIdentity(ip string, ipv6Prefix int) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return "ip:" + ip
	}
	addr = addr.Unmap()
	if addr.Is4() {
		return "ip:" + addr.String()
	}
	if ipv6Prefix <= 0 || ipv6Prefix > 128 {
		ipv6Prefix = DefaultIPv6Prefix
	}
	p, _ := addr.WithZone("").Prefix(ipv6Prefix)
	return "ip:" + p.String()
}

// JoinIdentities joins parts into one identity, such as a route and a
// client: JoinIdentities("GET /search", IPIdentity(ip, 0)). The join is
// unambiguous: different lists of parts never give the same identity,
// whatever bytes the parts hold.
func JoinIdentities(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		for j := 0; j < len(p); j++ {
			if c := p[j]; c == '|' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(p[j])
		}
	}
	return b.String()
}
