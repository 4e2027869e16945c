package httplimit

import (
	"net/http"

	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
)

// Option configures the middleware returned by New. The With… functions
// of this package make them; a nil Option is ignored.
type Option func(*config)

// config is the middleware's settings, the fields package adapter shares
// with every adapter that takes With… options.
type config = adapter.Options[*http.Request, DenyHandler, ErrorHandler]

// set builds the options.
var set adapter.Set[Option, *http.Request, DenyHandler, ErrorHandler]

// DenyHandler answers a request the limiter denied. When it runs, the
// rate-limit headers, Retry-After among them, are already set on w; res is
// the denial, with the violated limit in res.Limit.
type DenyHandler func(w http.ResponseWriter, r *http.Request, res slidelimit.Result)

// ErrorHandler answers a request that could not be admitted because of err:
// Redis failed under slidelimit.FailClosed (err wraps
// slidelimit.ErrUnavailable, and Retry-After is already set on w), or the
// key function, the cost or the limiter choice failed. FailureStatus gives
// the fitting status code.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// WithKey sets how requests are told apart. The default is KeyByIP: the peer
// address, with IPv6 grouped by /64 and no proxy trusted. Behind a proxy,
// pass the Key method of a ClientIP that trusts it. A nil f keeps the
// default.
func WithKey(f KeyFunc) Option { return set.Key(f) }

// WithLimiterFunc chooses the limiter for each request, for different limits
// per route or per plan; each limiter is built, and validated, once with
// slidelimit.New. When f returns nil, the limiter given to New is used. The
// default uses that limiter for every request.
func WithLimiterFunc(f func(r *http.Request) *slidelimit.Limiter) Option { return set.Limiters(f) }

// WithCost sets how many units each request takes, such as more for an
// expensive search. The default is 1. A cost below 1 or above the smallest
// quota is an error (slidelimit.ErrInvalidCost), answered by the error
// handler.
func WithCost(f func(r *http.Request) int) Option { return set.Cost(f) }

// WithLimits sets the limits each request is held to instead of the
// limiter's own, such as a tenant's plan read from its token
// (slidelimit.Limiter.AllowLimits). Returning none keeps the limiter's
// own; invalid limits are an error (slidelimit.ErrInvalidLimit), answered
// by the error handler. The default is the limiter's own limits.
func WithLimits(f func(r *http.Request) []slidelimit.Limit) Option { return set.Limits(f) }

// WithTree holds each request to a tenant's tree: f returns the tenant
// the request belongs to and the levels it is limited at, such as its
// organisation's, its team's and its API key's limits, read from its
// token, and the request is decided at every level at once by
// slidelimit.Limiter.AllowTree. It is admitted only if every level has
// room; a denial records nothing at any level. f takes the place of the
// key function (WithKey) and of WithLimits. The rate-limit headers list
// every level's limits, by name, and a denial names the limit that bound
// it, so give each level's limits its level's name
// (slidelimit.Limit.Named). Costs (WithCost), settlement (WithSettle),
// refunds and places in flight act on every level. An error of f, or an
// empty tenant, is a key error; an invalid tree is the limiter's error
// (slidelimit.ErrInvalidLimit, slidelimit.ErrInvalidKey); either is
// answered by the error handler. The default, nil, limits by WithKey's
// identity.
func WithTree(f func(r *http.Request) (tenant string, levels []slidelimit.Level, err error)) Option {
	return set.Tree(f)
}

// WithSkip passes the requests for which f returns true straight to the next
// handler, neither counted nor given rate-limit headers: health checks,
// allow-listed clients. The default skips nothing.
func WithSkip(f func(r *http.Request) bool) Option { return set.Skip(f) }

// WithDenyHandler sets how a denied request is answered. The default answers
// 429 Too Many Requests with the application/problem+json body of
// NewProblem. A nil h keeps the default.
func WithDenyHandler(h DenyHandler) Option { return set.Deny(h) }

// WithErrorHandler sets how a request is answered when it cannot be
// admitted because of an error; see ErrorHandler. The default answers
// FailureStatus(err) with its status text: 503 with Retry-After when Redis
// failed under slidelimit.FailClosed, 500 otherwise. Under
// slidelimit.FailOpen a Redis failure admits the request and never reaches
// the error handler. A nil h keeps the default.
func WithErrorHandler(h ErrorHandler) Option { return set.Fail(h) }

// WithErrorHook sets f to receive every error the middleware meets: Redis
// failures, admitted (fail-open) or not, key and cost errors, and failed
// refunds. It runs on the request's goroutine, so it should be fast. The
// default logs each error with slog.Default at level Error but Redis
// failures, which the limiter reports once per outage (see
// slidelimit.WithLogger). A nil f keeps the default.
func WithErrorHook(f func(r *http.Request, err error)) Option { return set.Hook(f) }

// WithHeaders selects the rate-limit header fields sent on every decided
// response; see slidelimit.Headers. The zero value, the default, sends them
// all: RateLimit-Policy, RateLimit, X-RateLimit-Limit, X-RateLimit-Remaining,
// X-RateLimit-Reset in seconds from now, and Retry-After on denials.
func WithHeaders(h slidelimit.Headers) Option { return set.Headers(h) }

// WithRefundFailed makes failed requests not count: after the next handler
// has answered with a status that WithFailedStatus deems failed (by
// default 400 and above), the request's units are given back with
// slidelimit.Limiter.Refund. The headers already sent still count the
// request. The default counts every admitted request.
func WithRefundFailed() Option { return set.RefundFailed() }

// WithRefundSuccessful makes successful requests not count, the converse of
// WithRefundFailed: only failed requests use up the quota, as for a limit on
// failed logins. The default counts every admitted request.
func WithRefundSuccessful() Option { return set.RefundSuccessful() }

// WithFailedStatus sets which response status codes make a request failed,
// for WithRefundFailed and WithRefundSuccessful. The default is Failed:
// 400 and above. A nil f keeps the default.
func WithFailedStatus(f func(status int) bool) Option { return set.Failed(f) }

// WithSettle settles each admitted request from its response: once the
// next handler has returned, f is given the response's status, header
// fields and body (its last 64 KiB, adapter.MaxBody) and returns the
// request's actual cost, and whether it knows it. The request is then
// settled to that cost (slidelimit.Limiter.Settle) at the time it was
// admitted, so that a cost known only after the response, such as an
// LLM's tokens, counts exactly: admit an estimate (WithCost, such as the
// request's max_tokens), and settle what it used (TotalTokens). When f
// does not know, the request keeps its estimate. The settlement releases
// the request's places in flight too, in one Redis round trip; a request
// a refund option gives back is refunded instead. The body is kept only
// when f is set. The default settles nothing: a request keeps the cost it
// was admitted for.
func WithSettle(f func(r Response) (actual int, ok bool)) Option {
	if f == nil {
		return set.Settle(nil)
	}
	return set.Settle(func(_ *http.Request, r Response) (int, bool) { return f(r) })
}

// Response is what a settle function is given of a response (WithSettle):
// its status, its header fields, and the end of its body.
type Response = adapter.Response

// Failed reports whether status makes a request failed by default, for the
// refund options of every adapter: 400 and above.
func Failed(status int) bool {
	return adapter.HTTPFailed(status)
}

// newConfig returns the defaults with opts applied.
func newConfig(opts []Option) config {
	return adapter.NewOptions(config{
		Key: KeyByIP, Deny: DefaultDenyHandler, Fail: DefaultErrorHandler, Hook: logError, Failed: Failed,
	}, opts)
}

// DefaultDenyHandler answers 429 Too Many Requests with the
// application/problem+json body of NewProblem(res). It is the default of
// WithDenyHandler.
func DefaultDenyHandler(w http.ResponseWriter, _ *http.Request, res slidelimit.Result) {
	w.Header().Set("Content-Type", ContentTypeProblem)
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write(NewProblem(res).JSON())
}

// DefaultErrorHandler answers FailureStatus(err) with its status text as a
// plain-text body. It is the default of WithErrorHandler.
func DefaultErrorHandler(w http.ResponseWriter, _ *http.Request, err error) {
	status := FailureStatus(err)
	http.Error(w, http.StatusText(status), status)
}

func logError(r *http.Request, err error) {
	adapter.LogError(r.Context(), "httplimit", err, "method", r.Method, "path", r.URL.Path)
}
