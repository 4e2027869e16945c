package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// DefaultForwardingHeaders are the headers ClientIP reads, in order, when
// the peer is a trusted proxy and ClientIP.Headers is nil.
var DefaultForwardingHeaders = []string{"X-Forwarded-For", "X-Real-Ip"}

// ClientIP finds the IP address of the client that sent a request. net/http
// has no notion of trusted proxies, so ClientIP carries it.
//
// The zero value trusts no proxy: the client is the peer in r.RemoteAddr and
// forwarding headers are ignored, since any client can send them. Behind a
// load balancer or reverse proxy, list the proxies' networks in
// TrustedProxies: when the peer is in one of them, the client is found in
// the first forwarding header present, walking its hops from the right (the
// hop the nearest proxy appended) past every trusted address to the first
// untrusted one. That right-most untrusted hop is the last address no
// client could forge. If every hop is trusted, the left-most is the client.
// A hop that is not an IP address ends the walk at the hop to its right.
//
// The Forwarded header of RFC 7239 is not read.
//
// A ClientIP is a small value, safe for concurrent use while no one changes
// its fields.
type ClientIP struct {
	// TrustedProxies lists the networks of the proxies whose forwarding
	// headers are believed, such as netip.MustParsePrefix("10.0.0.0/8").
	// A single address is a /32 or /128. Empty means none.
	TrustedProxies []netip.Prefix
	// Headers lists the forwarding headers read when the peer is trusted;
	// the first one the request carries is used. Nil means
	// DefaultForwardingHeaders. List only headers your proxies set or
	// overwrite: a header a proxy passes through unchanged is the client's
	// to forge.
	Headers []string
	// IPv6Prefix is the network length by which Key groups IPv6 clients;
	// 0 means slidelimit.DefaultIPv6Prefix (/64), 128 keeps each address
	// apart. See slidelimit.IPIdentity.
	IPv6Prefix int
}

// Addr returns the client IP of r, and false if r.RemoteAddr holds no IP
// address (a Unix socket peer, for example).
func (c ClientIP) Addr(r *http.Request) (netip.Addr, bool) {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok || !c.trusted(peer) {
		return peer, ok
	}
	headers := c.Headers
	if headers == nil {
		headers = DefaultForwardingHeaders
	}
	for _, name := range headers {
		if values := r.Header.Values(name); len(values) > 0 {
			return c.walk(values, peer), true
		}
	}
	return peer, true
}

// Key returns the identity of r's client, slidelimit.IPIdentity of Addr
// grouped by IPv6Prefix, such as "ip:203.0.113.9" or "ip:2001:db8::/64".
// It is a KeyFunc. A request without a client IP is an error wrapping
// slidelimit.ErrInvalidKey.
func (c ClientIP) Key(r *http.Request) (string, error) {
	addr, ok := c.Addr(r)
	if !ok {
		return "", fmt.Errorf("%w: httplimit: RemoteAddr %q holds no IP address", slidelimit.ErrInvalidKey, r.RemoteAddr)
	}
	return slidelimit.IPIdentity(addr.String(), c.IPv6Prefix), nil
}

// walk returns the right-most untrusted hop of a forwarding header's values,
// seen from peer.
func (c ClientIP) walk(values []string, peer netip.Addr) netip.Addr {
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
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
			hop, ok := parseHop(item)
			if !ok {
				return client
			}
			client = hop
			if !c.trusted(hop) {
				return hop
			}
		}
	}
	return client
}

func (c ClientIP) trusted(addr netip.Addr) bool {
	addr = addr.WithZone("")
	for _, p := range c.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// parseHop parses an address as it appears in RemoteAddr or a forwarding
// header: "203.0.113.9", "203.0.113.9:1234", "2001:db8::1" or
// "[2001:db8::1]:1234". IPv4-mapped IPv6 addresses are unmapped.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return a.Unmap(), true
	}
	return netip.Addr{}, false
}

// ParseProxies parses a list of trusted proxies for ClientIP.TrustedProxies,
// each a network in CIDR form ("10.0.0.0/8", "2001:db8::/32") or a single
// address ("192.0.2.7"). Surrounding spaces and empty entries are ignored, so
// strings.Split(os.Getenv("TRUSTED_PROXIES"), ",") may be passed as it is. An
// entry that is neither is an error wrapping slidelimit.ErrInvalidOption.
func ParseProxies(list ...string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if strings.Contains(s, "/") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, fmt.Errorf("%w: httplimit: trusted proxy %q: %w", slidelimit.ErrInvalidOption, s, err)
			}
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%w: httplimit: trusted proxy %q: %w", slidelimit.ErrInvalidOption, s, err)
		}
		a = a.Unmap().WithZone("")
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
