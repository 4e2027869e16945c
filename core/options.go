package slidelimit

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// DefaultTimeout bounds each call's Redis round trip unless WithTimeout sets
// another bound.
const DefaultTimeout = 100 * time.Millisecond

// FailurePolicy decides a request when Redis cannot: when it is down, slow
// past the timeout, or answers with an error.
type FailurePolicy int

const (
	// FailOpen admits the request. It is the default: a rate limiter should
	// not take a service down with it.
	FailOpen FailurePolicy = iota
	// FailClosed denies the request, with a RetryAfter of one second.
	FailClosed
	// FailLocal decides the request in this process, with a sliding-window
	// log per identity that holds floor(quota/n) of each limit, n being
	// WithReplicas's count of processes sharing the limit. It keeps a
	// misbehaving client limited while Redis is down, at the cost of
	// exactness: the processes no longer see each other's requests, requests
	// admitted just before the failure are not counted, and an uneven spread
	// of one client's requests over the processes admits less than the
	// quota. Each window of an identity's limits keeps a log of its own,
	// admissions less than a 64th of the window apart sharing one entry, so
	// that a limit counts an admission at most a 64th of its window longer
	// than it was made. A window not counted on the identity lately starts
	// from the log of the shortest longer one, at that one's resolution,
	// or else of the longest, of which it counts only what that log kept,
	// as a Redis log keeps the history of the longest window counted in
	// it. Its memory is bounded by WithLocalCapacity: at most 64 entries
	// per window, and the 8 windows counted most lately, per identity.
	FailLocal
)

// String returns "fail-open", "fail-closed" or "fail-local".
func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	case FailLocal:
		return "fail-local"
	}
	return fmt.Sprintf("FailurePolicy(%d)", int(p))
}

// Observation describes one decision, for metrics and logs.
type Observation struct {
	// Identity is the identity as the caller passed it, before encoding.
	Identity string
	// Cost is the number of units asked for (1 for Peek).
	Cost int
	// Result is what the call returned.
	Result Result
	// Err is the error the call returned, or nil.
	Err error
	// Latency is how long the call took, Redis round trip included.
	Latency time.Duration
}

// Observer receives an Observation after every Allow, AllowN and Peek. It is
// called synchronously on the caller's goroutine, so it should be fast; it
// must be safe for concurrent use. Observation.Outcome classifies the
// decision for metrics.
type Observer func(ctx context.Context, o Observation)

// Option configures a Limiter in New.
type Option func(*config) error

type config struct {
	limits        []Limit
	prefix        string
	timeout       time.Duration
	policy        FailurePolicy
	clock         func() time.Time
	observe       Observer
	shadow        bool
	replicas      int
	localCapacity int
	failures      int
	cooldown      time.Duration
	deny          int // deny cache size
	logger        *slog.Logger
	quiet         bool // WithLogger(nil)
}

// WithLimits adds limits enforced together with the one given to New. A
// request is admitted only if every limit admits it, and is then recorded
// under all of them, atomically. Limits must be distinct by String.
func WithLimits(more ...Limit) Option {
	return func(c *config) error {
		c.limits = append(c.limits, more...)
		return nil
	}
}

// WithPrefix sets the prefix of every key, so that several applications can
// share one Redis. The default is DefaultPrefix, "slidelimit:". A prefix is
// printable ASCII without spaces or braces, at most 64 bytes.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		if err := validPrefix(prefix); err != nil {
			return err
		}
		c.prefix = prefix
		return nil
	}
}

// WithTimeout bounds how long Redis may take to answer a call's command once
// it is sent, so that a slow or dead Redis costs a request at most d before
// the FailurePolicy decides. The default is DefaultTimeout; zero means no
// bound beyond the caller's context.
//
// The bound measures Redis, not this process: it starts when the round trip
// carrying the call leaves, so time spent waiting behind other round trips
// of the same client (see "Connections and batching" in the package
// documentation) is not counted. It also runs on while Redis answers the
// round trips sent before the call's, and while this process or its host
// is too busy to have read the reply (up to 1 s more), so a busy service
// never decides by the policy just because it is busy; on a host with CPU
// to spare a dead Redis costs a call d. The caller's own context still bounds the whole call. When Redis
// leaves a round trip unanswered for d, the calls still waiting for that
// Redis node whose own timeout is at most d are decided by the policy at
// once rather than each paying it again; those of limiters with a longer
// timeout on the same client are sent. A call answered TRYAGAIN (a Redis
// Cluster slot migrating) is sent again while d leaves time for it.
//
// The bound holds whatever the client's settings. With go-redis's
// ContextTimeoutEnabled the client itself gives up at the deadline, which
// calls made close together share so that they share one timer: a call's
// deadline may come up to d/64 sooner than d after it is sent. Without it
// the limiter stops waiting and the abandoned command finishes within the
// client's ReadTimeout, holding a pooled connection until then.
// A command that reached Redis before the deadline may still run: a request
// decided by FailClosed may then count, one decided by FailOpen is counted
// as the admission it was.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: negative timeout %v", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// WithFailurePolicy sets how requests are decided when Redis cannot decide
// them. The default is FailOpen.
func WithFailurePolicy(p FailurePolicy) Option {
	return func(c *config) error {
		if p != FailOpen && p != FailClosed && p != FailLocal {
			return fmt.Errorf("%w: unknown failure policy %d", ErrInvalidOption, int(p))
		}
		c.policy = p
		return nil
	}
}

// WithClock makes the limiter time requests with now, usually time.Now,
// instead of Redis TIME. By default every decision reads Redis's clock inside
// the script, so application servers whose clocks disagree still share one
// timeline. Use WithClock only for a Redis service that refuses TIME in
// scripts, and keep the servers' clocks synchronised: a server whose clock
// runs ahead records requests that others see as recent for longer, and one
// that runs behind sees old requests as still in the window.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		if now == nil {
			return fmt.Errorf("%w: nil clock", ErrInvalidOption)
		}
		c.clock = now
		return nil
	}
}

// WithObserver calls observe after every decision. It may be given several
// times, for example once for Prometheus and once for OpenTelemetry: every
// observer is called, in the order given. The default observes nothing.
func WithObserver(observe Observer) Option {
	return func(c *config) error {
		if observe == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidOption)
		}
		c.observe = joinObservers(c.observe, observe)
		return nil
	}
}

// WithLogger sets where the limiter reports its outages: when Redis stops
// deciding and the FailurePolicy takes over (one warning, with the first
// error), and when Redis decides again (one line, with how many decisions
// the policy made and for how long); and likewise the settlements it
// keeps to retry (see Limiter.Settle): once when it first keeps one, and
// once none is left, with how many landed, left their windows first or
// were dropped. Nothing is logged per call: every
// call's error still goes to its caller, and to the adapters' error hooks.
// The default is slog.Default(); nil reports nothing.
func WithLogger(logger *slog.Logger) Option {
	return func(c *config) error {
		c.logger, c.quiet = logger, logger == nil
		return nil
	}
}

// WithDenyCache sets how many denied identities the limiter remembers, so
// that further calls of a denied identity, with a cost at least the denied
// one, are denied locally, without a Redis round trip, until the denial's
// RetryAfter has passed. Such a Result has Cached set. The default is
// DefaultDenyCacheSize; zero turns the cache off.
//
// The cache never admits, and denies only what Redis would deny: a denial
// records nothing, so no unit leaves any window before RetryAfter. A Refund
// or Reset through this limiter clears the identity's entry; one made by
// another process or limiter is not seen, so the cache may then deny for up
// to the remaining RetryAfter longer than needed. A denial by an in-flight
// limit (InFlight) is not remembered, since a release may free a place at
// any moment. Calls that carry an id from ContextWithRequestID always ask
// Redis, which knows whether an earlier
// attempt was admitted. Each entry takes about 150 bytes plus the identity
// and 32 bytes per limit.
func WithDenyCache(size int) Option {
	return func(c *config) error {
		if size < 0 {
			return fmt.Errorf("%w: negative deny cache size %d", ErrInvalidOption, size)
		}
		c.deny = size
		return nil
	}
}

// Defaults of WithBreaker, WithReplicas and WithLocalCapacity.
const (
	// DefaultBreakerFailures is how many consecutive failed round trips to
	// one Redis node open the circuit. Five tolerates a blip (one slow
	// reply, one reset connection) while a dead node, which fails every
	// round trip, trips it within about five timeouts.
	DefaultBreakerFailures = 5
	// DefaultBreakerCooldown is how long an open circuit decides by the
	// policy before it lets one probe through. 250 ms keeps a dead Redis
	// down to about four probes a second, and brings decisions back from
	// Redis within cooldown plus one round trip (well under a second) after
	// it recovers.
	DefaultBreakerCooldown = 250 * time.Millisecond
	// DefaultLocalCapacity is how many identities FailLocal remembers.
	DefaultLocalCapacity = 10000
)

// WithBreaker sets the circuit breaker: after failures consecutive round
// trips to one Redis node fail (no answer within the timeout, a refused or
// reset connection, CLUSTERDOWN, LOADING, MASTERDOWN, READONLY),
// the limiter stops asking that node for cooldown and decides its calls at
// once by the FailurePolicy, with an error wrapping ErrCircuitOpen and
// ErrUnavailable. Then it lets one call through as a probe: an answer
// closes the circuit, a failure opens it for another cooldown. Round trips
// count, not calls, so a batch of many calls that fails counts once; and
// each Cluster node has a circuit of its own, so a failed shard never
// diverts the calls of healthy ones. TRYAGAIN, which Redis Cluster answers
// while it migrates a slot, is an answer and never counts. failures 0
// disables the breaker. The defaults are DefaultBreakerFailures and
// DefaultBreakerCooldown.
func WithBreaker(failures int, cooldown time.Duration) Option {
	return func(c *config) error {
		if failures < 0 || failures > 0 && cooldown <= 0 {
			return fmt.Errorf("%w: breaker of %d failures and cooldown %v", ErrInvalidOption, failures, cooldown)
		}
		c.failures, c.cooldown = failures, cooldown
		return nil
	}
}

// WithReplicas states how many processes share the limits, so that
// FailLocal gives each floor(quota/n) of each limit and the fleet as a whole
// admits at most the quota while Redis is down. A limit whose quota is below
// n admits nothing under FailLocal. The default is 1. It has no effect under
// other policies.
func WithReplicas(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: %d replicas", ErrInvalidOption, n)
		}
		c.replicas = n
		return nil
	}
}

// WithLocalCapacity bounds how many identities FailLocal remembers; the
// least recently seen is forgotten first, so memory stays bounded however
// many identities call while Redis is down. The default is
// DefaultLocalCapacity.
func WithLocalCapacity(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: local capacity %d", ErrInvalidOption, n)
		}
		c.localCapacity = n
		return nil
	}
}
