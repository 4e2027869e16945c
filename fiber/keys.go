package fiberlimit

import (
	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// KeyByIP keys a request by its client IP, c.IP(), as
// slidelimit.IPIdentity(ip, 0): IPv6 clients are grouped by /64. It is the
// default KeyGenerator, whose grouping Config.IPv6Prefix changes. To join
// an IP key of another grouping with other keys, write it out:
// func(c *fiber.Ctx) string { return slidelimit.IPIdentity(c.IP(), 56) }.
//
// c.IP() is the peer address unless the app sets fiber.Config.ProxyHeader.
// Behind a proxy, set ProxyHeader together with EnableTrustedProxyCheck and
// TrustedProxies, so that the header is believed only from your proxies;
// ProxyHeader alone believes it from anyone, and any client can then pick
// its own key. Set EnableIPValidation too, so that c.IP() is an address
// rather than the raw header. Fiber takes the left-most address of the
// header, which a client can forge if your proxy appends to
// X-Forwarded-For: prefer a header the proxy overwrites, such as X-Real-IP.
func KeyByIP(c *fiber.Ctx) string {
	return slidelimit.IPIdentity(c.IP(), 0)
}

// keyByIPPrefix is KeyByIP with IPv6 networks of ipv6Prefix bits.
func keyByIPPrefix(ipv6Prefix int) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		return slidelimit.IPIdentity(c.IP(), ipv6Prefix)
	}
}

// KeyByHeader returns a KeyGenerator that keys a request by the value of
// its header name, such as an API key, as httplimit.HeaderIdentity(name,
// value). A request without the header gets the empty key, which is an
// error; to fall back to the client IP instead, use
// FirstKey(KeyByHeader(name), KeyByIP).
//
// The header is only as trustworthy as whatever checks it: limit by an API
// key after, or together with, the handler that validates the key, or
// clients get a fresh quota for every value they invent.
func KeyByHeader(name string) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		v := c.Get(name)
		if v == "" {
			return ""
		}
		return httplimit.HeaderIdentity(name, v)
	}
}

// KeyByLocals returns a KeyGenerator that keys a request by the value an
// earlier handler stored with c.Locals(key, value), such as the user an
// authentication middleware found, as httplimit.ContextIdentity of the
// value: a string, a fmt.Stringer or an integer. A missing value, or one of
// another type, gets the empty key, which is an error. The rate limiter
// must run after the handler that stores the value.
func KeyByLocals(key any) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		id, err := httplimit.ContextIdentity(c.Locals(key))
		if err != nil {
			return ""
		}
		return id
	}
}

// KeyByRoute keys a request by its method and the path of the route the
// middleware is registered on, such as "GET /items/:id", as
// httplimit.RouteIdentity. Join it with a client key to give each client a
// quota per route:
//
//	app.Get("/items/:id", fiberlimit.New(lim, fiberlimit.Config{
//		KeyGenerator: fiberlimit.JoinKeys(fiberlimit.KeyByRoute, fiberlimit.KeyByIP),
//	}), getItem)
//
// Fiber runs a middleware registered with app.Use or app.Group as a route
// of its own, so there c.Route() is the Use or Group prefix, such as "/" or
// "/api", and every route under it shares one key. Register the middleware
// on each route to tell them apart.
func KeyByRoute(c *fiber.Ctx) string {
	return httplimit.RouteIdentity(c.Method() + " " + c.Route().Path)
}

// JoinKeys returns a KeyGenerator that keys a request by every key keys
// return, joined with slidelimit.JoinIdentities:
// JoinKeys(KeyByRoute, KeyByIP) gives each client one quota per route. If
// any key is empty, the joined key is empty too.
func JoinKeys(keys ...func(c *fiber.Ctx) string) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		if len(keys) == 0 {
			return ""
		}
		parts := make([]string, len(keys))
		for i, k := range keys {
			if parts[i] = k(c); parts[i] == "" {
				return ""
			}
		}
		return slidelimit.JoinIdentities(parts...)
	}
}

// FirstKey returns a KeyGenerator that keys a request by the first of keys
// that is not empty: FirstKey(KeyByHeader("X-API-Key"), KeyByIP) limits
// clients with an API key by the key and the others by their IP. If every
// key is empty, so is the result.
func FirstKey(keys ...func(c *fiber.Ctx) string) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		for _, k := range keys {
			if id := k(c); id != "" {
				return id
			}
		}
		return ""
	}
}
