package fiberlimit

import (
	"net"
	"net/netip"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// ClientIP keys requests by client IP, found by slidelimit.ClientIP, the
// resolver every adapter of this project shares, with the same fields.
// The zero value keys by the peer address, c.Context().RemoteAddr(), and
// groups IPv6 clients by /64.
//
// Behind load balancers or reverse proxies, list their networks in
// TrustedProxies, and name the header they set in Header (X-Forwarded-For
// by default, every line of it; or Forwarded or X-Real-IP): from a trusted
// peer, the header's hops are walked from the right past every trusted
// address to the first untrusted one, the last address no client could
// forge. The app's fiber.Config.ProxyHeader and TrustedProxies play no
// part; KeyByFiberIP follows them instead.
//
//	proxies, err := slidelimit.ParseTrustedProxies(strings.Split(os.Getenv("TRUSTED_PROXIES"), ",")...)
//	app.Use(fiberlimit.New(lim, fiberlimit.Config{
//		KeyGenerator: fiberlimit.ClientIP{TrustedProxies: proxies}.Key,
//	}))
//
// A ClientIP is a small value, safe for concurrent use while no one changes
// its fields.
type ClientIP slidelimit.ClientIP

// Addr returns the client IP of c's request, and false if the peer has no
// IP address.
func (ip ClientIP) Addr(c *fiber.Ctx) (netip.Addr, bool) {
	peer, ok := peerAddr(c)
	if !ok {
		return peer, false
	}
	return slidelimit.ClientIP(ip).Addr(peer, headerValues(c)), true
}

// peerAddr returns the address of c's peer, and false if it has none.
func peerAddr(c *fiber.Ctx) (netip.Addr, bool) {
	switch a := c.Context().RemoteAddr().(type) {
	case *net.TCPAddr:
		// What PeerAddr(a.String()) gives, without formatting it.
		addr, ok := netip.AddrFromSlice(a.IP)
		return addr.Unmap().WithZone(a.Zone), ok
	case nil:
		return netip.Addr{}, false
	default:
		return slidelimit.PeerAddr(a.String())
	}
}

// headerValues returns the values of c's request header by name, every
// line, as http.Header.Values does.
func headerValues(c *fiber.Ctx) func(name string) []string {
	return func(name string) []string {
		lines := c.Request().Header.PeekAll(name)
		values := make([]string, len(lines))
		for i, l := range lines {
			values[i] = string(l) // a copy: fasthttp reuses the bytes
		}
		return values
	}
}

// Key returns the identity of c's client, slidelimit.IPIdentity of Addr,
// such as "ip:203.0.113.9" or "ip:2001:db8::/64". It is a KeyGenerator. A
// request without a client IP gets the empty key, which is an error.
func (ip ClientIP) Key(c *fiber.Ctx) string {
	peer, ok := peerAddr(c)
	if !ok {
		return ""
	}
	id, err := slidelimit.ClientIP(ip).Identity(peer, headerValues(c))
	if err != nil {
		return ""
	}
	return id
}

// KeyByIP keys a request by its peer address with IPv6 grouped by /64:
// ClientIP{}.Key. It is the default KeyGenerator, whose grouping
// Config.IPv6Prefix changes. Behind a proxy every client shares the
// proxy's quota: use a ClientIP that lists the proxy in TrustedProxies.
func KeyByIP(c *fiber.Ctx) string {
	return ClientIP{}.Key(c)
}

// KeyByFiberIP keys a request by c.IP(), the client IP as Fiber resolves it
// under the app's fiber.Config.ProxyHeader, with IPv6 grouped by /64.
// Prefer ClientIP{TrustedProxies: ...}.Key; use this only to follow an
// app's proxy settings you already rely on, and mind Fiber's caveats:
//   - ProxyHeader without EnableTrustedProxyCheck and TrustedProxies
//     believes the header from any client, which then picks its own key;
//   - c.IP() takes the left-most address of X-Forwarded-For, the one a
//     client forges when its proxy appends to the header, so only a header
//     the proxy overwrites, such as X-Real-IP, is safe;
//   - with EnableIPValidation, an IPv4-mapped X-Real-IP
//     ("::ffff:198.51.100.9") is rejected and the client keyed as the
//     proxy; without it, c.IP() is the header's raw value;
//   - it reads no Forwarded header.
func KeyByFiberIP(c *fiber.Ctx) string {
	return slidelimit.IPIdentity(c.IP(), 0)
}

// KeyByHeader returns a KeyGenerator that keys a request by the value of
// its header name, such as an API key, as slidelimit.HeaderIdentity(name,
// value, opts...): by default "header:x-api-key:sha256:" and a digest of
// the value, so that the secret never stands in clear in a Redis key;
// slidelimit.HashKey keys the digest and slidelimit.Readable keeps the
// value readable for debugging. The identity is the one the other adapters
// and the gRPC interceptors give the same value. A request without the
// header gets the empty key, which is an error; to fall back to the client
// IP instead, use FirstKey(KeyByHeader(name), KeyByIP).
//
// The header is only as trustworthy as whatever checks it: limit by an API
// key after, or together with, the handler that validates the key, or
// clients get a fresh quota for every value they invent.
func KeyByHeader(name string, opts ...slidelimit.SecretOption) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		v := c.Get(name)
		if v == "" {
			return ""
		}
		return slidelimit.HeaderIdentity(name, v, opts...)
	}
}

// KeyByLocals returns a KeyGenerator that keys a request by the value an
// earlier handler stored with c.Locals(key, value), such as the user an
// authentication middleware found, as slidelimit.UserIdentity of the value
// ("user:42"): a string, a fmt.Stringer or an integer. A missing value, or
// one of another type, gets the empty key, which is an error. The rate
// limiter must run after the handler that stores the value.
func KeyByLocals(key any) func(c *fiber.Ctx) string {
	return func(c *fiber.Ctx) string {
		id, err := slidelimit.UserIdentity(c.Locals(key))
		if err != nil {
			return ""
		}
		return id
	}
}

// KeyByRoute keys a request by its method and the path of the route the
// middleware is registered on, such as "GET /items/:id", as
// slidelimit.RouteIdentity. Join it with a client key to give each client a
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
	return slidelimit.RouteIdentity(c.Method() + " " + c.Route().Path)
}

// JoinKeys returns a KeyGenerator that keys a request by every key keys
// return, joined with slidelimit.JoinIdentities:
// JoinKeys(KeyByRoute, KeyByIP) gives each client one quota per route. If
// any key is empty, the joined key is empty too.
func JoinKeys(keys ...func(c *fiber.Ctx) string) func(c *fiber.Ctx) string {
	return adapter.Lenient(adapter.JoinKeys(strict(keys)...))
}

// strict turns KeyGenerators into key functions that fail on "".
func strict(keys []func(c *fiber.Ctx) string) []func(*fiber.Ctx) (string, error) {
	out := make([]func(*fiber.Ctx) (string, error), len(keys))
	for i, k := range keys {
		out[i] = adapter.Strict(k)
	}
	return out
}

// FirstKey returns a KeyGenerator that keys a request by the first of keys
// that is not empty: FirstKey(KeyByHeader("X-API-Key"), KeyByIP) limits
// clients with an API key by the key and the others by their IP. If every
// key is empty, so is the result.
func FirstKey(keys ...func(c *fiber.Ctx) string) func(c *fiber.Ctx) string {
	return adapter.Lenient(adapter.FirstKey(strict(keys)...))
}
