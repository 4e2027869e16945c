package ginlimit

import (
	"fmt"
	"net/textproto"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// KeyFunc returns the identity a request is limited by: requests with the
// same identity share one quota. An error, or an empty identity, leaves the
// request undecided: the middleware reports the error and answers with its
// error handler (500 by default).
//
// The helpers below build the common ones; any function of this type works.
type KeyFunc func(c *gin.Context) (string, error)

// ClientIP keys requests by client IP. The zero value uses c.RemoteIP(), the
// peer address, and groups IPv6 clients by /64.
type ClientIP struct {
	// UseClientIP takes the address from c.ClientIP(), which reads
	// forwarding headers (X-Forwarded-For, X-Real-IP, or the header of
	// engine.TrustedPlatform) under the engine's trusted-proxy settings.
	// Set it only after engine.SetTrustedProxies lists your proxies (or
	// nil) or TrustedPlatform names your platform: by default a gin.Engine
	// trusts every proxy, and any client could forge its address.
	UseClientIP bool
	// IPv6Prefix is the network length by which IPv6 clients are grouped;
	// 0 means slidelimit.DefaultIPv6Prefix (/64), 128 keeps each address
	// apart. See slidelimit.IPIdentity.
	IPv6Prefix int
}

// Key returns the identity of c's client, slidelimit.IPIdentity of its
// address, such as "ip:203.0.113.9" or "ip:2001:db8::/64". It is a KeyFunc.
// A request without a client IP is an error wrapping
// slidelimit.ErrInvalidKey.
func (ip ClientIP) Key(c *gin.Context) (string, error) {
	var addr string
	if ip.UseClientIP {
		addr = c.ClientIP()
	} else {
		addr = c.RemoteIP()
	}
	if addr == "" {
		return "", fmt.Errorf("%w: ginlimit: no client IP for RemoteAddr %q", slidelimit.ErrInvalidKey, c.Request.RemoteAddr)
	}
	return slidelimit.IPIdentity(addr, ip.IPv6Prefix), nil
}

// KeyByIP keys a request by its peer address, c.RemoteIP(), with IPv6
// grouped by /64: ClientIP{}.Key. It is the middleware's default, and safe
// whatever the engine's proxy settings; behind a proxy, though, every
// client shares the proxy's quota: use KeyByClientIP there.
func KeyByIP(c *gin.Context) (string, error) {
	return ClientIP{}.Key(c)
}

// KeyByClientIP keys a request by c.ClientIP(), the client address as Gin
// resolves it under the engine's trusted-proxy settings, with IPv6 grouped
// by /64: ClientIP{UseClientIP: true}.Key. Use it only on an engine whose
// trusted proxies are set (engine.SetTrustedProxies or TrustedPlatform);
// see ClientIP.UseClientIP.
func KeyByClientIP(c *gin.Context) (string, error) {
	return ClientIP{UseClientIP: true}.Key(c)
}

// KeyByHeader keys a request by the value of the header name, such as an
// API key, as httplimit.HeaderIdentity(name, value). A request without the
// header is an error wrapping slidelimit.ErrInvalidKey; to fall back to the
// client IP instead, use FirstKey(KeyByHeader(name), KeyByIP).
//
// Limit by an API key after, or together with, the handler that validates
// it, or clients get a fresh quota for every value they invent.
func KeyByHeader(name string) KeyFunc {
	return func(c *gin.Context) (string, error) {
		v := c.GetHeader(name)
		if v == "" {
			return "", fmt.Errorf("%w: ginlimit: no %s header", slidelimit.ErrInvalidKey, textproto.CanonicalMIMEHeaderKey(name))
		}
		return httplimit.HeaderIdentity(name, v), nil
	}
}

// KeyByContext keys a request by the value stored under key with c.Set,
// such as the user id an authentication middleware (gin.BasicAuth stores
// gin.AuthUserKey) put there, as httplimit.ContextIdentity of the value: a
// string, fmt.Stringer or integer. The limiter must run after the
// middleware that stores the value. A missing value is an error wrapping
// slidelimit.ErrInvalidKey.
func KeyByContext(key string) KeyFunc {
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(key)
		return httplimit.ContextIdentity(v)
	}
}

// KeyByRoute keys a request by its route, the method and c.FullPath(), as
// httplimit.RouteIdentity("GET /items/:id"). Join it with a client key to
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
	return httplimit.RouteIdentity(route), nil
}

// JoinKeys keys a request by every identity keys return, joined with
// slidelimit.JoinIdentities: JoinKeys(KeyByRoute, KeyByIP) gives a client
// one quota per route. The first error is returned.
func JoinKeys(keys ...KeyFunc) KeyFunc {
	return func(c *gin.Context) (string, error) {
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

// FirstKey keys a request by the first of keys that returns a non-empty
// identity without error: FirstKey(KeyByContext(gin.AuthUserKey), KeyByIP)
// limits signed-in users by user and the others by IP. If none does, it
// returns the last error.
func FirstKey(keys ...KeyFunc) KeyFunc {
	return func(c *gin.Context) (string, error) {
		err := fmt.Errorf("%w: ginlimit: FirstKey has no key functions", slidelimit.ErrInvalidKey)
		for _, k := range keys {
			var id string
			if id, err = k(c); err == nil && id != "" {
				return id, nil
			}
		}
		if err == nil {
			err = fmt.Errorf("%w: ginlimit: every key function returned an empty identity", slidelimit.ErrInvalidKey)
		}
		return "", err
	}
}
