// Package echolimit limits Echo v4 routes with a slidelimit.Limiter: one
// exact sliding-window limit, kept in Redis and shared by every instance of
// the service.
//
// Like Echo's own middleware, it comes as a pair: New(lim) with the
// defaults, and NewWithConfig(lim, Config) whose zero fields take the values
// of DefaultConfig. Both return an echo.MiddlewareFunc:
//
//	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second))
//	if err != nil {
//		return err
//	}
//	e := echo.New()
//	e.Use(echolimit.New(lim))
//
// Every decided response carries the rate-limit header fields of
// slidelimit.Headers: RateLimit-Policy, RateLimit and X-RateLimit-*. A
// denial is returned as an *echo.HTTPError with code 429 and the problem
// document of httplimit.NewProblem as its message, so the app's
// HTTPErrorHandler renders it, with Retry-After already set; Echo's
// DefaultHTTPErrorHandler sends it as application/problem+json.
// Config.DenyHandler answers otherwise.
//
// # Keys and proxies
//
// By default requests are limited per peer address, with IPv6 clients
// grouped by /64 (Config.IPv6Prefix); never a forwarding header an
// untrusted client sent, which c.RealIP() without an IPExtractor would
// believe. Behind a proxy, key by a ClientIP that lists the proxies in
// TrustedProxies: it resolves the client by slidelimit.ClientIP, the
// resolver every adapter of this project shares, which reads every line of
// X-Forwarded-For (or Forwarded, or X-Real-IP, if named) and takes the
// right-most hop that is not a trusted proxy:
//
//	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
//	e.Use(echolimit.NewWithConfig(lim, echolimit.Config{
//		IdentifierExtractor: echolimit.ClientIP{TrustedProxies: proxies}.Key,
//	}))
//
// KeyByRealIP keys by Echo's own c.RealIP() instead, an explicit opt-in
// that follows Echo.IPExtractor.
//
// KeyByHeader, KeyByContext and KeyByRoute key by an API key (hashed, so
// that it never stands in clear in Redis), an authenticated user or a route,
// with the identities every adapter and the gRPC interceptors share;
// JoinKeys and FirstKey combine keys, and any
// func(echo.Context) (string, error) works as Config.IdentifierExtractor.
//
// Config.Tree holds a request to its tenant's tree instead of one identity: an
// organisation's, a team's and an API key's limits, say, decided at once
// by slidelimit.Limiter.AllowTree, so that a denial at one level takes
// nothing at any. Name each level's limits after their level
// (slidelimit.Limit.Named): the headers and the 429 name them.
//
// # Failures
//
// When Redis fails, the limiter's FailurePolicy decides: fail-open (the
// default) passes the request on without rate-limit headers, fail-closed
// returns an *echo.HTTPError with code 503 and Retry-After set
// (Config.ErrorHandler). Every error goes to Config.ErrorHook, which logs
// with log/slog by default.
//
// # Refunds, settling and places in flight
//
// Config.SkipFailedRequests and Config.SkipSuccessfulRequests give a
// request's units back, with slidelimit.Limiter.Refund, when its final
// status is failed (400 and above) or successful. Config.Settle settles a
// request admitted at an estimate to the actual cost its response reports,
// such as an LLM's usage (httplimit.TotalTokens), or a handler stored with
// c.Set. A request admitted under an in-flight limit (slidelimit.InFlight)
// holds its place until the handlers return.
package echolimit
