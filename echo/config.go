package echolimit

import (
	"net/http"

	"github.com/labstack/echo/v4"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/adapter"
	"github.com/slidelimit/slidelimit/core/httplimit"
)

// Config configures the middleware returned by NewWithConfig, in the manner
// of Echo's own middleware: every field is optional, and a zero field takes
// its value from DefaultConfig.
//
// The function fields take Echo's own function types too: a
// middleware.Skipper as Skipper, a middleware.Extractor as
// IdentifierExtractor.
//
// A Config is read once, by NewWithConfig; changing it afterwards changes
// nothing.
type Config struct {
	// Skipper skips the middleware for the requests on which it returns
	// true: they go straight to the next handler, neither counted nor given
	// rate-limit headers. Use it for health checks and allow-lists.
	//
	// Optional. Default: nil, which skips nothing.
	Skipper func(c echo.Context) bool

	// Limiter chooses the limiter for each request, for different limits
	// per route or per plan; build each limiter, and so validate its
	// limits, once with slidelimit.New. When it returns nil, the limiter
	// given to NewWithConfig is used.
	//
	// Optional. Default: nil, which uses the limiter given to NewWithConfig.
	Limiter func(c echo.Context) *slidelimit.Limiter

	// IdentifierExtractor returns the identity a request is limited by:
	// requests with the same identity share one quota. An error, or an
	// empty identity, leaves the request undecided: it goes to
	// ErrorHandler (500 by default).
	//
	// KeyByIP, KeyByHeader, KeyByContext and KeyByRoute build the common
	// keys; JoinKeys and FirstKey combine them.
	//
	// Optional. Default: KeyByIP, the peer address, with IPv6Prefix.
	// Behind a proxy, use ClientIP{TrustedProxies: ...}.Key.
	IdentifierExtractor func(c echo.Context) (string, error)

	// IPv6Prefix is the network length by which the default
	// IdentifierExtractor groups IPv6 clients, as in
	// slidelimit.IPIdentity: 128 keeps each address apart. It is ignored
	// when IdentifierExtractor is set.
	//
	// Optional. Default: 0, which means slidelimit.DefaultIPv6Prefix (64).
	IPv6Prefix int

	// Cost returns how many units a request takes, such as more for an
	// expensive search. A cost below 1 or above the smallest quota is an
	// error (slidelimit.ErrInvalidCost), answered by ErrorHandler.
	//
	// Optional. Default: nil, which costs every request 1.
	Cost func(c echo.Context) int
	// Limits returns the limits a request is held to instead of the
	// limiter's own, such as a tenant's plan read from its token
	// (slidelimit.Limiter.AllowLimits). Returning none keeps the limiter's
	// own; invalid limits are an error (slidelimit.ErrInvalidLimit),
	// answered by ErrorHandler. Default: the limiter's own.
	Limits func(c echo.Context) []slidelimit.Limit
	// Tree returns the tenant a request belongs to and the levels of its
	// tree, such as its organisation's, its team's and its API key's
	// limits, all decided at once by slidelimit.Limiter.AllowTree: the
	// request is admitted only if every level has room, and a denial
	// records nothing at any level. It takes the place of
	// IdentifierExtractor and Limits. The rate-limit headers list every
	// level's limits by name, and a denial names the one that bound it, so
	// give each level's limits its level's name (slidelimit.Limit.Named).
	// Cost, Settle, the refunds and places in flight act on every level. An
	// error, or an empty tenant, is a key error; an invalid tree is the
	// limiter's error (slidelimit.ErrInvalidLimit,
	// slidelimit.ErrInvalidKey); either is answered by ErrorHandler.
	//
	// Optional. Default: nil, which limits by IdentifierExtractor.
	Tree func(c echo.Context) (tenant string, levels []slidelimit.Level, err error)

	// DenyHandler answers a request the limiter denied. When it runs, the
	// rate-limit headers, Retry-After among them, are already set on the
	// response; res is the denial, with the violated limit in res.Limit.
	// Unlike the DenyHandler of Echo's rate limiter, it receives the
	// result, so that it can say when to retry.
	//
	// Optional. Default: DefaultDenyHandler, which returns an
	// *echo.HTTPError with code 429 and the problem document as message,
	// for the app's HTTPErrorHandler to render.
	DenyHandler func(c echo.Context, res slidelimit.Result) error

	// ErrorHandler answers a request that could not be admitted because of
	// err: Redis failed under slidelimit.FailClosed (err wraps
	// slidelimit.ErrUnavailable, and Retry-After is already set), or the
	// identifier, the cost or the limiter choice failed.
	// httplimit.FailureStatus gives the fitting status code. Under
	// slidelimit.FailOpen a Redis failure admits the request and never
	// reaches ErrorHandler.
	//
	// Optional. Default: DefaultErrorHandler, which returns an
	// *echo.HTTPError: 503 when Redis failed, 500 otherwise.
	ErrorHandler func(c echo.Context, err error) error

	// ErrorHook receives every error the middleware meets: Redis failures,
	// admitted (fail-open) or not, identifier and cost errors, and failed
	// refunds. It runs on the request's goroutine: before the request is
	// answered or passed on, or, for a failed refund, after the next
	// handlers have run.
	//
	// Optional. Default: a hook that logs each error with slog.Default at
	// level Error but Redis failures, which the limiter reports once per
	// outage (see slidelimit.WithLogger).
	ErrorHook func(c echo.Context, err error)

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
	// slidelimit.Limiter.Refund. When a handler returns an error and has
	// not answered, its status is the Code of an *echo.HTTPError, and
	// otherwise 500, as Echo's DefaultHTTPErrorHandler answers. The headers
	// already set still count the request.
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
	// next handlers have run, it is given c and the response's status (as
	// for SkipFailedRequests), header fields and body (its last 64 KiB,
	// adapter.MaxBody, as the handlers wrote it) and returns the request's
	// actual cost, and whether it knows it. The request is then settled to
	// that cost (slidelimit.Limiter.Settle) at the time it was admitted, so
	// that a cost known only after the response, such as an LLM's tokens,
	// counts exactly: admit an estimate (Cost, such as the request's
	// max_tokens), and settle what it used, read from the body by
	// httplimit.TotalTokens or from what a handler stored with c.Set. A
	// streamed response (c.Response().Flush between writes) is settled
	// when the handlers return. When Settle does not know, the request
	// keeps its estimate. The settlement releases the request's places in
	// flight too, in one Redis round trip; a request that
	// SkipFailedRequests or SkipSuccessfulRequests gives back is refunded
	// instead. The body is kept only when Settle is set.
	//
	// Optional. Default: nil, which settles nothing: a request keeps the
	// cost it was admitted for.
	Settle func(c echo.Context, r httplimit.Response) (actual int, ok bool)
}

// DefaultConfig is the configuration New uses, and the one NewWithConfig
// takes every field a Config leaves zero from.
var DefaultConfig = Config{
	IdentifierExtractor: KeyByIP,
	DenyHandler:         DefaultDenyHandler,
	ErrorHandler:        DefaultErrorHandler,
	ErrorHook:           logError,
	Failed:              httplimit.Failed,
}

// withDefaults returns cfg with its zero fields taken from DefaultConfig.
func withDefaults(cfg Config) Config {
	if cfg.IdentifierExtractor == nil && cfg.IPv6Prefix != 0 {
		cfg.IdentifierExtractor = ClientIP{IPv6Prefix: cfg.IPv6Prefix}.Key
	}
	return adapter.WithDefaults(cfg, DefaultConfig)
}

// DefaultDenyHandler returns an *echo.HTTPError with code 429 Too Many
// Requests whose Message is the problem document httplimit.NewProblem(res),
// and sets the response's Content-Type to application/problem+json. It is
// the default DenyHandler.
//
// Echo's DefaultHTTPErrorHandler renders a Message that is not a string as
// JSON with c.JSON, which keeps a Content-Type already set: the client gets
// the problem document as application/problem+json. An HTTPErrorHandler of
// the app's own sees the 429 and the problem in the error; if it renders a
// body of another format, it should set its own Content-Type, since c.JSON,
// c.String and the like keep the one set here.
func DefaultDenyHandler(c echo.Context, res slidelimit.Result) error {
	c.Response().Header().Set(echo.HeaderContentType, httplimit.ContentTypeProblem)
	return &echo.HTTPError{Code: http.StatusTooManyRequests, Message: httplimit.NewProblem(res)}
}

// DefaultErrorHandler returns an *echo.HTTPError with the code
// httplimit.FailureStatus(err) and its status text as message, with err as
// its Internal error, for the app's HTTPErrorHandler to render and log; err
// itself, which may name Redis addresses, is not in the message. It is the
// default ErrorHandler.
func DefaultErrorHandler(_ echo.Context, err error) error {
	return echo.NewHTTPError(httplimit.FailureStatus(err)).SetInternal(err)
}

func logError(c echo.Context, err error) {
	r := c.Request()
	adapter.LogError(r.Context(), "echolimit", err, "method", r.Method, "path", r.URL.Path)
}
