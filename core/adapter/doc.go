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
//     request.
//  4. Cost gives the units, 1 by default.
//  5. Limiter.AllowN decides.
//  6. SetHeaders writes the decision's rate-limit header fields
//     (slidelimit.Headers decides which).
//  7. A denial is Deny; a Redis failure is reported to Hook and is Admit
//     or Fail as the limiter's slidelimit.FailurePolicy decided; any other
//     error is reported and is Fail.
//
// Decide returns a Decision: the adapter then only does what its verdict
// says, in its framework's terms (call the next handler, answer 429, answer
// the error), and, when the flow refunds by status, calls Finish with the
// status the request ended with (step 8).
//
// Every adapter thus has the same defaults and wraps errors the same way:
// "<name>: key: …" (a *KeyError), "<name>: refund: …", and ErrNoLimiter.
//
// The rest is written once too. Options, Option and Set are the
// functional options of an adapter in the With… style (httplimit,
// ginlimit): the adapter declares type Option = adapter.Option[R, D, F]
// with its request, deny-handler and error-handler types, and each With…
// function is one line, func WithKey(f KeyFunc) Option { return
// set.Key(f) }. WithDefaults fills a Config struct in the style of Echo's
// and Fiber's middleware from its DefaultConfig. JoinKeys and FirstKey
// combine any adapter's key functions; Strict and Lenient convert between
// key functions that fail with an error and those that return "".
//
// # Writing an adapter
//
// Give Flow the framework's request context as C, map the framework's
// request to Key, Skip, Limiters and Cost, and its response headers to
// SetHeaders (slidelimit.Headers.SetHeader for an http.Header). In the
// handler, call Decide; on Deny answer 429 with the denial (httplimit's
// Problem is the body every HTTP adapter sends), on Fail answer
// httplimit.FailureStatus(d.Err), otherwise call the next handler and, if
// Refunds(d), Finish with the status it answered. In a framework whose
// handlers return an error (Echo, Fiber), Serve does all of this given
// the next handler, the deny and error handlers and the status an error
// answers with. Then prove it: package
// adaptertest runs every scenario the adapters of this project pass.
package adapter
