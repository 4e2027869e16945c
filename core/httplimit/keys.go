package httplimit

import (
	"fmt"
	"net/http"
	"net/textproto"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// KeyFunc returns the identity a request is limited by: requests with the
// same identity share one quota. An error, or an empty identity, leaves the
// request undecided: the middleware reports the error and answers with its
// error handler (500 by default).
//
// The helpers below build the common ones; any function of this type works.
type KeyFunc func(r *http.Request) (string, error)

// KeyByIP keys a request by its peer address, r.RemoteAddr, with IPv6
// addresses grouped by /64: ClientIP{}.Key. It is the middleware's default.
// Behind a proxy, use the Key method of a ClientIP that lists the proxy in
// TrustedProxies instead, or every client shares the proxy's quota:
//
//	proxies, err := slidelimit.ParseTrustedProxies(strings.Split(os.Getenv("TRUSTED_PROXIES"), ",")...)
//	key := httplimit.ClientIP{TrustedProxies: proxies}.Key
func KeyByIP(r *http.Request) (string, error) {
	return ClientIP{}.Key(r)
}

// KeyByHeader keys a request by the value of the header name, such as an
// API key, as slidelimit.HeaderIdentity(name, value, opts...): by default
// "header:x-api-key:sha256:" and a digest of the value, so that the secret
// never stands in clear in a Redis key; slidelimit.HashKey keys the digest
// and slidelimit.Readable keeps the value readable for debugging. The
// identity is the one the other adapters and the gRPC interceptors give
// the same value, so a client has one quota across all of them. A request
// without the header, or with it empty, is an error wrapping
// slidelimit.ErrInvalidKey; to fall back to the client IP instead, use
// FirstKey(KeyByHeader(name), KeyByIP).
//
// The header is only as trustworthy as whatever checks it: limit by an API
// key after, or together with, the code that validates the key, or clients
// get a fresh quota for every value they invent.
func KeyByHeader(name string, opts ...slidelimit.SecretOption) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("%w: httplimit: no %s header", slidelimit.ErrInvalidKey, textproto.CanonicalMIMEHeaderKey(name))
		}
		return slidelimit.HeaderIdentity(name, v, opts...), nil
	}
}

// KeyByContext keys a request by the value stored under key in its context,
// such as the user an authentication middleware put there, as
// slidelimit.UserIdentity of the value: "user:42". The middleware must run
// after the one that stores the value. A missing value is an error wrapping
// slidelimit.ErrInvalidKey.
func KeyByContext(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		return slidelimit.UserIdentity(r.Context().Value(key))
	}
}

// KeyByPattern keys a request by the route it takes, as
// slidelimit.RouteIdentity of its ServeMux pattern, such as
// "route:GET /items/{id}". Join it with a client key to give every client
// a quota per route:
//
//	httplimit.JoinKeys(httplimit.KeyByPattern(mux), httplimit.KeyByIP)
//
// The pattern is r.Pattern when the middleware wraps a handler registered on
// a ServeMux (or a router that sets r.Pattern). When the middleware wraps
// the mux itself, r.Pattern is not yet set, and KeyByPattern asks mux for
// the pattern the request will take; pass nil if there is no such mux. A
// request that matches no pattern is keyed by the empty route, so all of a
// client's unmatched requests share one quota.
//
// chi and gorilla/mux run Router.Use middleware before they route, so
// r.Pattern is still empty there; with them, give each route or route group
// a middleware of its own, or read the router's route in a KeyFunc of your
// own and pass it through slidelimit.RouteIdentity.
func KeyByPattern(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) (string, error) {
		pattern := r.Pattern
		if pattern == "" && mux != nil {
			_, pattern = mux.Handler(r)
		}
		return slidelimit.RouteIdentity(pattern), nil
	}
}

// JoinKeys keys a request by every identity keys return, joined with
// slidelimit.JoinIdentities: JoinKeys(KeyByPattern(mux), KeyByIP) gives a
// client one quota per route. The first error is returned.
func JoinKeys(keys ...KeyFunc) KeyFunc {
	return adapter.JoinKeys(keys...)
}

// FirstKey keys a request by the first of keys that returns a non-empty
// identity without error: FirstKey(KeyByHeader("X-API-Key"), KeyByIP) limits
// clients with an API key by the key and the others by their IP. If none
// does, it returns the last error.
func FirstKey(keys ...KeyFunc) KeyFunc {
	return adapter.FirstKey(keys...)
}
