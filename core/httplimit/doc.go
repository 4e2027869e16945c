// Package httplimit limits net/http handlers with a slidelimit.Limiter, and
// holds the HTTP pieces every HTTP adapter of this project shares: the
// problem+json body of a denial, the status of a failure, and the
// identities of the common keys.
//
// New returns middleware of the shape func(http.Handler) http.Handler, which
// http.ServeMux, chi and gorilla/mux all take:
//
//	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second))
//	if err != nil {
//		return err
//	}
//	mux := http.NewServeMux()
//	mux.Handle("GET /ping", httplimit.New(lim)(ping))
//
// Every decided response carries the rate-limit headers of
// slidelimit.Headers. A denial is answered 429 Too Many Requests with
// Retry-After and an application/problem+json body (Problem).
//
// # Keys and proxies
//
// By default requests are limited per client IP, taken from r.RemoteAddr;
// IPv6 clients are grouped by /64. Forwarding headers such as
// X-Forwarded-For are ignored unless the peer is a proxy listed in a
// ClientIP's TrustedProxies, since any client can send them:
//
//	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
//	if err != nil {
//		return err
//	}
//	ips := httplimit.ClientIP{TrustedProxies: proxies}
//	mw := httplimit.New(lim, httplimit.WithKey(ips.Key))
//
// ClientIP is slidelimit.ClientIP, the resolver every adapter of this
// project shares: it takes the right-most address of X-Forwarded-For (every
// line of it; or of Forwarded or X-Real-IP, if ClientIP.Header names one)
// that is not a trusted proxy.
//
// KeyByHeader, KeyByContext and KeyByPattern key by an API key (hashed, so
// that it never stands in clear in Redis), an authenticated user or a
// route, with the identities of slidelimit.HeaderIdentity, UserIdentity and
// RouteIdentity that every adapter and the gRPC interceptors share; JoinKeys
// and FirstKey combine keys, and any KeyFunc works.
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
// answers 503 with Retry-After. Every error goes to the error hook, which
// logs with log/slog unless WithErrorHook replaces it.
//
// # Outgoing requests
//
// NewTransport returns an http.RoundTripper that limits the requests an
// http.Client sends, by default per target host (KeyByHost): it waits
// within each request's context until the limiter admits it, and turns a
// partner's 429 or 503 with Retry-After into a block of the key that every
// process sharing the limiter obeys (slidelimit.Limiter.Block). It sets
// nothing on the request.
package httplimit
