// Package ginlimit limits Gin handlers with a slidelimit.Limiter: one exact
// limit shared by every instance of a service through Redis.
//
// New returns a gin.HandlerFunc, for a route, a group or the whole engine:
//
//	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second))
//	if err != nil {
//		return err
//	}
//	r := gin.New()
//	r.GET("/ping", ginlimit.New(lim), ping)
//
// Every decided response carries the rate-limit headers of
// slidelimit.Headers. A denial is aborted with 429 Too Many Requests,
// Retry-After and an application/problem+json body (httplimit.Problem).
//
// # Keys and proxies
//
// By default requests are limited per peer address, c.RemoteIP(), with
// IPv6 clients grouped by /64. Not c.ClientIP(): a gin.Engine trusts every
// proxy until SetTrustedProxies says otherwise, so by default c.ClientIP()
// believes an X-Forwarded-For header any client can forge, and a client
// could pick a fresh quota for each request. Behind a proxy, call
// engine.SetTrustedProxies (or set engine.TrustedPlatform) and key by
// KeyByClientIP, which uses c.ClientIP().
//
// KeyByHeader, KeyByContext and KeyByRoute key by an API key, an
// authenticated user or a route; JoinKeys and FirstKey combine keys, and
// any KeyFunc works.
//
// # Failures
//
// When Redis fails, the limiter's FailurePolicy decides: fail-open (the
// default) passes the request on without rate-limit headers, fail-closed
// aborts with 503 and Retry-After. Every error goes to the error hook,
// which logs with log/slog unless WithErrorHook replaces it.
package ginlimit
