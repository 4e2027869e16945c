package slidelimit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// DefaultIPv6Prefix is the IPv6 network length by which IPIdentity groups
// clients: one /64 is commonly one subscriber, who can pick any of its
// 2^64 addresses.
const DefaultIPv6Prefix = 64

// IPIdentity returns the identity of a client at ip, the address as a string
// such as "203.0.113.9" or "2001:db8::1". An IPv4 address, or an IPv4-mapped
// IPv6 one, stands for itself: "ip:203.0.113.9". An IPv6 address stands for
// its network of ipv6Prefix bits, "ip:2001:db8::/64", so that one client
// cannot dodge its limit by rotating addresses; ipv6Prefix 0 means
// DefaultIPv6Prefix, and 128 keeps each address apart. A string that is not
// an IP address is kept as it is, after "ip:".
//
// Adapters pass the client IP as ClientIP resolves it; never a forwarding
// header from an untrusted peer.
func IPIdentity(ip string, ipv6Prefix int) string {
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return "ip:" + ip
	}
	return addrIdentity(addr, ipv6Prefix)
}

// addrIdentity returns IPIdentity(addr.String(), ipv6Prefix) for a valid
// addr, formatted with one allocation: the identity's own.
func addrIdentity(addr netip.Addr, ipv6Prefix int) string {
	var buf [64]byte // "ip:" and an IPv6 network with its length
	b := append(buf[:0], "ip:"...)
	addr = addr.Unmap()
	if addr.Is4() {
		return string(addr.AppendTo(b))
	}
	if ipv6Prefix <= 0 || ipv6Prefix > 128 {
		ipv6Prefix = DefaultIPv6Prefix
	}
	p, _ := addr.WithZone("").Prefix(ipv6Prefix)
	return string(p.AppendTo(b))
}

// JoinIdentities joins parts into one identity, such as a route and a
// client: JoinIdentities("GET /search", IPIdentity(ip, 0)). The join is
// unambiguous: different lists of parts never give the same identity,
// whatever bytes the parts hold.
func JoinIdentities(parts ...string) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('|')
		}
		for j := 0; j < len(p); j++ {
			if c := p[j]; c == '|' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(p[j])
		}
	}
	return b.String()
}

// HeaderIdentity returns the identity of a client that presents value in
// the request header or gRPC metadata key name, such as an API key in
// X-API-Key: "header:x-api-key:sha256:" and the first 128 bits of the
// value's SHA-256 digest in unpadded base64url. The name is lower-cased, so
// an HTTP header and the gRPC metadata key of the same name give the same
// identity, and one client has one quota across REST and gRPC. Every
// adapter of this project keys by a header or metadata value through it.
//
// The value is hashed because identities become part of Redis keys (see
// Key), where anyone who can list the keys of that Redis could read an API
// key or token in clear. A plain digest still lets someone who holds a
// candidate key check whether it is in use; HashKey keys the digest with
// a secret of the server (HMAC-SHA256) so that no one without the secret
// can, and Readable keeps the value in clear for debugging. Identities made
// with different options never coincide.
func HeaderIdentity(name, value string, opts ...SecretOption) string {
	var cfg secretConfig
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	prefix := "header:" + strings.ToLower(name) + ":"
	switch {
	case cfg.readable:
		return prefix + "clear:" + value
	case cfg.keyed:
		mac := hmac.New(sha256.New, cfg.key)
		mac.Write([]byte(value))
		return prefix + "hmac:" + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)[:16])
	}
	sum := sha256.Sum256([]byte(value))
	return prefix + "sha256:" + base64.RawURLEncoding.EncodeToString(sum[:16])
}

// SecretOption changes how HeaderIdentity, and every adapter's KeyByHeader
// or KeyByMetadata, encodes a secret value. The default hashes it with
// plain SHA-256.
type SecretOption func(*secretConfig)

type secretConfig struct {
	key      []byte
	keyed    bool
	readable bool
}

// HashKey hashes secret values with HMAC-SHA256 under key, a secret of the
// server of at least 32 random bytes, instead of plain SHA-256: without the
// key, no one can tell from Redis whether a given API key is in use. Every
// process that shares a limit must use the same key; a new key starts every
// client on a fresh quota.
func HashKey(key []byte) SecretOption {
	key = append([]byte(nil), key...)
	return func(c *secretConfig) { c.key, c.keyed = key, true }
}

// Readable keeps secret values in clear in identities, and so in Redis
// keys, for debugging: "header:x-api-key:clear:" and the value. It wins
// over HashKey. Do not use it for real API keys or tokens in production.
func Readable() SecretOption {
	return func(c *secretConfig) { c.readable = true }
}

// UserIdentity returns the identity of an authenticated user, such as the
// user id an authentication middleware or interceptor found: "user:" and
// the id. It accepts a non-empty string, a fmt.Stringer and any integer
// type; nil, an empty string and other types are an error wrapping
// ErrInvalidKey. Every adapter of this project keys by a user or a value
// stored by an earlier handler through it, so one user has one quota
// across REST and gRPC.
func UserIdentity(user any) (string, error) {
	var s string
	switch v := user.(type) {
	case nil:
		return "", fmt.Errorf("%w: no user", ErrInvalidKey)
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
		return "", fmt.Errorf("%w: user of type %T is not a string, fmt.Stringer or integer", ErrInvalidKey, user)
	}
	if s == "" {
		return "", fmt.Errorf("%w: empty user", ErrInvalidKey)
	}
	return "user:" + s, nil
}

// RouteIdentity returns the identity of a route, such as an HTTP method and
// path template ("GET /items/{id}") or a gRPC full method name
// ("/pkg.Service/Method"): "route:" and the route. Every adapter of this
// project keys by route or method through it.
func RouteIdentity(route string) string {
	return "route:" + route
}
