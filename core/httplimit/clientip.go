package httplimit

import (
	"fmt"
	"net/http"
	"net/netip"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// ClientIP finds the IP address of the client that sent a request, by
// slidelimit.ClientIP, the one resolver every adapter of this project
// shares: its fields, and what they mean, are the same. net/http has no
// notion of trusted proxies, so ClientIP carries it.
//
// The zero value trusts no proxy: the client is the peer in r.RemoteAddr and
// forwarding headers are ignored, since any client can send them. Behind a
// load balancer or reverse proxy, list the proxies' networks in
// TrustedProxies and name the header they set in Header (X-Forwarded-For by
// default, or Forwarded or X-Real-IP): when the peer is one of them, the
// header's hops, every line of it, are walked from the right (the hop the
// nearest proxy added) past every trusted address to the first untrusted
// one, the last address no client could forge.
//
// A ClientIP is a small value, safe for concurrent use while no one changes
// its fields.
type ClientIP slidelimit.ClientIP

// Addr returns the client IP of r, and false if r.RemoteAddr holds no IP
// address (a Unix socket peer, for example).
func (c ClientIP) Addr(r *http.Request) (netip.Addr, bool) {
	peer, ok := slidelimit.PeerAddr(r.RemoteAddr)
	if !ok {
		return peer, false
	}
	return slidelimit.ClientIP(c).Addr(peer, r.Header.Values), true
}

// Key returns the identity of r's client, slidelimit.IPIdentity of Addr
// grouped by IPv6Prefix, such as "ip:203.0.113.9" or "ip:2001:db8::/64".
// It is a KeyFunc. A request without a client IP is an error wrapping
// slidelimit.ErrInvalidKey.
func (c ClientIP) Key(r *http.Request) (string, error) {
	peer, ok := slidelimit.PeerAddr(r.RemoteAddr)
	if !ok {
		return "", fmt.Errorf("%w: httplimit: RemoteAddr %q holds no IP address", slidelimit.ErrInvalidKey, r.RemoteAddr)
	}
	return slidelimit.ClientIP(c).Identity(peer, r.Header.Values)
}
