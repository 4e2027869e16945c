// Package adapter is what every framework adapter of slidelimit shares:
// the decision flow a request goes through, written once, and the key
// combinators. Package httplimit and the Gin, Fiber, Echo and gRPC
// adapters are built on it; a new adapter (chi, Hertz, a queue consumer)
// is built on it the same way and proves itself with package adaptertest.
//
// A Flow holds the settings of one middleware, over the framework's request
// context type C. For each request the adapter calls Decide, which runs
// the flow in one fixed order:
//
//  1. Skip: an exempt request is passed on, neither counted nor given
//     rate-limit header fields.
//  2. Limiters chooses the limiter, Limiter when it gives none.
//  3. Key gives the identity; an error or an empty identity fails the
//     request. A flow with a Tree asks it instead, for the request's
//     tenant and the levels of its tree (an organisation, a team, an API
//     key, each with its limits).
//  4. Cost gives the units, 1 by default.
//  5. Limiter.AllowLimits decides, held to the limits Limits gives, the
//     limiter's own by default; for a tree, Limiter.AllowTree decides at
//     every level at once, and a denial at one records nothing at any.
//  6. SetHeaders writes the decision's rate-limit header fields
//     (slidelimit.Headers decides which).
//  7. A denial is Deny; a Redis failure is reported to Hook and is Admit
//     or Fail as the limiter's slidelimit.FailurePolicy decided; any other
//     error is reported and is Fail.
//  8. Once the admitted request has ended, its Pending settles it,
//     refunds it or releases its places in flight.
//
// Decide returns a Decision: the adapter then only does what its verdict
// says, in its framework's terms (call the next handler, answer 429, answer
// the error). An admitted request may owe something at its end: to be
// settled from its response (Settle), refunded by its status
// (RefundFailed, RefundSuccessful), or to release the places it holds in
// flight (slidelimit.InFlight). Pend returns its Pending, nil when it owes
// nothing. The Pending renews the request's places in flight while it
// runs; the adapter writes the response's body to it while Captures, ends
// it with End when the request has ended, and with a deferred Abort if its
// handler panics. Ending takes one Redis round trip at most, and outlives
// the request context's cancellation.
//
// Every adapter thus has the same defaults and wraps errors the same way:
// "<name>: key: …" (a *KeyError, for a failed tree function too),
// "<name>: refund: …" ("settle",
// "release", "renew"), and ErrNoLimiter.
//
// The rest is written once too. Options and Set are the functional
// options of an adapter in the With… style (httplimit, ginlimit): the
// adapter declares its own Option type over Options with its request,
// deny-handler and error-handler types, and each With… function is one
// line, func WithKey(f KeyFunc) Option { return set.Key(f) }, and so is
// WithTree. WithDefaults
// fills a Config struct in the style of Echo's and Fiber's middleware from
// its DefaultConfig. JoinKeys and FirstKey
// combine any adapter's key functions; Strict and Lenient convert between
// key functions that fail with an error and those that return "".
//
// # Writing an adapter
//
// Give Flow the framework's request context as C, map the framework's
// request to Key (or Tree), Skip, Limiters and Cost, and its response headers to
// SetHeaders (slidelimit.Headers.SetHeader for an http.Header). In the
// handler, call Decide; on Deny answer 429 with the denial (httplimit's
// Problem is the body every HTTP adapter sends), on Fail answer
// httplimit.FailureStatus(d.Err), otherwise call the next handler between
// Pend and End:
//
//	p := f.Pend(ctx, c, d)
//	if p == nil {
//		return next(c) // nothing owed at the end: nothing to wrap
//	}
//	defer p.Abort() // a panic releases the places in flight
//	… // next(c), with the body's bytes written to p if p.Captures()
//	p.End(status, header)
//
// A streamed response (Server-Sent Events, a gRPC server stream) is
// written to p as it goes, and End comes when the handler returns, after
// the last message; the settle function then reads the end of the body.
// ResponseWriter records the status and the body of an
// http.ResponseWriter for it. A framework that sends a body after its
// handler has returned (Fiber's body stream writer) keeps the request
// from ending until then with Hold. A framework with no body (gRPC) gives
// its settle function what it needs through C. Then prove it: package
// adaptertest runs every scenario the adapters of this project pass,
// settlement and places in flight among them.
package adapter
