package echolimit

import (
	"fmt"
	"net/netip"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// ClientIP keys requests by client IP, found by slidelimit.ClientIP, the
// resolver every adapter of this project shares, with the same fields.
// The zero value keys by the peer address, as echo.ExtractIPDirect gives
// it, and groups IPv6 clients by /64.
//
// Behind load balancers or reverse proxies, list their networks in
// TrustedProxies, and name the header they set in Header (X-Forwarded-For
// by default, every line of it; or Forwarded or X-Real-IP): from a trusted
// peer, the header's hops are walked from the right past every trusted
// address to the first untrusted one, the last address no client could
// forge. Echo.IPExtractor plays no part; KeyByRealIP follows it instead.
//
//	proxies, err := slidelimit.ParseTrustedProxies(strings.Split(os.Getenv("TRUSTED_PROXIES"), ",")...)
//	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
//		IdentifierExtractor: echolimit.ClientIP{TrustedProxies: proxies}.Key,
//	}))
//
// A ClientIP is a small value, safe for concurrent use while no one changes
// its fields.
type ClientIP slidelimit.ClientIP

// Addr returns the client IP of c's request, and false if its RemoteAddr
// holds no IP address.
func (ip ClientIP) Addr(c echo.Context) (netip.Addr, bool) {
	return httplimit.ClientIP(ip).Addr(c.Request())
}

// Key returns the identity of c's client, slidelimit.IPIdentity of Addr,
// such as "ip:203.0.113.9" or "ip:2001:db8::/64". It is an identifier
// extractor. A request without a client IP is an error wrapping
// slidelimit.ErrInvalidKey.
func (ip ClientIP) Key(c echo.Context) (string, error) {
	return httplimit.ClientIP(ip).Key(c.Request())
}

// KeyByIP keys a request by its peer address with IPv6 grouped by /64:
// ClientIP{}.Key. It is the default IdentifierExtractor, whose grouping
// Config.IPv6Prefix changes. Behind a proxy every client shares the
// proxy's quota: use a ClientIP that lists the proxy in TrustedProxies.
func KeyByIP(c echo.Context) (string, error) {
	return ClientIP{}.Key(c)
}

// KeyByRealIP keys a request by c.RealIP(), the client IP as Echo resolves
// it, with IPv6 grouped by /64. Prefer ClientIP{TrustedProxies: ...}.Key;
// use this only to follow an Echo.IPExtractor your app already relies on,
// and mind Echo's caveat: without an IPExtractor, c.RealIP() believes
// X-Forwarded-For and X-Real-IP from any client, so any client picks its
// own address. With echo.ExtractIPFromXFFHeader and echo.TrustIPRange it
// resolves X-Forwarded-For as ClientIP does, but reads no Forwarded.
func KeyByRealIP(c echo.Context) (string, error) {
	addr := c.RealIP()
	if addr == "" {
		return "", fmt.Errorf("%w: echolimit: no client IP for RemoteAddr %q", slidelimit.ErrInvalidKey, c.Request().RemoteAddr)
	}
	return slidelimit.IPIdentity(addr, 0), nil
}

// KeyByHeader returns an identifier extractor that keys a request by the
// value of its header name, such as an API key, as
// slidelimit.HeaderIdentity(name, value, opts...): by default
// "header:x-api-key:sha256:" and a digest of the value, so that the secret
// never stands in clear in a Redis key; slidelimit.HashKey keys the digest
// and slidelimit.Readable keeps the value readable for debugging. The
// identity is the one the other adapters and the gRPC interceptors give
// the same value. A request without the header, or with it empty, is an
// error wrapping slidelimit.ErrInvalidKey; to fall back to the client IP
// instead, use FirstKey(KeyByHeader(name), KeyByIP).
//
// The header is only as trustworthy as whatever checks it: limit by an API
// key after, or together with, the middleware that validates the key, or
// clients get a fresh quota for every value they invent.
func KeyByHeader(name string, opts ...slidelimit.SecretOption) func(c echo.Context) (string, error) {
	key := httplimit.KeyByHeader(name, opts...)
	return func(c echo.Context) (string, error) { return key(c.Request()) }
}

// KeyByContext returns an identifier extractor that keys a request by the
// value an earlier middleware stored with c.Set(key, value), such as the
// user id an authentication middleware found, as slidelimit.UserIdentity
// of the value ("user:42"): a string, a fmt.Stringer or an integer. A
// missing value, or one of another type, is an error wrapping
// slidelimit.ErrInvalidKey. The rate limiter must run after the middleware
// that stores the value.
//
// Some middleware store a richer value, such as echo-jwt's *jwt.Token under
// "user"; key by it with a function of your own that returns the subject.
func KeyByContext(key string) func(c echo.Context) (string, error) {
	return func(c echo.Context) (string, error) {
		id, err := slidelimit.UserIdentity(c.Get(key))
		if err != nil {
			return "", fmt.Errorf("echolimit: context key %q: %w", key, err)
		}
		return id, nil
	}
}

// KeyByRoute keys a request by its method and the route it matched, such
// as "GET /items/:id", as slidelimit.RouteIdentity. Join it with a client
// key to give each client a quota per route:
//
//	echolimit.JoinKeys(echolimit.KeyByRoute, echolimit.KeyByIP)
//
// Echo routes a request before it runs the middleware added with e.Use, on
// a group or on a route, so all of them see the route. Middleware added
// with e.Pre runs before routing and sees no route. A request that matches
// no route is keyed by the nearest path Echo found for it, so such requests
// share a few keys rather than one per URL.
func KeyByRoute(c echo.Context) (string, error) {
	return slidelimit.RouteIdentity(c.Request().Method + " " + c.Path()), nil
}

// JoinKeys returns an identifier extractor that keys a request by every
// identity keys return, joined with slidelimit.JoinIdentities:
// JoinKeys(KeyByRoute, KeyByIP) gives each client one quota per route.
// The first error is returned.
func JoinKeys(keys ...func(c echo.Context) (string, error)) func(c echo.Context) (string, error) {
	return adapter.JoinKeys(keys...)
}

// FirstKey returns an identifier extractor that keys a request by the first
// of keys that returns a non-empty identity without error:
// FirstKey(KeyByHeader("X-API-Key"), KeyByIP) limits clients with an API
// key by the key and the others by their IP. If none does, it returns the
// last error.
func FirstKey(keys ...func(c echo.Context) (string, error)) func(c echo.Context) (string, error) {
	return adapter.FirstKey(keys...)
}
