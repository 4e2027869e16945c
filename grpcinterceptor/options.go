package grpclimit

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"

	slidelimit "github.com/slidelimit/slidelimit/core"
)

// Option configures the interceptors and Limiter of this package.
type Option func(*config)

// ErrorHook receives the errors that are the server's to fix: Redis
// failures (wrapping slidelimit.ErrUnavailable, whatever the failure policy
// decided), key functions that fail with codes.Internal or codes.Unknown,
// such as KeyByIP on a peer without an IP address, and custom key
// functions that return an empty identity. Calls refused because the
// caller sent no identity (codes.Unauthenticated) are not reported. It is
// called on the call's goroutine and must be safe for concurrent use.
type ErrorHook func(ctx context.Context, fullMethod string, err error)

type config struct {
	limiter      *slidelimit.Limiter
	methods      map[string]*slidelimit.Limiter // by "pkg.Service/Method" or "pkg.Service"
	choose       func(ctx context.Context, call Call) *slidelimit.Limiter
	key          KeyFunc
	skip         map[string]bool // by "pkg.Service/Method" or "pkg.Service"
	skipFunc     func(ctx context.Context, call Call) bool
	proxies      slidelimit.TrustedProxies
	forwardedKey string
	headers      slidelimit.Headers
	noHeaders    bool
	noOpenLimit  bool
	msgLimiter   *slidelimit.Limiter
	msgKey       KeyFunc
	onError      ErrorHook
}

func newConfig(lim *slidelimit.Limiter, opts []Option) *config {
	c := &config{
		limiter:      lim,
		key:          KeyByIP(0),
		forwardedKey: DefaultForwardedKey,
		onError:      logError,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(c)
		}
	}
	return c
}

// logError is the default ErrorHook: slog at level Error, as the HTTP
// adapters log.
func logError(ctx context.Context, fullMethod string, err error) {
	slog.ErrorContext(ctx, "grpclimit: rate limit", "method", fullMethod, "err", err)
}

// WithKey sets how callers are identified. The default is KeyByIP(0): the
// client IP address, IPv6 addresses grouped by /64.
func WithKey(key KeyFunc) Option {
	return func(c *config) {
		if key != nil {
			c.key = key
		}
	}
}

// WithMethodLimiters gives methods their own limiters in place of the one
// passed to the interceptor. Each map key is a full method name,
// "/package.Service/Method", or a service name, "package.Service" (or
// "package.Service/*"), which covers every method of the service; a
// method's own entry wins over its service's. A nil limiter leaves the
// methods it names unlimited. Several calls add to the map.
func WithMethodLimiters(limiters map[string]*slidelimit.Limiter) Option {
	return func(c *config) {
		if c.methods == nil {
			c.methods = make(map[string]*slidelimit.Limiter, len(limiters))
		}
		for name, lim := range limiters {
			if n := methodPattern(name); n != "" {
				c.methods[n] = lim
			}
		}
	}
}

// WithLimiterFunc chooses each call's limiter with choose, for example by
// the caller's plan, instead of by the method map and the default limiter.
// A nil result leaves the call unlimited. The default uses
// WithMethodLimiters and then the limiter passed to the interceptor.
func WithLimiterFunc(choose func(ctx context.Context, call Call) *slidelimit.Limiter) Option {
	return func(c *config) { c.choose = choose }
}

// WithSkip exempts methods from every limit, such as the health service:
// WithSkip("grpc.health.v1.Health"). Names are full method names or service
// names, as in WithMethodLimiters. Several calls add to the list.
func WithSkip(names ...string) Option {
	return func(c *config) {
		if c.skip == nil {
			c.skip = make(map[string]bool, len(names))
		}
		for _, name := range names {
			if n := methodPattern(name); n != "" {
				c.skip[n] = true
			}
		}
	}
}

// WithSkipFunc exempts the calls for which skip returns true from every
// limit, in addition to those named by WithSkip. The default skips none.
func WithSkipFunc(skip func(ctx context.Context, call Call) bool) Option {
	return func(c *config) { c.skipFunc = skip }
}

// WithTrustedProxies lists the networks of the proxies, such as a load
// balancer or Envoy, whose forwarding metadata is believed. When a call's
// peer is in one of them, Call.ClientIP is taken from the metadata named by
// WithForwardedKey by slidelimit.TrustedProxies.ClientAddr: its hops are
// walked from the right, past every trusted address, to the first
// untrusted one, exactly as httplimit.ClientIP does for HTTP. A single
// address is a /32 or /128. slidelimit.ParseTrustedProxies parses a list
// of strings into a slidelimit.TrustedProxies, passed on as
// WithTrustedProxies(proxies...). Several calls add to the list. The
// default trusts no proxy, so no client can choose its own key by sending
// forwarding metadata.
func WithTrustedProxies(prefixes ...netip.Prefix) Option {
	return func(c *config) { c.proxies = append(c.proxies, prefixes...) }
}

// WithForwardedKey names the metadata key that trusted proxies set to the
// client's address. The default is DefaultForwardedKey, "x-forwarded-for".
func WithForwardedKey(key string) Option {
	return func(c *config) {
		if key != "" {
			c.forwardedKey = strings.ToLower(key)
		}
	}
}

// WithHeaders selects the rate-limit fields sent in metadata, by
// slidelimit.Headers: allowed calls carry them in their response headers,
// denied calls in their trailers. Field names are lower case: ratelimit,
// ratelimit-policy, x-ratelimit-limit, x-ratelimit-remaining,
// x-ratelimit-reset and, on denials, retry-after. The default, the zero
// Headers, sends every field, with x-ratelimit-reset in seconds from now.
func WithHeaders(h slidelimit.Headers) Option {
	return func(c *config) { c.headers = h }
}

// WithoutHeaders stops sending rate-limit fields in the response headers of
// allowed calls. Denied calls still carry them in their trailers, as
// selected by WithHeaders. The default sends them.
func WithoutHeaders() Option {
	return func(c *config) { c.noHeaders = true }
}

// WithoutStreamOpenLimit stops limiting streams when they open, so that
// only WithMessageLimit applies to them. The default counts each stream
// once, when it opens, against the call's limiter.
func WithoutStreamOpenLimit() Option {
	return func(c *config) { c.noOpenLimit = true }
}

// WithMessageLimit also limits each message a stream receives, with its own
// limiter and key: once the limiter denies, RecvMsg returns a
// codes.ResourceExhausted error instead of the message, which the handler
// usually returns. The key is computed once, when the stream opens; nil
// means the call's key (WithKey). Unary calls are not affected. The default
// limits no message.
func WithMessageLimit(lim *slidelimit.Limiter, key KeyFunc) Option {
	return func(c *config) { c.msgLimiter, c.msgKey = lim, key }
}

// WithErrorHook reports errors to hook instead of the default logger.
// A Redis failure is reported whether the failure policy admits the call
// (fail-open, the default) or refuses it (fail-closed). A nil hook
// discards errors. The default logs each with slog.Default at level Error.
func WithErrorHook(hook ErrorHook) Option {
	return func(c *config) { c.onError = hook }
}

// methodPattern normalizes a name in a method map or skip list to
// "pkg.Service/Method" or "pkg.Service".
func methodPattern(name string) string {
	name = strings.TrimPrefix(strings.TrimSpace(name), "/")
	return strings.TrimSuffix(name, "/*")
}

// lookup returns the entry of m that covers fullMethod: its own, or else
// its service's.
func lookup[V any](m map[string]V, fullMethod string) (V, bool) {
	name := strings.TrimPrefix(fullMethod, "/")
	if v, ok := m[name]; ok {
		return v, true
	}
	if i := strings.LastIndexByte(name, '/'); i > 0 {
		v, ok := m[name[:i]]
		return v, ok
	}
	var zero V
	return zero, false
}
