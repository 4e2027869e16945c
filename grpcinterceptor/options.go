package grpclimit

import (
	"context"
	"net/netip"
	"strings"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"google.golang.org/grpc/codes"
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
	cost         func(ctx context.Context, call Call) int
	limits       func(ctx context.Context, call Call) []slidelimit.Limit
	tree         func(ctx context.Context, call Call) (string, []slidelimit.Level, error)
	refundFail   bool
	refundOK     bool
	failed       func(codes.Code) bool
	proxies      slidelimit.TrustedProxies
	forwardedKey string
	headers      slidelimit.Headers
	noHeaders    bool
	noOpenLimit  bool
	msgLimiter   *slidelimit.Limiter
	msgKey       KeyFunc
	onError      ErrorHook
	settle       func(ctx context.Context, call Call, r Response) (int, bool)
	flow         adapter.Flow[rpc]
}

func newConfig(lim *slidelimit.Limiter, opts []Option) *config {
	c := &config{
		limiter:      lim,
		key:          KeyByIP,
		forwardedKey: DefaultForwardedKey,
		failed:       Failed,
		onError:      logError,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(c)
		}
	}
	c.newFlow()
	return c
}

// logError is the default ErrorHook (see adapter.LogError).
func logError(ctx context.Context, fullMethod string, err error) {
	adapter.LogError(ctx, "grpclimit", err, "method", fullMethod)
}

// WithKey sets how callers are identified. The default is KeyByIP: the
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

// WithSkipMethods exempts methods from every limit, such as the health
// service: WithSkipMethods("grpc.health.v1.Health"). Names are full method
// names or service names, as in WithMethodLimiters. Several calls add to
// the list.
func WithSkipMethods(names ...string) Option {
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

// WithSkip exempts the calls for which skip returns true from every limit,
// in addition to those named by WithSkipMethods, as the WithSkip of the
// HTTP adapters does for requests. The default skips none.
func WithSkip(skip func(ctx context.Context, call Call) bool) Option {
	return func(c *config) { c.skipFunc = skip }
}

// WithCost sets how many units a call takes, such as more for an expensive
// method; a stream takes its cost once, when it opens (messages counted by
// WithMessageLimit take one each). A cost below 1 or above the smallest
// quota refuses the call with codes.Internal and reports an error wrapping
// slidelimit.ErrInvalidCost. The default costs every call 1.
func WithCost(cost func(ctx context.Context, call Call) int) Option {
	return func(c *config) { c.cost = cost }
}

// WithLimits sets the limits a call is held to instead of the limiter's
// own, such as a tenant's plan read from its token's claims
// (slidelimit.Limiter.AllowLimits). Returning none keeps the limiter's
// own; invalid limits fail the call with codes.Internal, like any other
// error of the limiter's. The default is the limiter's own limits.
func WithLimits(limits func(ctx context.Context, call Call) []slidelimit.Limit) Option {
	return func(c *config) { c.limits = limits }
}

// WithTree holds each call to a tenant's tree: tree returns the tenant
// the call belongs to and the levels it is limited at, such as its
// organisation's, its team's and its API key's limits, read from its
// token's claims, all decided at once by slidelimit.Limiter.AllowTree. The
// call is admitted only if every level has room; a denial records nothing
// at any level. tree takes the place of WithKey and WithLimits, for unary
// calls and the opening of streams alike (a stream's messages, under
// WithMessageLimit, are counted flat, by its key or the tenant). The
// rate-limit fields list every level's limits by name, and a denial's
// QuotaFailure and its fields name the limits that bound it, so give each
// level's limits its level's name (slidelimit.Limit.Named). Costs,
// settlement, refunds and places in flight act on every level. An error
// of tree is handled as a key function's: a status error other than
// codes.Internal or codes.Unknown, or ErrNoIdentity (codes.Unauthenticated),
// is the caller's and refuses the call with it, unreported; any other
// error, an empty tenant or an invalid tree refuses it with
// codes.Internal and goes to the ErrorHook. The default, nil, limits by
// WithKey's identity.
func WithTree(tree func(ctx context.Context, call Call) (tenant string, levels []slidelimit.Level, err error)) Option {
	return func(c *config) { c.tree = tree }
}

// WithRefundFailed makes failed calls not count: after the handler has
// returned a status that WithFailedCode deems failed (by default any but
// codes.OK), the call's units are given back with
// slidelimit.Limiter.Refund, as the HTTP adapters' WithRefundFailed does by
// status code. For a stream, the units its opening took are given back
// when the handler returns; messages counted by WithMessageLimit stay
// counted. The rate-limit fields already sent still count the call. The
// default counts every admitted call.
func WithRefundFailed() Option {
	return func(c *config) { c.refundFail = true }
}

// WithRefundSuccessful makes successful calls not count, the converse of
// WithRefundFailed: only failed calls use up the quota, as for a limit on
// failed logins. The default counts every admitted call.
func WithRefundSuccessful() Option {
	return func(c *config) { c.refundOK = true }
}

// WithFailedCode sets which status codes make a call failed, for
// WithRefundFailed and WithRefundSuccessful. The default is Failed: any
// code but codes.OK. A nil f keeps the default.
//
// It is the HTTP adapters' WithFailedStatus for gRPC, named for what f is
// given: a call ends with a codes.Code, not an HTTP status, just as
// KeyByMetadata and KeyByMethod name what the HTTP adapters' KeyByHeader
// and KeyByRoute read there.
func WithFailedCode(f func(code codes.Code) bool) Option {
	return func(c *config) {
		if f != nil {
			c.failed = f
		}
	}
}

// Failed reports whether a call that ended with code failed, by default
// for the refund options: any code but codes.OK.
func Failed(code codes.Code) bool { return code != codes.OK }

// WithTrustedProxies lists the networks of the proxies, such as a load
// balancer or Envoy, whose forwarding metadata is believed. When a call's
// peer is in one of them, Call.ClientIP is taken from the metadata named by
// WithForwardedKey by slidelimit.ClientIP, the resolver every HTTP adapter
// of this project uses: its hops are walked from the right, past every
// trusted address, to the first untrusted one. A single
// address is a /32 or /128. slidelimit.ParseTrustedProxies parses a list
// of strings into a slidelimit.TrustedProxies, passed on as
// WithTrustedProxies(proxies...). Several calls add to the list. The
// default trusts no proxy, so no client can choose its own key by sending
// forwarding metadata.
func WithTrustedProxies(prefixes ...netip.Prefix) Option {
	return func(c *config) { c.proxies = append(c.proxies, prefixes...) }
}

// WithForwardedKey names the metadata key that trusted proxies set to the
// client's address, read as slidelimit.ClientIP reads the HTTP header of
// the same name: "x-forwarded-for" (every value, as a list of hops),
// "forwarded" (RFC 7239 for= elements) or "x-real-ip" (one address). Any
// other key is read as a list of hops like x-forwarded-for. The default is
// DefaultForwardedKey, "x-forwarded-for".
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
// means the call's key (WithKey), or its tenant under WithTree. Unary calls
// are not affected. The default limits no message.
func WithMessageLimit(lim *slidelimit.Limiter, key KeyFunc) Option {
	return func(c *config) { c.msgLimiter, c.msgKey = lim, key }
}

// WithErrorHook reports errors to hook instead of the default logger.
// A Redis failure is reported whether the failure policy admits the call
// (fail-open, the default) or refuses it (fail-closed). A nil hook
// discards errors. The default logs each with slog.Default at level Error
// but Redis failures, which the limiter reports once per outage (see
// slidelimit.WithLogger).
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
