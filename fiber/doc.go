// Package fiberlimit limits Fiber v2 routes with a slidelimit.Limiter: one
// exact sliding-window limit, kept in Redis and shared by every instance of
// the service.
//
// New returns a fiber.Handler configured like Fiber's own limiter
// middleware, with an optional Config whose zero fields take the values of
// ConfigDefault:
//
//	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second))
//	if err != nil {
//		return err
//	}
//	app := fiber.New()
//	app.Use(fiberlimit.New(lim))
//
// Every decided response carries the rate-limit header fields of
// slidelimit.Headers: RateLimit-Policy, RateLimit and X-RateLimit-*. A
// denial is answered 429 Too Many Requests with Retry-After and an
// application/problem+json body (httplimit.Problem), unless
// Config.LimitReached answers otherwise.
//
// # Keys and proxies
//
// By default requests are limited per peer address, with IPv6 clients
// grouped by /64 (Config.IPv6Prefix). Behind a proxy, key by a ClientIP
// that lists the proxies in TrustedProxies: it resolves the client by
// slidelimit.ClientIP, the resolver every adapter of this project shares,
// which reads every line of X-Forwarded-For (or Forwarded, or X-Real-IP, if
// named) and takes the right-most hop that is not a trusted proxy:
//
//	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
//	app.Use(fiberlimit.New(lim, fiberlimit.Config{
//		KeyGenerator: fiberlimit.ClientIP{TrustedProxies: proxies}.Key,
//	}))
//
// KeyByFiberIP keys by Fiber's own c.IP() under fiber.Config.ProxyHeader
// instead, an explicit opt-in with caveats: Fiber reads the left-most
// address of the header, and rejects IPv4-mapped addresses.
//
// KeyByHeader, KeyByLocals and KeyByRoute key by an API key (hashed, so
// that it never stands in clear in Redis), an authenticated user or a route,
// with the identities every adapter and the gRPC interceptors share; JoinKeys and FirstKey combine keys, and any
// func(*fiber.Ctx) string works as Config.KeyGenerator.
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
// answers through Config.ErrorHandler, by default a *fiber.Error with
// status 503 and Retry-After set. Every error goes to Config.ErrorHook,
// which logs with log/slog by default.
//
// # Refunds, settling and places in flight
//
// Config.SkipFailedRequests and Config.SkipSuccessfulRequests give a
// request's units back, with slidelimit.Limiter.Refund, when its final
// status is failed (400 and above) or successful. Config.Settle settles a
// request admitted at an estimate to the actual cost its response reports,
// such as an LLM's usage (httplimit.TotalTokens). A request admitted under
// an in-flight limit (slidelimit.InFlight) holds its place until the
// handlers have returned and a body they stream has been sent.
package fiberlimit
