package grpclimit

import (
	"context"
	"errors"
	"net/netip"
	"strings"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// Call describes a call, or a stream when it opens, as key functions and
// limiter selectors see it.
type Call struct {
	// FullMethod is the method's full name, "/package.Service/Method".
	FullMethod string
	// ClientIP is the address of the client: the peer's, or, when the peer
	// is a trusted proxy (see WithTrustedProxies), the one its forwarding
	// metadata names. It is the zero netip.Addr when the peer has no IP
	// address, as over a Unix socket.
	ClientIP netip.Addr
}

// KeyFunc returns the identity a call is counted under, such as
// "ip:203.0.113.9" or "user:42". Calls with the same identity share one
// quota. A KeyFunc that finds nothing to go by returns an error wrapping
// ErrNoIdentity; one that returns an error carrying a gRPC status (see
// google.golang.org/grpc/status) has the call refused with that status, and
// any other error has it refused with codes.Internal.
//
// A KeyFunc must be safe for concurrent use.
type KeyFunc func(ctx context.Context, call Call) (string, error)

// KeyByIP identifies callers by Call.ClientIP, as slidelimit.IPIdentity
// does: an IPv4 address stands for itself, an IPv6 address for its /64
// network (slidelimit.DefaultIPv6Prefix). It is the default key, and gives
// the identity the HTTP adapters' KeyByIP and ClientIP.Key give the same
// client. A call whose peer has no IP address fails with ErrNoIdentity and
// codes.Internal.
func KeyByIP(ctx context.Context, call Call) (string, error) {
	return KeyByIPPrefix(0)(ctx, call)
}

// KeyByIPPrefix is KeyByIP with IPv6 addresses grouped by networks of
// ipv6Prefix bits: 0 means slidelimit.DefaultIPv6Prefix (/64), 128 keeps
// each address apart. It matches the IPv6Prefix field of the HTTP
// adapters' ClientIP.
func KeyByIPPrefix(ipv6Prefix int) KeyFunc {
	return func(_ context.Context, call Call) (string, error) {
		if !call.ClientIP.IsValid() {
			return "", &noIdentity{codes.Internal, "grpclimit: the peer has no IP address to limit by"}
		}
		return slidelimit.IPIdentity(call.ClientIP.String(), ipv6Prefix), nil
	}
}

// KeyByMetadata returns a KeyFunc that identifies callers by the first
// non-empty value of the request metadata key, such as an API key in
// "x-api-key", as slidelimit.HeaderIdentity(key, value, opts...): by
// default "header:x-api-key:sha256:" and a digest of the value, the very
// identity the HTTP adapters' KeyByHeader("X-API-Key") gives the same
// value, so that a client has one quota across REST and gRPC. The value is
// hashed so that the secret never stands in clear in a Redis key;
// slidelimit.HashKey keys the digest and slidelimit.Readable keeps the
// value readable for debugging. A call without the key fails with
// ErrNoIdentity and codes.Unauthenticated; use FirstKey to fall back to
// another key instead.
//
// Limit by an API key after, or together with, the interceptor that
// validates it, or callers get a fresh quota for every value they invent.
func KeyByMetadata(key string, opts ...slidelimit.SecretOption) KeyFunc {
	key = strings.ToLower(key)
	return func(ctx context.Context, _ Call) (string, error) {
		for _, v := range metadata.ValueFromIncomingContext(ctx, key) {
			if v != "" {
				return slidelimit.HeaderIdentity(key, v, opts...), nil
			}
		}
		return "", &noIdentity{codes.Unauthenticated, "grpclimit: missing metadata " + key}
	}
}

// KeyByMethod identifies a call by its method alone, as
// slidelimit.RouteIdentity(FullMethod), "route:/package.Service/Method", so
// that all callers of a method share one quota. Join it with another key to
// count each caller per method, as the HTTP adapters' KeyByRoute does.
func KeyByMethod(_ context.Context, call Call) (string, error) {
	return slidelimit.RouteIdentity(call.FullMethod), nil
}

// KeyByUser returns a KeyFunc that identifies callers by the authenticated
// user that user finds in the context, usually put there by an
// authentication interceptor that runs before the limit, as
// slidelimit.UserIdentity: "user:" and the user, the identity the HTTP
// adapters' KeyByContext gives the same user id. A call for which user
// returns "" fails with ErrNoIdentity and codes.Unauthenticated.
func KeyByUser(user func(ctx context.Context) string) KeyFunc {
	return func(ctx context.Context, _ Call) (string, error) {
		if user != nil {
			if u := user(ctx); u != "" {
				return slidelimit.UserIdentity(u)
			}
		}
		return "", &noIdentity{codes.Unauthenticated, "grpclimit: the call has no authenticated user"}
	}
}

// JoinKeys returns a KeyFunc whose identity joins the identities of keys
// with slidelimit.JoinIdentities, such as a method and a client IP:
// JoinKeys(KeyByMethod, KeyByIP). It fails as soon as one of keys fails.
// Nil keys are skipped.
func JoinKeys(keys ...KeyFunc) KeyFunc {
	return func(ctx context.Context, call Call) (string, error) {
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			if k == nil {
				continue
			}
			p, err := k(ctx, call)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return slidelimit.JoinIdentities(parts...), nil
	}
}

// FirstKey returns a KeyFunc that tries keys in order and returns the
// first identity found: FirstKey(KeyByMetadata("x-api-key"), KeyByIP)
// limits calls with an API key by that key and the others by IP address. A
// key that fails with ErrNoIdentity passes to the next; any other error is
// returned at once. When every key finds nothing, the last one's error is
// returned.
func FirstKey(keys ...KeyFunc) KeyFunc {
	return func(ctx context.Context, call Call) (string, error) {
		var err error = &noIdentity{codes.Unauthenticated, "grpclimit: no key to identify the caller"}
		for _, k := range keys {
			if k == nil {
				continue
			}
			var id string
			if id, err = k(ctx, call); err == nil || !errors.Is(err, ErrNoIdentity) {
				return id, err
			}
		}
		return "", err
	}
}

// DefaultForwardedKey is the metadata key read for the client's address
// when the peer is a trusted proxy, unless WithForwardedKey names another.
const DefaultForwardedKey = "x-forwarded-for"

// clientIP resolves Call.ClientIP from the peer and, when the peer is a
// trusted proxy, the forwarding metadata, by slidelimit.ClientIP, the
// resolver every HTTP adapter of this project uses, so all of them trust
// exactly the same addresses.
func (c *config) clientIP(ctx context.Context) netip.Addr {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return netip.Addr{}
	}
	addr, ok := slidelimit.PeerAddr(p.Addr.String())
	if !ok {
		return netip.Addr{}
	}
	resolver := slidelimit.ClientIP{TrustedProxies: c.proxies, Header: c.forwardedKey}
	return resolver.Addr(addr, func(name string) []string {
		return metadata.ValueFromIncomingContext(ctx, strings.ToLower(name))
	})
}
