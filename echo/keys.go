package echolimit

import (
	"fmt"
	"net/textproto"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// ClientIP returns the IP address of the client that sent c's request, as
// far as it can be trusted. When the app sets Echo.IPExtractor, ClientIP is
// c.RealIP(), which asks it; otherwise ClientIP is the peer address, as
// echo.ExtractIPDirect gives it.
//
// ClientIP differs from c.RealIP() in the second case only: without an
// IPExtractor, c.RealIP() believes X-Forwarded-For and X-Real-IP from any
// client, so a client could pick its own key. Behind a proxy, tell Echo
// which proxies to trust, and ClientIP follows:
//
//	_, lb, _ := net.ParseCIDR("10.0.0.0/8")
//	e.IPExtractor = echo.ExtractIPFromXFFHeader(echo.TrustIPRange(lb))
func ClientIP(c echo.Context) string {
	if e := c.Echo(); e != nil && e.IPExtractor != nil {
		return c.RealIP()
	}
	return echo.ExtractIPDirect()(c.Request())
}

// KeyByIP keys a request by its client IP, ClientIP(c), as
// slidelimit.IPIdentity(ip, 0): IPv6 clients are grouped by /64. It is the
// default IdentifierExtractor, whose grouping Config.IPv6Prefix changes. To
// join an IP key of another grouping with other keys, write it out with
// slidelimit.IPIdentity(echolimit.ClientIP(c), 56).
func KeyByIP(c echo.Context) (string, error) {
	return slidelimit.IPIdentity(ClientIP(c), 0), nil
}

// keyByIPPrefix is KeyByIP with IPv6 networks of ipv6Prefix bits.
func keyByIPPrefix(ipv6Prefix int) func(c echo.Context) (string, error) {
	return func(c echo.Context) (string, error) {
		return slidelimit.IPIdentity(ClientIP(c), ipv6Prefix), nil
	}
}

// KeyByHeader returns an identifier extractor that keys a request by the
// value of its header name, such as an API key, as
// httplimit.HeaderIdentity(name, value). A request without the header, or
// with it empty, is an error wrapping slidelimit.ErrInvalidKey; to fall
// back to the client IP instead, use FirstKey(KeyByHeader(name),
// KeyByIP).
//
// The header is only as trustworthy as whatever checks it: limit by an API
// key after, or together with, the middleware that validates the key, or
// clients get a fresh quota for every value they invent.
func KeyByHeader(name string) func(c echo.Context) (string, error) {
	return func(c echo.Context) (string, error) {
		v := c.Request().Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("%w: echolimit: no %s header", slidelimit.ErrInvalidKey, textproto.CanonicalMIMEHeaderKey(name))
		}
		return httplimit.HeaderIdentity(name, v), nil
	}
}

// KeyByContext returns an identifier extractor that keys a request by the
// value an earlier middleware stored with c.Set(key, value), such as the
// user id an authentication middleware found, as
// httplimit.ContextIdentity of the value: a string, a fmt.Stringer or an
// integer. A missing value, or one of another type, is an error wrapping
// slidelimit.ErrInvalidKey. The rate limiter must run after the middleware
// that stores the value.
//
// Some middleware store a richer value, such as echo-jwt's *jwt.Token under
// "user"; key by it with a function of your own that returns the subject.
func KeyByContext(key string) func(c echo.Context) (string, error) {
	return func(c echo.Context) (string, error) {
		id, err := httplimit.ContextIdentity(c.Get(key))
		if err != nil {
			return "", fmt.Errorf("echolimit: context key %q: %w", key, err)
		}
		return id, nil
	}
}

// KeyByRoute keys a request by its method and the route it matched, such
// as "GET /items/:id", as httplimit.RouteIdentity. Join it with a client
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
	return httplimit.RouteIdentity(c.Request().Method + " " + c.Path()), nil
}

// JoinKeys returns an identifier extractor that keys a request by every
// identity keys return, joined with slidelimit.JoinIdentities:
// JoinKeys(KeyByRoute, KeyByIP) gives each client one quota per route.
// The first error is returned.
func JoinKeys(keys ...func(c echo.Context) (string, error)) func(c echo.Context) (string, error) {
	return func(c echo.Context) (string, error) {
		if len(keys) == 0 {
			return "", fmt.Errorf("%w: echolimit: JoinKeys has no key functions", slidelimit.ErrInvalidKey)
		}
		parts := make([]string, len(keys))
		for i, k := range keys {
			id, err := k(c)
			if err != nil {
				return "", err
			}
			parts[i] = id
		}
		return slidelimit.JoinIdentities(parts...), nil
	}
}

// FirstKey returns an identifier extractor that keys a request by the first
// of keys that returns a non-empty identity without error:
// FirstKey(KeyByHeader("X-API-Key"), KeyByIP) limits clients with an API
// key by the key and the others by their IP. If none does, it returns the
// last error.
func FirstKey(keys ...func(c echo.Context) (string, error)) func(c echo.Context) (string, error) {
	return func(c echo.Context) (string, error) {
		err := fmt.Errorf("%w: echolimit: FirstKey has no key functions", slidelimit.ErrInvalidKey)
		for _, k := range keys {
			var id string
			if id, err = k(c); err == nil && id != "" {
				return id, nil
			}
		}
		if err == nil {
			err = fmt.Errorf("%w: echolimit: every key function returned an empty identity", slidelimit.ErrInvalidKey)
		}
		return "", err
	}
}
