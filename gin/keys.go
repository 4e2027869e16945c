package ginlimit

import (
	"fmt"
	"net/netip"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// KeyFunc returns the identity a request is limited by: requests with the
// same identity share one quota. An error, or an empty identity, leaves the
// request undecided: the middleware reports the error and answers with its
// error handler (500 by default).
//
// The helpers below build the common ones; any function of this type works.
type KeyFunc func(c *gin.Context) (string, error)

// ClientIP keys requests by client IP, found by slidelimit.ClientIP, the
// resolver every adapter of this project shares, with the same fields.
// The zero value keys by the peer address, c.Request.RemoteAddr, and groups
// IPv6 clients by /64.
//
// Behind load balancers or reverse proxies, list their networks in
// TrustedProxies, and name the header they set in Header (X-Forwarded-For
// by default, every line of it; or Forwarded or X-Real-IP): from a trusted
// peer, the header's hops are walked from the right past every trusted
// address to the first untrusted one, the last address no client could
// forge. The engine's own proxy settings (SetTrustedProxies,
// RemoteIPHeaders) play no part.
//
//	proxies, err := slidelimit.ParseTrustedProxies(strings.Split(os.Getenv("TRUSTED_PROXIES"), ",")...)
//	r.Use(ginlimit.New(lim, ginlimit.WithKey(ginlimit.ClientIP{TrustedProxies: proxies}.Key)))
//
// A ClientIP is a small value, safe for concurrent use while no one changes
// its fields.
type ClientIP slidelimit.ClientIP

// Addr returns the client IP of c's request, and false if its RemoteAddr
// holds no IP address.
func (ip ClientIP) Addr(c *gin.Context) (netip.Addr, bool) {
	return httplimit.ClientIP(ip).Addr(c.Request)
}

// Key returns the identity of c's client, slidelimit.IPIdentity of Addr,
// such as "ip:203.0.113.9" or "ip:2001:db8::/64". It is a KeyFunc. A
// request without a client IP is an error wrapping
// slidelimit.ErrInvalidKey.
func (ip ClientIP) Key(c *gin.Context) (string, error) {
	return httplimit.ClientIP(ip).Key(c.Request)
}

// KeyByIP keys a request by its peer address with IPv6 grouped by /64:
// ClientIP{}.Key. It is the middleware's default, and safe whatever the
// engine's proxy settings; behind a proxy, though, every client shares the
// proxy's quota: use a ClientIP that lists the proxy in TrustedProxies.
func KeyByIP(c *gin.Context) (string, error) {
	return ClientIP{}.Key(c)
}

// KeyByGinClientIP keys a request by c.ClientIP(), the client address as
// Gin resolves it under the engine's trusted-proxy settings, with IPv6
// grouped by /64. Prefer ClientIP{TrustedProxies: ...}.Key; use this only
// to follow an engine whose settings you already rely on, and mind Gin's
// caveats:
//   - a gin.Engine trusts every proxy until SetTrustedProxies lists yours
//     (or nil), so by default any client picks its own address;
//   - c.ClientIP() reads only the first line of X-Forwarded-For, so behind a
//     proxy that appends a second line (HAProxy's option forwardfor, among
//     others) a client that sends its own line picks its own address;
//   - it does not read RFC 7239 Forwarded, and engine.TrustedPlatform
//     headers are believed from any peer.
func KeyByGinClientIP(c *gin.Context) (string, error) {
	addr := c.ClientIP()
	if addr == "" {
		return "", fmt.Errorf("%w: ginlimit: no client IP for RemoteAddr %q", slidelimit.ErrInvalidKey, c.Request.RemoteAddr)
	}
	return slidelimit.IPIdentity(addr, 0), nil
}

// KeyByHeader keys a request by the value of the header name, such as an
// API key, as slidelimit.HeaderIdentity(name, value, opts...): by default
// "header:x-api-key:sha256:" and a digest of the value, so that the secret
// never stands in clear in a Redis key; slidelimit.HashKey keys the digest
// and slidelimit.Readable keeps the value readable for debugging. The
// identity is the one the other adapters and the gRPC interceptors give
// the same value. A request without the header is an error wrapping
// slidelimit.ErrInvalidKey; to fall back to the client IP instead, use
// FirstKey(KeyByHeader(name), KeyByIP).
//
// Limit by an API key after, or together with, the handler that validates
// it, or clients get a fresh quota for every value they invent.
func KeyByHeader(name string, opts ...slidelimit.SecretOption) KeyFunc {
	key := httplimit.KeyByHeader(name, opts...)
	return func(c *gin.Context) (string, error) { return key(c.Request) }
}

// KeyByContext keys a request by the value stored under key with c.Set,
// such as the user id an authentication middleware (gin.BasicAuth stores
// gin.AuthUserKey) put there, as slidelimit.UserIdentity of the value
// ("user:42"): a string, fmt.Stringer or integer. The limiter must run
// after the middleware that stores the value. A missing value is an error
// wrapping slidelimit.ErrInvalidKey.
func KeyByContext(key string) KeyFunc {
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(key)
		return slidelimit.UserIdentity(v)
	}
}

// KeyByRoute keys a request by its route, the method and c.FullPath(), as
// slidelimit.RouteIdentity("GET /items/:id"). Join it with a client key to
// give every client a quota per route:
//
//	ginlimit.JoinKeys(ginlimit.KeyByRoute, ginlimit.KeyByIP)
//
// A request that matches no route (on an engine-wide limiter) is keyed by
// the empty route, so all of a client's unmatched requests share one quota.
func KeyByRoute(c *gin.Context) (string, error) {
	route := c.FullPath()
	if route != "" {
		route = c.Request.Method + " " + route
	}
	return slidelimit.RouteIdentity(route), nil
}

// JoinKeys keys a request by every identity keys return, joined with
// slidelimit.JoinIdentities: JoinKeys(KeyByRoute, KeyByIP) gives a client
// one quota per route. The first error is returned.
func JoinKeys(keys ...KeyFunc) KeyFunc {
	return adapter.JoinKeys(keys...)
}

// FirstKey keys a request by the first of keys that returns a non-empty
// identity without error: FirstKey(KeyByContext(gin.AuthUserKey), KeyByIP)
// limits signed-in users by user and the others by IP. If none does, it
// returns the last error.
func FirstKey(keys ...KeyFunc) KeyFunc {
	return adapter.FirstKey(keys...)
}
