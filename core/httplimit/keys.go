package httplimit

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"

	slidelimit "github.com/slidelimit/slidelimit/core"
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
// TrustedProxies instead, or every client shares the proxy's quota.
func KeyByIP(r *http.Request) (string, error) {
	return ClientIP{}.Key(r)
}

// KeyByHeader keys a request by the value of the header name, such as an
// API key, as HeaderIdentity(name, value). A request without the header, or
// with it empty, is an error wrapping slidelimit.ErrInvalidKey; to fall back
// to the client IP instead, use FirstKey(KeyByHeader(name), KeyByIP).
//
// The header is only as trustworthy as whatever checks it: limit by an API
// key after, or together with, the code that validates the key, or clients
// get a fresh quota for every value they invent.
func KeyByHeader(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		v := r.Header.Get(name)
		if v == "" {
			return "", fmt.Errorf("%w: httplimit: no %s header", slidelimit.ErrInvalidKey, textproto.CanonicalMIMEHeaderKey(name))
		}
		return HeaderIdentity(name, v), nil
	}
}

// KeyByContext keys a request by the value stored under key in its context,
// such as the user an authentication middleware put there, as
// ContextIdentity of the value. The middleware must run after the one that
// stores the value. A missing value is an error wrapping
// slidelimit.ErrInvalidKey.
func KeyByContext(key any) KeyFunc {
	return func(r *http.Request) (string, error) {
		return ContextIdentity(r.Context().Value(key))
	}
}

// KeyByPattern keys a request by the route it takes, as RouteIdentity of its
// ServeMux pattern, such as "GET /items/{id}". Join it with a client key to
// give every client a quota per route:
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
// own and pass it through RouteIdentity.
func KeyByPattern(mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) (string, error) {
		pattern := r.Pattern
		if pattern == "" && mux != nil {
			_, pattern = mux.Handler(r)
		}
		return RouteIdentity(pattern), nil
	}
}

// JoinKeys keys a request by every identity keys return, joined with
// slidelimit.JoinIdentities: JoinKeys(KeyByPattern(mux), KeyByIP) gives a
// client one quota per route. The first error is returned.
func JoinKeys(keys ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		parts := make([]string, len(keys))
		for i, k := range keys {
			id, err := k(r)
			if err != nil {
				return "", err
			}
			parts[i] = id
		}
		return slidelimit.JoinIdentities(parts...), nil
	}
}

// FirstKey keys a request by the first of keys that returns a non-empty
// identity without error: FirstKey(KeyByHeader("X-API-Key"), KeyByIP) limits
// clients with an API key by the key and the others by their IP. If none
// does, it returns the last error.
func FirstKey(keys ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		err := fmt.Errorf("%w: httplimit: FirstKey has no key functions", slidelimit.ErrInvalidKey)
		for _, k := range keys {
			var id string
			if id, err = k(r); err == nil && id != "" {
				return id, nil
			}
		}
		if err == nil {
			err = fmt.Errorf("%w: httplimit: every key function returned an empty identity", slidelimit.ErrInvalidKey)
		}
		return "", err
	}
}

// HeaderIdentity returns the identity of a request whose header name has
// value: "header:" + the canonical name + ":" + value. It never equals an
// identity made by slidelimit.IPIdentity, RouteIdentity or ContextIdentity,
// so a client cannot pick a header value that shares another key's quota.
// Every adapter of this project keys by header through it.
func HeaderIdentity(name, value string) string {
	return "header:" + textproto.CanonicalMIMEHeaderKey(name) + ":" + value
}

// RouteIdentity returns the identity of a route, such as a ServeMux pattern
// or a router's method and path template: "route:" + route. Every adapter
// of this project keys by route through it.
func RouteIdentity(route string) string {
	return "route:" + route
}

// ContextIdentity returns the identity of a value stored by an
// authentication layer, such as a user id: "ctx:" + the value as a string.
// It accepts a non-empty string, a fmt.Stringer and any integer type; nil,
// an empty string and other types are an error wrapping
// slidelimit.ErrInvalidKey. Every adapter of this project keys by a stored
// value through it.
func ContextIdentity(v any) (string, error) {
	var s string
	switch v := v.(type) {
	case nil:
		return "", fmt.Errorf("%w: httplimit: no value in the context", slidelimit.ErrInvalidKey)
	case string:
		s = v
	case fmt.Stringer:
		s = v.String()
	case int:
		s = strconv.Itoa(v)
	case int64:
		s = strconv.FormatInt(v, 10)
	case int32:
		s = strconv.FormatInt(int64(v), 10)
	case uint:
		s = strconv.FormatUint(uint64(v), 10)
	case uint64:
		s = strconv.FormatUint(v, 10)
	case uint32:
		s = strconv.FormatUint(uint64(v), 10)
	default:
		return "", fmt.Errorf("%w: httplimit: context value of type %T is not a string, fmt.Stringer or integer", slidelimit.ErrInvalidKey, v)
	}
	if s == "" {
		return "", fmt.Errorf("%w: httplimit: empty value in the context", slidelimit.ErrInvalidKey)
	}
	return "ctx:" + s, nil
}
