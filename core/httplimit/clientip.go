package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"

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
// the first forwarding header present by slidelimit.TrustedProxies.ClientAddr,
// which walks its hops from the right (the hop the nearest proxy appended)
// past every trusted address to the first untrusted one, the last address
// no client could forge. The gRPC interceptors of this project resolve
// client IPs the same way.
//
// The Forwarded header of RFC 7239 is not read.
//
// A ClientIP is a small value, safe for concurrent use while no one changes
// its fields.
type ClientIP struct {
	// TrustedProxies lists the networks of the proxies whose forwarding
	// headers are believed, such as netip.MustParsePrefix("10.0.0.0/8");
	// slidelimit.ParseTrustedProxies parses them from strings. A single
	// address is a /32 or /128. Empty means none.
	TrustedProxies slidelimit.TrustedProxies
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
	peer, ok := slidelimit.PeerAddr(r.RemoteAddr)
	if !ok || !c.TrustedProxies.Contains(peer) {
		return peer, ok
	}
	headers := c.Headers
	if headers == nil {
		headers = DefaultForwardingHeaders
	}
	for _, name := range headers {
		if values := r.Header.Values(name); len(values) > 0 {
			return c.TrustedProxies.ClientAddr(peer, values), true
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
