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
// By default requests are limited per client IP as c.IP() gives it, with
// IPv6 clients grouped by /64 (Config.IPv6Prefix). c.IP() is the peer
// address and ignores X-Forwarded-For, unless the app sets
// fiber.Config.ProxyHeader. Behind a proxy, set ProxyHeader together with
// EnableTrustedProxyCheck and TrustedProxies, so that only your proxies
// can name the client:
//
//	app := fiber.New(fiber.Config{
//		ProxyHeader:             "X-Real-IP",
//		EnableTrustedProxyCheck: true,
//		TrustedProxies:          []string{"10.0.0.0/8"},
//		EnableIPValidation:      true,
//	})
//
// Fiber reads the left-most address of the header, so name one your proxy
// overwrites, as nginx can X-Real-IP, rather than an X-Forwarded-For it
// appends to; see KeyByIP.
//
// KeyByHeader, KeyByLocals and KeyByRoute key by an API key, an
// authenticated user or a route; JoinKeys and FirstKey combine keys, and any
// func(*fiber.Ctx) string works as Config.KeyGenerator.
//
// # Failures
//
// When Redis fails, the limiter's FailurePolicy decides: fail-open (the
// default) passes the request on without rate-limit headers, fail-closed
// answers through Config.ErrorHandler, by default a *fiber.Error with
// status 503 and Retry-After set. Every error goes to Config.ErrorHook,
// which logs with log/slog by default.
//
// # Refunds
//
// Config.SkipFailedRequests and Config.SkipSuccessfulRequests give a
// request's units back, with slidelimit.Limiter.Refund, when its final
// status is failed (400 and above) or successful.
package fiberlimit
