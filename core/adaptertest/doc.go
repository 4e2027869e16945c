// Package adaptertest is the conformance suite every adapter of slidelimit
// passes, in the manner of testing/fstest.TestFS: one call runs every
// scenario an adapter must get right against real Redis, and a new
// adapter (chi, Hertz, Fiber v3, your own) proves itself with a few lines
// of glue.
//
// The glue is an Adapter: a function that builds the adapter under test
// from Settings, in the adapter's own option names, and returns a Server
// that sends it one Request and reports the Response. Run runs the suite:
//
//	func TestConformance(t *testing.T) {
//		adaptertest.Run(t, func(t *testing.T, s adaptertest.Settings) adaptertest.Server {
//			opts := []mylimit.Option{mylimit.WithKey(mylimit.ClientIP(s.ClientIP).Key), ...}
//			...
//			return adaptertest.HTTPServer(mylimit.New(s.Limiter, opts...)(adaptertest.Handler))
//		})
//	}
//
// The scenarios, each a subtest of Run:
//   - burst: concurrent requests from one client beside two busy loops,
//     on standalone Redis and on Redis Cluster: exactly the quota admitted;
//   - headers: the rate-limit fields of slidelimit.Headers on admitted and
//     denied requests, and a denial that says when to retry (HTTP 429 with
//     Retry-After and the problem+json body of httplimit.NewProblem, gRPC
//     ResourceExhausted with RetryInfo), with one limit or several, and
//     the fields Settings.Headers selects;
//   - failure: fail-open, fail-closed and fail-local with Redis down, each
//     error handed to the error hook, and limiting back when Redis is;
//   - shadow: shadow mode admits denials and sends no quota fields for them;
//   - refund: refund by status, of failed and of successful requests;
//   - settle: requests admitted at an estimate and settled to the usage
//     their response reports, in a whole body or at the end of a stream;
//     none keeps the estimate, a refund by status comes first;
//   - in flight: a request holds its place under an in-flight limit
//     while its handler runs, or its stream is under way, and gives it
//     back when it ends, failed or not;
//   - skip, limiter choice, cost and per-request limits;
//   - tree: a tenant's tree of levels (Settings.Tree), admitted and denied
//     at each level with nothing recorded at any on a denial, headers and
//     denials naming the limit that bound, a concurrent burst of many
//     keys exactly within the organisation's quota on standalone Redis and
//     on Redis Cluster, a failed or invalid tree, Redis down under each
//     failure policy (fail-local limiting every level in the process),
//     settlement and refund at every level, and a place in flight held at
//     a level and given back;
//   - client IP: every proxy scenario of redistest.ClientIPScenarios and
//     hostile forwarding headers;
//   - hostile keys: identities of any content, each with its own quota, and
//     a request without its key refused, any error the hook gets for it
//     wrapping slidelimit.ErrInvalidKey.
//
// The handler behind the adapter answers as each Request asks (Answer):
// with a status, a usage, a stream, held by a Gate. Handler is that
// handler for net/http; a glue that needs a handler of its framework's
// reads AnswerTo and answers the same way.
//
// Status codes are HTTP's; a gRPC adapter's glue maps its codes to them
// (ResourceExhausted 429, Unavailable 503, Internal 500,
// Unauthenticated 401, OK 200) and its RetryInfo to Response.RetryAfter.
//
// DenyHandler checks what Run leaves at its default: an HTTP adapter's own
// deny handler.
//
// An observer of decisions, such as a metrics adapter, is not a
// middleware: ObserveSequence makes it see a known sequence of decisions
// to count, and BenchmarkObserver measures it.
//
// The suite needs the Redis of package redistest: run it under the
// project's harness (make test), which starts standalone Redis and a
// Cluster.
package adaptertest
