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
// the connection came from, by the X-Forwarded-For values forwarded:
// ClientIP{TrustedProxies: t}.Addr with forwarded as the header's values.
// Unless peer is a trusted proxy, the client is peer itself, whatever
// forwarded says, since any client can send forwarding headers.
//
// When peer is trusted, the client is found in forwarded: the values of
// X-Forwarded-For (or of a metadata key holding the same list), every line
// in the order they arrived, each a comma-separated list of hops that may
// carry ports ("198.51.100.7", "[2001:db8::7]:443"). The hops are walked
// from the right (the one the nearest proxy appended) past every trusted
// address to the first untrusted one: that right-most untrusted hop is the
// last address no client could forge. If every hop is trusted, the
// left-most is the client. A hop that is not an IP address ends the walk at
// the hop to its right (or at peer). Empty hops are skipped, and no hops at
// all leave peer. At most MaxForwardedHops hops are walked.
//
// IPv4-mapped IPv6 addresses are returned as IPv4 addresses, and hops
// without their IPv6 zone.
func (t TrustedProxies) ClientAddr(peer netip.Addr, forwarded []string) netip.Addr {
	return t.walk(peer.Unmap(), forwarded, true, PeerAddr)
}

// walk returns the client of a request from client, its trusted peer, and
// the values of a forwarding header, walked from the right: each value
// split at commas when split is set, each part (hop) turned into an
// address by parse.
func (t TrustedProxies) walk(client netip.Addr, values []string, split bool, parse func(string) (netip.Addr, bool)) netip.Addr {
	if !t.Contains(client) {
		return client
	}
	hops := 0
	for i := len(values) - 1; i >= 0; i-- {
		rest := values[i]
		for rest != "" {
			var item string
			if j := strings.LastIndexByte(rest, ','); split && j >= 0 {
				item, rest = rest[j+1:], rest[:j]
			} else {
				item, rest = rest, ""
			}
			if strings.TrimSpace(item) == "" {
				continue
			}
			if hops++; hops > MaxForwardedHops {
				return client
			}
			hop, ok := parse(item)
			if !ok {
				return client
			}
			hop = hop.WithZone("") // a zone means nothing beyond the host that saw it
			client = hop
			if !t.Contains(hop) {
				return hop
			}
		}
	}
	return client
}

// MaxForwardedHops is the most hops of a forwarding header that ClientAddr
// and ClientIP walk. A longer chain of trusted proxies ends at the last hop
// walked, which a trusted proxy vouches for, so a huge header costs no more
// than this many steps.
const MaxForwardedHops = 64

// The forwarding headers ClientIP.Header names.
const (
	// HeaderXForwardedFor is the de facto standard list of hops, one
	// appended by each proxy: "198.51.100.7, 10.0.0.2". Every line of it
	// counts, in order, as if joined with commas.
	HeaderXForwardedFor = "X-Forwarded-For"
	// HeaderForwarded is the header of RFC 7239, whose elements name each
	// hop in a for= parameter: `for=198.51.100.7;proto=https,
	// for="[2001:db8::7]:443"`. An element without for=, or with an
	// obfuscated ("_hidden") or "unknown" node, tells nothing about the
	// client, so the walk stops at the trusted hop to its right.
	HeaderForwarded = "Forwarded"
	// HeaderXRealIP is the single address some proxies (nginx's
	// proxy_set_header X-Real-IP $remote_addr) overwrite with the address
	// they saw. Only its last line counts, and only a proxy that
	// overwrites it, rather than passing on the client's, makes it safe.
	HeaderXRealIP = "X-Real-Ip"
)

// ClientIP is how every adapter of this project finds the IP address of
// the client that sent a request or call, so all of them believe exactly
// the same addresses. The zero value trusts no proxy: the client is the
// peer, the address the connection came from, whatever headers say.
//
// Behind load balancers or reverse proxies, list their networks in
// TrustedProxies. When the peer is one of them, the client is found in the
// forwarding header named by Header, walked from the right (the hop the
// nearest proxy added) past every trusted address to the first untrusted
// one: the last address no client could forge. Name the header your
// proxies set: X-Forwarded-For by default, or Forwarded (RFC 7239) or
// X-Real-IP. A header your proxies pass on without adding to it is the
// client's to forge, so only one header is read, never the first of
// several that happens to be present.
//
// Whatever the header holds, the client is either the peer or an address
// in the header that trusted hops vouch for: a hop that is no IP address
// (garbage, "unknown", an obfuscated node) ends the walk at the trusted
// hop to its right, and at most MaxForwardedHops hops are walked.
// IPv4-mapped IPv6 addresses ("::ffff:198.51.100.7") are taken as IPv4
// addresses everywhere: in the peer, in every hop and in TrustedProxies.
//
// A ClientIP is a small value, safe for concurrent use while no one changes
// its fields.
type ClientIP struct {
	// TrustedProxies lists the networks of the proxies whose forwarding
	// header is believed; ParseTrustedProxies parses them from strings.
	// Empty means none.
	TrustedProxies TrustedProxies
	// Header names the forwarding header read when the peer is trusted:
	// HeaderXForwardedFor, HeaderForwarded or HeaderXRealIP, in any case.
	// Any other name is read as a list of hops like X-Forwarded-For.
	// Empty means HeaderXForwardedFor.
	Header string
	// IPv6Prefix is the network length by which Identity groups IPv6
	// clients; 0 means DefaultIPv6Prefix (/64), 128 keeps each address
	// apart. See IPIdentity.
	IPv6Prefix int
}

// Addr returns the address of the client behind peer. header returns the
// values (every line, in order) of a request header or metadata key by
// name, as http.Header.Values does; it is only called when peer is a
// trusted proxy, and may be nil when there are no headers. The invalid
// peer gives the invalid address.
func (c ClientIP) Addr(peer netip.Addr, header func(name string) []string) netip.Addr {
	client := peer.Unmap()
	if header == nil || !c.TrustedProxies.Contains(client) {
		return client
	}
	name := c.Header
	if name == "" {
		name = HeaderXForwardedFor
	}
	values := header(name)
	switch {
	case strings.EqualFold(name, HeaderForwarded):
		return c.TrustedProxies.walk(client, values, true, forwardedFor)
	case strings.EqualFold(name, HeaderXRealIP):
		if len(values) == 0 {
			return client
		}
		return c.TrustedProxies.walk(client, values[len(values)-1:], false, PeerAddr)
	}
	return c.TrustedProxies.walk(client, values, true, PeerAddr)
}

// Identity returns the identity of the client behind peer, IPIdentity of
// Addr grouped by IPv6Prefix, such as "ip:203.0.113.9" or
// "ip:2001:db8::/64". A peer that is not an IP address, such as a Unix
// socket's, is an error wrapping ErrInvalidKey.
func (c ClientIP) Identity(peer netip.Addr, header func(name string) []string) (string, error) {
	addr := c.Addr(peer, header)
	if !addr.IsValid() {
		return "", fmt.Errorf("%w: the peer has no IP address", ErrInvalidKey)
	}
	return addrIdentity(addr, c.IPv6Prefix), nil
}

// forwardedFor returns the node of the for= parameter of element, one
// element of an RFC 7239 Forwarded header. Nodes that name no address
// ("unknown", obfuscated "_hidden" ones), elements without for= or with
// two, and anything malformed give false.
func forwardedFor(element string) (netip.Addr, bool) {
	var node string
	found := false
	for pair := range strings.SplitSeq(element, ";") {
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "for") {
			continue
		}
		if found {
			return netip.Addr{}, false
		}
		found, node = true, strings.TrimSpace(value)
	}
	if len(node) >= 2 && node[0] == '"' && node[len(node)-1] == '"' {
		node = node[1 : len(node)-1]
	}
	if node == "" || strings.ContainsAny(node, "\\\" \t") {
		return netip.Addr{}, false
	}
	host, port := node, ""
	if node[0] == '[' {
		end := strings.IndexByte(node, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host, port = node[1:end], node[end+1:]
		if port != "" {
			var ok bool
			if port, ok = strings.CutPrefix(port, ":"); !ok {
				return netip.Addr{}, false
			}
		}
	} else if strings.Count(node, ":") == 1 {
		host, port, _ = strings.Cut(node, ":")
	}
	if port != "" && !validNodePort(port) {
		return netip.Addr{}, false
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return addr.Unmap(), true
}

// obfuscatedChar reports whether c may stand in an obfuscated node or port
// of RFC 7239 after its leading "_": a letter, a digit, '.', '_' or '-'.
func obfuscatedChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// validNodePort reports whether s is a node-port of RFC 7239: up to five
// digits, or an obfuscated port, "_" and letters, digits, '.', '_' or '-'.
func validNodePort(s string) bool {
	if s[0] == '_' {
		for i := 1; i < len(s); i++ {
			if !obfuscatedChar(s[i]) {
				return false
			}
		}
		return len(s) > 1
	}
	if len(s) > 5 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
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
