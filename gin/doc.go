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
// By default requests are limited per peer address, with IPv6 clients
// grouped by /64. Behind a proxy, key by a ClientIP that lists the proxies
// in TrustedProxies: it resolves the client by slidelimit.ClientIP, the
// resolver every adapter of this project shares, which reads every line of
// X-Forwarded-For (or Forwarded, or X-Real-IP, if named) and takes the
// right-most hop that is not a trusted proxy.
//
// KeyByGinClientIP keys by Gin's own c.ClientIP() instead, an explicit
// opt-in with caveats: a gin.Engine trusts every proxy until
// SetTrustedProxies says otherwise, and c.ClientIP() reads only the first
// X-Forwarded-For line, so a client whose proxy appends a second line
// picks its own address.
//
// KeyByHeader, KeyByContext and KeyByRoute key by an API key (hashed, so
// that it never stands in clear in Redis), an authenticated user or a route,
// with the identities every adapter and the gRPC interceptors share; JoinKeys and FirstKey combine keys, and
// any KeyFunc works.
//
// WithTree holds a request to its tenant's tree instead of one identity: an
// organisation's, a team's and an API key's limits, say, decided at once
// by slidelimit.Limiter.AllowTree, so that a denial at one level takes
// nothing at any. Name each level's limits after their level
// (slidelimit.Limit.Named): the headers and the 429 name them.
//
// # Failures
//
// When Redis fails, the limiter's FailurePolicy decides: fail-open (the
// default) passes the request on without rate-limit headers, fail-closed
// aborts with 503 and Retry-After. Every error goes to the error hook,
// which logs with log/slog unless WithErrorHook replaces it.
//
// # Refunds, settling and places in flight
//
// WithRefundFailed and WithRefundSuccessful give a request's units back
// by its final status. WithSettle settles a request admitted at an
// estimate to the actual cost its response reports, such as an LLM's
// usage (httplimit.TotalTokens), or a handler stored with c.Set. A request
// admitted under an in-flight limit (slidelimit.InFlight) holds its place
// until the rest of the chain returns.
package ginlimit
