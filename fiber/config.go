package fiberlimit

import (
	"context"
	"strings"

	"github.com/gofiber/fiber/v2"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// Config configures the handler returned by New, in the manner of Fiber's
// own limiter middleware: every field is optional, and a zero field takes
// its value from ConfigDefault.
//
// A Config is read once, by New; changing it afterwards changes nothing.
type Config struct {
	// Next skips the middleware for the requests on which it returns true:
	// they go straight to the next handler, neither counted nor given
	// rate-limit headers. Use it for health checks and allow-lists.
	//
	// Optional. Default: nil, which skips nothing.
	Next func(c *fiber.Ctx) bool

	// Limiter chooses the limiter for each request, for different limits
	// per route or per plan; build each limiter, and so validate its
	// limits, once with slidelimit.New. When it returns nil, the limiter
	// given to New is used.
	//
	// Optional. Default: nil, which uses the limiter given to New.
	Limiter func(c *fiber.Ctx) *slidelimit.Limiter

	// KeyGenerator returns the identity a request is limited by: requests
	// with the same identity share one quota. An empty identity leaves the
	// request undecided: it goes to ErrorHandler (500 by default). The
	// string may come from c.Get or c.Params, which Fiber reuses after the
	// handler returns; New copies it before it reaches the limiter (all
	// but the keys of KeyByIP and ClientIP.Key, strings of their own).
	//
	// KeyByIP, KeyByHeader, KeyByLocals and KeyByRoute build the common
	// keys; JoinKeys and FirstKey combine them.
	//
	// Optional. Default: KeyByIP, the peer address, with IPv6Prefix.
	// Behind a proxy, use ClientIP{TrustedProxies: ...}.Key.
	KeyGenerator func(c *fiber.Ctx) string

	// IPv6Prefix is the network length by which the default KeyGenerator
	// groups IPv6 clients, as in slidelimit.IPIdentity: 128 keeps each
	// address apart. It is ignored when KeyGenerator is set.
	//
	// Optional. Default: 0, which means slidelimit.DefaultIPv6Prefix (64).
	IPv6Prefix int

	// Cost returns how many units a request takes, such as more for an
	// expensive search. A cost below 1 or above the smallest quota is an
	// error (slidelimit.ErrInvalidCost), answered by ErrorHandler.
	//
	// Optional. Default: nil, which costs every request 1.
	Cost func(c *fiber.Ctx) int
	// Limits returns the limits a request is held to instead of the
	// limiter's own, such as a tenant's plan read from its token
	// (slidelimit.Limiter.AllowLimits). Returning none keeps the limiter's
	// own; invalid limits are an error (slidelimit.ErrInvalidLimit),
	// answered by ErrorHandler. Default: the limiter's own.
	Limits func(c *fiber.Ctx) []slidelimit.Limit
	// Tree returns the tenant a request belongs to and the levels of its
	// tree, such as its organisation's, its team's and its API key's
	// limits, all decided at once by slidelimit.Limiter.AllowTree: the
	// request is admitted only if every level has room, and a denial
	// records nothing at any level. It takes the place of KeyGenerator and
	// Limits. The rate-limit headers list every level's limits by name, and
	// a denial names the one that bound it, so give each level's limits its
	// level's name (slidelimit.Limit.Named). Cost, Settle, the refunds and
	// places in flight act on every level. The tenant and the levels'
	// identities are copied, so they may be read from c.Get. An error, or
	// an empty tenant, is a key error; an invalid tree is the limiter's
	// error (slidelimit.ErrInvalidLimit, slidelimit.ErrInvalidKey); either
	// is answered by ErrorHandler.
	//
	// Optional. Default: nil, which limits by KeyGenerator.
	Tree func(c *fiber.Ctx) (tenant string, levels []slidelimit.Level, err error)

	// LimitReached answers a request the limiter denied. When it runs, the
	// rate-limit headers, Retry-After among them, are already set on the
	// response; res is the denial, with the violated limit in res.Limit.
	// Unlike the LimitReached of Fiber's limiter, it receives the result,
	// so that it can say when to retry.
	//
	// Optional. Default: DefaultLimitReached, 429 Too Many Requests with
	// an application/problem+json body.
	LimitReached func(c *fiber.Ctx, res slidelimit.Result) error

	// ErrorHandler answers a request that could not be admitted because of
	// err: Redis failed under slidelimit.FailClosed (err wraps
	// slidelimit.ErrUnavailable, and Retry-After is already set), or the
	// key, the cost or the limiter choice failed. httplimit.FailureStatus
	// gives the fitting status code. Under slidelimit.FailOpen a Redis
	// failure admits the request and never reaches ErrorHandler.
	//
	// Optional. Default: DefaultErrorHandler, which returns a *fiber.Error
	// for the app's ErrorHandler to render: 503 when Redis failed, 500
	// otherwise.
	ErrorHandler func(c *fiber.Ctx, err error) error

	// ErrorHook receives every error the middleware meets: Redis failures,
	// admitted (fail-open) or not, key and cost errors, and failed refunds,
	// settlements, releases and renewals. It runs on the request's
	// goroutine: before the request is answered or passed on, or, for a
	// failed refund, after the next handlers have run; c is valid only
	// while it runs. A failure at the end of a streamed body comes from
	// fasthttp's goroutine with a nil c, since Fiber has reused the
	// request's by then.
	//
	// Optional. Default: a hook that logs each error with slog.Default at
	// level Error but Redis failures, which the limiter reports once per
	// outage (see slidelimit.WithLogger).
	ErrorHook func(c *fiber.Ctx, err error)

	// Headers selects the rate-limit header fields set on every decided
	// response; see slidelimit.Headers.
	//
	// Optional. Default: the zero value, which sets them all:
	// RateLimit-Policy, RateLimit, X-RateLimit-Limit,
	// X-RateLimit-Remaining, X-RateLimit-Reset in seconds from now, and
	// Retry-After on denials.
	Headers slidelimit.Headers

	// SkipFailedRequests makes failed requests not count: after the next
	// handlers have run, a request whose status Failed deems failed (by
	// default 400 and above) gives its units back with
	// slidelimit.Limiter.Refund. When a handler returns an error, its
	// status is the Code of a *fiber.Error, and otherwise 500, as Fiber's
	// DefaultErrorHandler answers. The headers already set still count the
	// request.
	//
	// Optional. Default: false, which counts every admitted request.
	SkipFailedRequests bool

	// SkipSuccessfulRequests makes successful requests not count, the
	// converse of SkipFailedRequests: only failed requests use up the
	// quota, as for a limit on failed logins.
	//
	// Optional. Default: false, which counts every admitted request.
	SkipSuccessfulRequests bool

	// Failed reports whether a response status makes a request failed, for
	// SkipFailedRequests and SkipSuccessfulRequests.
	//
	// Optional. Default: httplimit.Failed, 400 and above.
	Failed func(status int) bool

	// Settle settles each admitted request from its response: once the
	// next handlers have run, or a body they stream has been sent, it is
	// given the response's status (as for SkipFailedRequests), header
	// fields and body (its last 64 KiB, adapter.MaxBody) and returns the
	// request's actual cost, and whether it knows it. The request is then
	// settled to that cost (slidelimit.Limiter.Settle) at the time it was
	// admitted, so that a cost known only after the response, such as an
	// LLM's tokens, counts exactly: admit an estimate (Cost, such as the
	// request's max_tokens), and settle what it used, read from the body
	// by httplimit.TotalTokens. When Settle does not know, the request
	// keeps its estimate. The settlement releases the request's places in
	// flight too, in one Redis round trip; a request that
	// SkipFailedRequests or SkipSuccessfulRequests gives back is refunded
	// instead. The body is kept only when Settle is set.
	//
	// Settle is given the response alone, not c: Fiber reuses c once the
	// handlers return, before a streamed body has been sent. A handler
	// that knows the cost itself can set it in a header field of the
	// response.
	//
	// Optional. Default: nil, which settles nothing: a request keeps the
	// cost it was admitted for.
	Settle func(r httplimit.Response) (actual int, ok bool)
}

// ConfigDefault is the configuration New uses for every field a Config
// leaves zero.
var ConfigDefault = Config{
	KeyGenerator: KeyByIP,
	LimitReached: DefaultLimitReached,
	ErrorHandler: DefaultErrorHandler,
	ErrorHook:    logError,
	Failed:       httplimit.Failed,
}

// configDefault fills the zero fields of the first config, if any, from
// ConfigDefault.
func configDefault(config ...Config) Config {
	if len(config) < 1 {
		return ConfigDefault
	}
	cfg := config[0]
	if cfg.KeyGenerator == nil && cfg.IPv6Prefix != 0 {
		cfg.KeyGenerator = ClientIP{IPv6Prefix: cfg.IPv6Prefix}.Key
	}
	return adapter.WithDefaults(cfg, ConfigDefault)
}

// DefaultLimitReached answers 429 Too Many Requests with the
// application/problem+json body of httplimit.NewProblem(res). It is the
// default LimitReached.
func DefaultLimitReached(c *fiber.Ctx, res slidelimit.Result) error {
	c.Set(fiber.HeaderContentType, httplimit.ContentTypeProblem)
	return c.Status(fiber.StatusTooManyRequests).Send(httplimit.NewProblem(res).JSON())
}

// DefaultErrorHandler returns a *fiber.Error with the status
// httplimit.FailureStatus(err) and its status text as message, for the
// app's ErrorHandler to render; err itself, which may name Redis addresses,
// stays out of the response. It is the default ErrorHandler.
func DefaultErrorHandler(_ *fiber.Ctx, err error) error {
	return fiber.NewError(httplimit.FailureStatus(err))
}

func logError(c *fiber.Ctx, err error) {
	if c == nil { // the end of a streamed body, after Fiber reused c
		adapter.LogError(context.Background(), "fiberlimit", err)
		return
	}
	// The path is copied: Fiber reuses its bytes, and a slog handler may
	// keep the record after the request.
	adapter.LogError(c.UserContext(), "fiberlimit", err, "method", c.Method(), "path", strings.Clone(c.Path()))
}
