// Package slidelimit is an exact, distributed sliding-window rate limiter
// backed by Redis.
//
// Create a Limiter once, with the go-redis client your service already has
// and one or more limits, then ask it about each request:
//
//	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100))
//	if err != nil {
//		return err // an invalid limit or option: ErrInvalidLimit, ErrInvalidOption
//	}
//	res, err := lim.Allow(ctx, "user:42")
//	if err != nil {
//		log.Print(err) // Redis failed; res holds the FailurePolicy's decision
//	}
//	if !res.Allowed {
//		// deny, and tell the client to come back after res.RetryAfter
//	}
//
// # Algorithm
//
// Each identity has a log in Redis, a sorted set holding one member per
// unit admitted, scored by its admission time. A limit is a way of
// counting the log: the units in its window. One Lua script, atomically,
// evicts what left the history the log keeps, counts each limit's window,
// and, if every limit has room, records the request once; so "100 per
// minute" holds exactly across any number of application servers. Denied
// requests are never recorded. Time comes from Redis TIME, so servers with
// skewed clocks share one timeline. Every key a script touches is one it
// declares, under the identity's {hash tag}, so it runs on Redis Cluster,
// and a slot in migration answers before anything is written.
//
// A log keeps the history of the longest window counted in it while it
// lives, so that a caller with a shorter window never evicts what a longer
// one counts, and about its newest units of the largest quota counted in
// it, which is all that any of its limits needs; a window that reaches back
// to a unit the log dropped counts as full until that unit leaves it. An
// exact log records a request as one member whatever its cost (and its
// cost as a second when it is not 1), so a decision's Redis work, and a
// settle's, does not grow with the units it takes: any cost up to the
// smallest quota is one script call.
//
// Each call carries a unique request id, and a retried call whose id is
// already recorded, in any of the logs it was decided on, counts once:
// go-redis's own retries are safe as they are, and an application that
// retries a call of unknown outcome gives its attempts one id with
// ContextWithRequestID. See Key for the keys and how identities of any
// bytes are made safe.
//
// # Limits per call
//
// Because limits only count the log, a call may bring its own:
// AllowLimits(ctx, identity, n, limits...) decides under the quota of the
// tenant's plan, read from a token or a database, with no Limiter per plan.
// Invalid limits return ErrInvalidLimit at the call. A plan change counts
// what was admitted already: a tenant that used 900 of 1,000 and moves to
// 100 is denied until enough units leave the window. Two services enforcing
// one tenant's plan share its count exactly when they use the same Redis,
// key prefix and identity.
//
// # Long windows
//
// An exact log costs memory in proportion to the requests its window holds,
// up to its quota. A Limit above MaxExactQuota, or one given a Step (Limit.Stepped), is counted
// in steps instead: one count per step in a ring of fixed size, so a
// 100,000-per-day identity at one-minute steps holds about 12 KB and a
// request of any cost costs Redis the same. It never admits more than the
// quota in any window, may deny for at most one step longer than the exact
// log, and reports RetryAfter exact to the step.
//
// # Budgets: costs known later, requests in flight, a tenant's tree
//
// Settle corrects an admitted request to its actual cost at the time it was
// admitted: admit an LLM request's max_tokens with AllowN, settle its
// usage. An InFlight limit holds a place per request from its admission
// until Settle, Release or Refund gives it back, or its lease ends, so a
// holder that dies frees its place; Renew extends it. A limit marked
// ForRequests counts requests rather than their cost. Requests per minute,
// tokens per minute and requests in flight then decide together, all or
// nothing, in one script call:
//
//	lim, _ := slidelimit.New(rdb, slidelimit.PerMinute(60).Named("rpm").ForRequests(),
//		slidelimit.WithLimits(slidelimit.PerMinute(100_000).Named("tpm"),
//			slidelimit.InFlight(4, time.Minute).Named("inflight")))
//	res, err := lim.AllowN(ctx, key, maxTokens)
//	… // if res.Allowed, serve the request
//	err = lim.Settle(ctx, res, usage.TotalTokens) // and release its place
//
// A Settle, Refund or Release that fails because Redis is unavailable is
// kept and retried until it lands or its request has left its windows;
// call FlushSettlements before the process exits, which would lose them.
//
// AllowTree decides the levels of one tenant (organisation, team, API key)
// in one call on the tenant's slot: a denial at any level takes nothing at
// the others. A limit marked Shadowed is counted and reported but never
// denies, so one new limit is rolled out beside enforced ones in one call.
//
// # Identities and client IPs
//
// Every adapter of this project builds identities with the constructors of
// this package, so a client has one quota across REST and gRPC: IPIdentity
// ("ip:203.0.113.9"), HeaderIdentity for API keys and tokens in a header or
// gRPC metadata key (hashed by default, so secrets never stand in clear in
// a Redis key; see HashKey and Readable), UserIdentity ("user:42"),
// RouteIdentity and JoinIdentities. Every adapter finds client IPs with
// ClientIP: the peer, unless the peer is one of its TrustedProxies, and then
// the right-most untrusted hop of the one forwarding header it names
// (X-Forwarded-For, Forwarded or X-Real-IP).
//
// # Deny cache
//
// A Limiter remembers recent denials (WithDenyCache): until a denial's
// RetryAfter has passed, the same identity's calls under the same limits
// with at least the denied cost are denied without a Redis round trip,
// marked Result.Cached. Denied requests record nothing, so this never denies
// what Redis would admit, except after a Refund, Settle or Reset made by
// another process, which this limiter cannot see: it may then deny for up
// to the remaining RetryAfter.
//
// # Connections and batching
//
// Every decision goes through the go-redis client given to New, whatever
// its type, so its hooks see every script and its pool, dialer, TLS,
// credentials, Limiter, retries and timeouts apply. A caller that finds
// nothing else in flight to its Redis node sends its own command. Calls
// that arrive while round trips are out wait and leave together, at most
// 128 a round trip and 4 round trips in flight per node (1 on a
// *redis.Conn): on a standalone Redis (a *redis.Client, Sentinel's included)
// as calls of the script's batch form, each of about half a millisecond of
// Redis time at most, decided in order under one TIME, each request with
// its own reply or error; on a Cluster or a Ring as a pipeline of EVALSHA.
// Every Limiter on one client shares its round trips, and each call in them
// keeps its own Limiter's timeout. Each decision keeps its own request id,
// and a caller whose context ends leaves at once, but for one that sends
// its own command on a client with ContextTimeoutEnabled: go-redis then
// keeps the limiter's timeout, and the call runs on the caller's goroutine,
// which waits for that timeout at most. Without ContextTimeoutEnabled, or
// with WithTimeout(0), a goroutine of the limiter's makes the round trip
// instead, which costs a lone call some tens of µs more (see
// BENCHMARKS.md). MOVED and ASK are left to go-redis, which follows them
// for a ClusterClient only.
//
// # Failures
//
// When Redis is down, does not answer within the timeout (WithTimeout), or
// answers that it cannot serve, the FailurePolicy decides: FailOpen (the
// default) admits, FailClosed denies, FailLocal decides in this process by
// the call's own limits on a share of each quota (WithReplicas), a Result
// marked Local whose denial the adapters answer as a denial (429,
// ResourceExhausted). The call returns that Result, marked Fallback,
// together with an error wrapping ErrUnavailable, so callers can act on
// Result.Allowed and still report the error. The limiter logs an outage
// once when it begins and once when it ends (WithLogger), not per call.
//
// The timeout measures Redis's silence once a call is sent, never time spent
// queued in this process or waiting for a CPU, so a busy service does not
// fail open because it is busy; a call that finds no connection waits for
// one being dialed for the timeout plus one second. When Redis leaves a
// round trip unanswered that long, the calls still waiting for the same
// node whose own timeout is no longer are decided at once rather than each
// paying it again; the calls of a Limiter with a longer timeout on the same
// client wait on and are sent. A circuit breaker per Redis node
// (WithBreaker) stops asking a node after repeated failed round trips and
// decides at once by the policy, with an error wrapping ErrCircuitOpen,
// until a probe finds the node answering again. On Redis Cluster the
// limiter also makes go-redis reload its slot map after connection errors,
// MOVED, ASK and CLUSTERDOWN, so the slots of a failed primary come back as
// soon as its replica is promoted.
//
// While Redis Cluster migrates a slot, a call whose keys the migration has
// split between two nodes is answered TRYAGAIN until it ends. The call is
// sent again, after 10 ms and then twice as long each time up to 100 ms,
// for as long as its timeout leaves time, and then decided by the policy.
// TRYAGAIN is an answer: it never counts against the node's breaker, nor
// does a timeout that passes inside go-redis's own retries of it.
//
// # Shadow mode and metrics
//
// WithShadow rolls a limiter out without enforcing it: requests its limits
// deny are admitted anyway, marked Result.Shadow, recorded nowhere and
// given no rate-limit header fields; a shadow limit (Limit.Shadowed) does
// the same for one limit beside enforced ones. WithObserver, which may be
// given several times, sees every decision; Observation.Outcome classifies
// it as allowed, denied, shadow_denied, fallback_allowed, fallback_denied,
// cached_denied or error, and Observation.ShadowDenied lists the shadow
// limits that would have denied. The modules promlimit
// (github.com/slidelimit/slidelimit/prometheus) and otellimit
// (github.com/slidelimit/slidelimit/otel) turn observations into Prometheus
// and OpenTelemetry metrics.
//
// # Headers
//
// Headers maps a Result to the rate-limit header fields (RateLimit-Policy,
// RateLimit, X-RateLimit-*, Retry-After) that every adapter of this project
// sends: net/http (package httplimit), Gin, Fiber, Echo and gRPC.
//
// # Waiting for outbound limits
//
// Wait and WaitN block until the limits admit a request or the context
// ends, for a fleet's workers that share a partner's quota: the waiters of
// one identity in a process queue behind one goroutine that asks Redis and
// sleeps on each denial's RetryAfter, with jitter, rather than polling. A
// deadline the wait cannot meet is refused at once with an error wrapping
// ErrWouldExceedDeadline. Block records a fleet-wide pause of an identity,
// such as a partner's Retry-After, which every Wait in every process obeys;
// Shift moves an admission to when its request actually left.
// httplimit.NewTransport and grpclimit's client interceptors wait and
// block for you, and the Transport shifts a request whose response comes late.
package slidelimit
