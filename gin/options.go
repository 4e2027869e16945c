package ginlimit

import (
	"net/http"

	"github.com/gin-gonic/gin"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// Option configures the middleware returned by New. The With… functions
// of this package make them; a nil Option is ignored.
type Option func(*config)

// config is the middleware's settings, the fields package adapter shares
// with every adapter that takes With… options.
type config = adapter.Options[*gin.Context, DenyHandler, ErrorHandler]

// set builds the options.
var set adapter.Set[Option, *gin.Context, DenyHandler, ErrorHandler]

// DenyHandler answers a request the limiter denied. When it runs, the
// rate-limit headers, Retry-After among them, are already set; res is the
// denial, with the violated limit in res.Limit. The middleware aborts the
// chain after it returns.
type DenyHandler func(c *gin.Context, res slidelimit.Result)

// ErrorHandler answers a request that could not be admitted because of err:
// Redis failed under slidelimit.FailClosed (err wraps
// slidelimit.ErrUnavailable, and Retry-After is already set), or the key
// function, the cost or the limiter choice failed. httplimit.FailureStatus
// gives the fitting status code. The middleware aborts the chain after it
// returns.
type ErrorHandler func(c *gin.Context, err error)

// WithKey sets how requests are told apart. The default is KeyByIP: the
// peer address, with IPv6 grouped by /64. Behind a proxy, use the Key of a
// ClientIP that lists the proxies in TrustedProxies. A nil f keeps the
// default.
func WithKey(f KeyFunc) Option { return set.Key(f) }

// WithLimiterFunc chooses the limiter for each request, for different limits
// per route or per plan; each limiter is built, and validated, once with
// slidelimit.New. When f returns nil, the limiter given to New is used. The
// default uses that limiter for every request.
func WithLimiterFunc(f func(c *gin.Context) *slidelimit.Limiter) Option { return set.Limiters(f) }

// WithCost sets how many units each request takes. The default is 1. A cost
// below 1 or above the smallest quota is an error
// (slidelimit.ErrInvalidCost), answered by the error handler.
func WithCost(f func(c *gin.Context) int) Option { return set.Cost(f) }

// WithLimits sets the limits each request is held to instead of the
// limiter's own, such as a tenant's plan read from its token
// (slidelimit.Limiter.AllowLimits). Returning none keeps the limiter's
// own; invalid limits are an error (slidelimit.ErrInvalidLimit), answered
// by the error handler. The default is the limiter's own limits.
func WithLimits(f func(c *gin.Context) []slidelimit.Limit) Option { return set.Limits(f) }

// WithTree holds each request to a tenant's tree: f returns the tenant
// the request belongs to and the levels it is limited at, such as its
// organisation's, its team's and its API key's limits, read from its
// token, all decided at once by slidelimit.Limiter.AllowTree. The request
// is admitted only if every level has room; a denial records nothing at
// any level. f takes the place of WithKey and WithLimits. The rate-limit
// headers list every level's limits by name, and a denial names the one
// that bound it, so give each level's limits its level's name
// (slidelimit.Limit.Named). Costs, settlement, refunds and places in
// flight act on every level. An error of f or an empty tenant is a key
// error, and an invalid tree the limiter's error (slidelimit.ErrInvalidLimit,
// slidelimit.ErrInvalidKey): either is answered by the error handler. The
// default, nil, limits by WithKey's identity.
func WithTree(f func(c *gin.Context) (tenant string, levels []slidelimit.Level, err error)) Option {
	return set.Tree(f)
}

// WithSkip passes the requests for which f returns true straight on,
// neither counted nor given rate-limit headers: health checks, allow-listed
// clients. The default skips nothing.
func WithSkip(f func(c *gin.Context) bool) Option { return set.Skip(f) }

// WithDenyHandler sets how a denied request is answered. The default,
// DefaultDenyHandler, answers 429 with the application/problem+json body of
// httplimit.NewProblem. A nil h keeps the default.
func WithDenyHandler(h DenyHandler) Option { return set.Deny(h) }

// WithErrorHandler sets how a request is answered when it cannot be
// admitted because of an error; see ErrorHandler. The default,
// DefaultErrorHandler, answers httplimit.FailureStatus(err): 503 with
// Retry-After when Redis failed under slidelimit.FailClosed, 500
// otherwise. Under slidelimit.FailOpen a Redis failure admits the request
// and never reaches the error handler. A nil h keeps the default.
func WithErrorHandler(h ErrorHandler) Option { return set.Fail(h) }

// WithErrorHook sets f to receive every error the middleware meets: Redis
// failures, admitted (fail-open) or not, key and cost errors, and failed
// refunds. The default logs each error with slog.Default at level Error
// but Redis failures, which the limiter reports once per outage (see
// slidelimit.WithLogger).
// To have gin.Logger print them instead, pass
// func(c *gin.Context, err error) { _ = c.Error(err) }, but mind error
// middleware that turns c.Errors into a failure response: under fail-open,
// the request was meant to succeed. A nil f keeps the default.
func WithErrorHook(f func(c *gin.Context, err error)) Option { return set.Hook(f) }

// WithHeaders selects the rate-limit header fields sent on every decided
// response; see slidelimit.Headers. The zero value, the default, sends them
// all: RateLimit-Policy, RateLimit, X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset in seconds from now, and Retry-After on denials.
func WithHeaders(h slidelimit.Headers) Option { return set.Headers(h) }

// WithRefundFailed makes failed requests not count: after the rest of the
// chain has run and answered with a status that WithFailedStatus deems
// failed (by default 400 and above), the request's units are given back
// with slidelimit.Limiter.Refund. The headers already sent still count the
// request. The default counts every admitted request.
func WithRefundFailed() Option { return set.RefundFailed() }

// WithRefundSuccessful makes successful requests not count, the converse of
// WithRefundFailed: only failed requests use up the quota, as for a limit
// on failed logins. The default counts every admitted request.
func WithRefundSuccessful() Option { return set.RefundSuccessful() }

// WithFailedStatus sets which response status codes make a request failed,
// for WithRefundFailed and WithRefundSuccessful. The default is
// httplimit.Failed: 400 and above. A nil f keeps the default.
func WithFailedStatus(f func(status int) bool) Option { return set.Failed(f) }

// WithSettle settles each admitted request from its response: once the
// rest of the chain has run, f is given c and the response's status,
// header fields and body (its last 64 KiB, adapter.MaxBody) and returns
// the request's actual cost, and whether it knows it. The request is then
// settled to that cost (slidelimit.Limiter.Settle) at the time it was
// admitted, so that a cost known only after the response, such as an
// LLM's tokens, counts exactly: admit an estimate (WithCost, such as the
// request's max_tokens), and settle what it used, read from the body by
// httplimit.TotalTokens or from what a handler stored with c.Set:
//
//	ginlimit.WithSettle(func(_ *gin.Context, r httplimit.Response) (int, bool) { return httplimit.TotalTokens(r) })
//	ginlimit.WithSettle(func(c *gin.Context, _ httplimit.Response) (int, bool) { n, ok := c.Get("tokens"); t, _ := n.(int); return t, ok })
//
// When f does not know, the request keeps its estimate. The settlement
// releases the request's places in flight too, in one Redis round trip; a
// request a refund option gives back is refunded instead. The body is
// kept only when f is set. The default settles nothing: a request keeps
// the cost it was admitted for.
func WithSettle(f func(c *gin.Context, r httplimit.Response) (actual int, ok bool)) Option {
	return set.Settle(f)
}

// DefaultDenyHandler answers 429 Too Many Requests with the
// application/problem+json body of httplimit.NewProblem(res). It is the
// default of WithDenyHandler.
func DefaultDenyHandler(c *gin.Context, res slidelimit.Result) {
	c.Data(http.StatusTooManyRequests, httplimit.ContentTypeProblem, httplimit.NewProblem(res).JSON())
}

// DefaultErrorHandler answers httplimit.FailureStatus(err) with its status
// text as a plain-text body. It is the default of WithErrorHandler.
func DefaultErrorHandler(c *gin.Context, err error) {
	status := httplimit.FailureStatus(err)
	c.Data(status, "text/plain; charset=utf-8", []byte(http.StatusText(status)))
}

func logError(c *gin.Context, err error) {
	adapter.LogError(c.Request.Context(), "ginlimit", err, "method", c.Request.Method, "path", c.Request.URL.Path)
}
