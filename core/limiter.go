package slidelimit

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/slidelimit/slidelimit/core/internal/roundtrip"
	"github.com/slidelimit/slidelimit/core/internal/script"
)

// Limiter enforces one or more limits per identity, shared by every process
// that uses the same Redis and key prefix. It is safe for concurrent use.
//
// Each identity has one log in Redis: the requests admitted, one entry per
// unit, whatever limits admitted them. A limit is a way of counting that
// log: Quota units in any Window. So a request under several limits is
// recorded once, and a limit whose quota or window changes, between
// deployments or between calls (AllowLimits), counts what was admitted
// already. Two limiters, in one process or in two services, share an
// identity's count exactly when they share the Redis, the key prefix
// (WithPrefix) and the identity; their limits need not be the same, and
// each counts every request the other admitted, as long as the limits share
// a resolution (Limit.Resolution: exact, or one step). Limiters that must
// count apart (a login limit beside an API limit, say) take different prefixes
// or identities.
type Limiter struct {
	client redis.Scripter
	cfg    config
	own    limitSet          // the limits of New and WithLimits
	deny   *denyCache        // nil when WithDenyCache(0)
	rt     *roundtrip.Caller // the round trips to Redis, and the breaker
	local  *localLimits      // FailLocal's log; nil under other policies
	outage outage
	// pastHorizon counts the settlements that came after a stepped limit
	// forgot their request (ErrPastHorizon).
	pastHorizon atomic.Int64
	replay      replays // settlements Redis could not take, to retry (replay.go)
}

// New returns a Limiter that enforces limit, and any limits added by
// WithLimits, on the given client. The client may be any go-redis client
// that runs scripts: *redis.Client, *redis.ClusterClient, a Sentinel
// *redis.Client from redis.NewFailoverClient, *redis.Ring or a
// redis.UniversalClient.
//
// New validates everything once: an invalid limit returns an error wrapping
// ErrInvalidLimit, a bad option one wrapping ErrInvalidOption. It does not
// contact Redis.
func New(client redis.Scripter, limit Limit, opts ...Option) (*Limiter, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	cfg := config{
		limits:  []Limit{limit},
		prefix:  DefaultPrefix,
		timeout: DefaultTimeout,
		policy:  FailOpen,
		deny:    DefaultDenyCacheSize,

		replicas:      1,
		localCapacity: DefaultLocalCapacity,
		failures:      DefaultBreakerFailures,
		cooldown:      DefaultBreakerCooldown,
	}
	for _, opt := range opts {
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	own, err := newLimitSet(cfg.limits)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, cfg: cfg, own: own, deny: newDenyCache(cfg.deny)}
	l.rt = roundtrip.New(client, roundtrip.Config{Timeout: cfg.timeout, BreakerFailures: cfg.failures, BreakerCooldown: cfg.cooldown})
	l.outage = outage{log: cfg.logger, policy: cfg.policy}
	if cfg.logger == nil && !cfg.quiet {
		l.outage.log = slog.Default()
	}
	if cfg.policy == FailLocal {
		l.local = newLocalLimits(cfg.replicas, cfg.localCapacity)
	}
	return l, nil
}

// Limits returns the limits l enforces, the one given to New first.
func (l *Limiter) Limits() []Limit {
	return append([]Limit(nil), l.cfg.limits...)
}

// Allow records one request by identity if every limit admits it.
// It is AllowN(ctx, identity, 1).
func (l *Limiter) Allow(ctx context.Context, identity string) (Result, error) {
	return l.AllowN(ctx, identity, 1)
}

// AllowN records a request of cost n by identity if every limit has n units
// left in its window, and otherwise records nothing. The decision is one
// atomic script in Redis, so it is exact across every process sharing the
// limit. A denial is a Result with Allowed false and a nil error.
//
// An identity may hold any bytes; see Key. An empty one returns an error
// wrapping ErrInvalidKey, and n below 1 or above the smallest quota one
// wrapping ErrInvalidCost; both with a Result that is not Allowed.
//
// When Redis fails or the timeout passes, AllowN returns an error wrapping
// ErrUnavailable together with the Result the FailurePolicy chose, marked
// Fallback; callers act on Result.Allowed and report the error. Each call
// carries a unique request id, so a call that go-redis retries after a lost
// reply is counted once; to retry a call yourself, give the attempts one id
// with ContextWithRequestID.
func (l *Limiter) AllowN(ctx context.Context, identity string, n int) (Result, error) {
	return l.allow(ctx, identity, n, &l.own)
}

// AllowLimits is AllowN under limits instead of l's own: it records a
// request of cost n by identity if every one of limits has n units left in
// its window. With no limits it is AllowN.
//
// The limits count identity's one log (see Limiter), so callers of one
// identity may each pass limits of their own, such as the quota of a
// tenant's plan read from a token or a database, and each limit counts
// every request admitted under any other. Changing a tenant's plan changes
// its limits at once and keeps its count: a tenant that used 900 of 1,000
// and moves to 100 is denied until 801 units have left the window.
//
// Limits count together when they share a resolution (Limit.Resolution):
// exact limits count the exact log, stepped limits the log of their step.
// Give every plan of one kind the same Step so that a plan change keeps its
// count also across MaxExactQuota.
//
// Invalid limits return an error wrapping ErrInvalidLimit, like New, with a
// Result that is not Allowed; n is checked against the smallest quota among
// the enforced limits of units. A Result of AllowLimits lists its Statuses
// in the order of limits,
// and Refund takes it back like any other. The deny cache (WithDenyCache)
// remembers denials per set of limits, so it answers a call only with a
// denial under the same limits; and under FailLocal a call that Redis
// cannot decide is decided in the process by its own limits, on this
// process's share of each.
func (l *Limiter) AllowLimits(ctx context.Context, identity string, n int, limits ...Limit) (Result, error) {
	if len(limits) == 0 {
		return l.allow(ctx, identity, n, &l.own)
	}
	set, err := newLimitSet(limits)
	if err != nil {
		return l.observe(ctx, identity, n, time.Now(), Result{Limit: limits[0]}, err)
	}
	return l.allow(ctx, identity, n, &set)
}

// allow checks the cost n against set and runs the admission script.
func (l *Limiter) allow(ctx context.Context, identity string, n int, set *limitSet) (Result, error) {
	if n < 1 || n > set.minQuota {
		err := fmt.Errorf("%w: cost %d is outside 1..%d", ErrInvalidCost, n, set.minQuota)
		return l.observe(ctx, identity, n, time.Now(), Result{Limit: set.limits[0]}, err)
	}
	return l.decideOne(ctx, identity, n, requestID(ctx), set)
}

// Peek reports whether identity could make a request of cost 1 now, and the
// state of each limit, without recording anything.
func (l *Limiter) Peek(ctx context.Context, identity string) (Result, error) {
	return l.decideOne(ctx, identity, 1, "", &l.own)
}

// PeekLimits is Peek under limits instead of l's own (see AllowLimits).
// With no limits it is Peek.
func (l *Limiter) PeekLimits(ctx context.Context, identity string, limits ...Limit) (Result, error) {
	if len(limits) == 0 {
		return l.Peek(ctx, identity)
	}
	set, err := newLimitSet(limits)
	if err != nil {
		return l.observe(ctx, identity, 1, time.Now(), Result{Limit: limits[0]}, err)
	}
	return l.decideOne(ctx, identity, 1, "", &set)
}

// decideOne runs the admission script for one identity; an empty id
// peeks.
func (l *Limiter) decideOne(ctx context.Context, identity string, n int, id string, set *limitSet) (Result, error) {
	tag, err := hashTag(identity)
	if err != nil {
		return l.observe(ctx, identity, n, time.Now(), Result{Limit: set.limits[0]}, err)
	}
	return l.decide(ctx, identity, []string{logKey(l.cfg.prefix, tag)}, nil, n, id, set)
}

// decide runs the admission script under set, whose limits count the
// logs whose keys start with stems (one per level); names are the levels'
// names for the Statuses of a tenant's tree, nil otherwise; who names the
// decision to the deny cache and the observer. An empty id peeks.
func (l *Limiter) decide(ctx context.Context, who string, stems, names []string, n int, id string, set *limitSet) (Result, error) {
	start := time.Now()
	var asked time.Time // the deny cache's clock before asking Redis
	if l.deny != nil {
		asked = l.clockNow(start)
		// An id from ContextWithRequestID may have been admitted before,
		// which only Redis knows.
		if ctx.Value(requestIDKey{}) == nil {
			if res, ok := l.deny.lookup(who, set.sig, n, asked); ok {
				return l.observe(ctx, who, n, start, res, nil)
			}
		}
	}
	keys := keysFor(stems, set)
	reply, err := l.rt.Decide(ctx, set.plan.Command(keys, n, id, l.now()))
	if err != nil {
		res, err := l.fallback(stems, names, n, id, set, fmt.Errorf("allow script: %w", err))
		return l.observe(ctx, who, n, start, res, err)
	}
	res, err := result(reply, set, names)
	switch {
	case err != nil:
		res, err = l.fallback(stems, names, n, id, set, err)
	case res.Allowed && id != "":
		at := l.clockNow(time.Now())
		res.d.admitted = admission{from: l, who: who, id: id, n: n, set: set, keys: keys, at: at, until: at.Add(set.span)}
		res.d.admitted.cost.Store(int64(n))
		res.d.admitted.lo.Store(int64(n))
		res.d.admitted.hi.Store(int64(n))
	case !res.Allowed && l.deny != nil:
		l.deny.store(who, set.sig, n, asked, res)
	}
	return l.observe(ctx, who, n, start, res, err)
}

// result turns the script's reply to a decision under set, whose levels
// are named names (nil for one identity), into a Result. Its deciding limit is an
// enforced one (not a shadow): on a denial, the denying limit that takes
// longest to admit the request; otherwise the limit with the fewest units
// left.
func result(reply []int64, set *limitSet, names []string) (Result, error) {
	var raw [inlineStatuses]script.Status
	var statuses []script.Status
	if n := len(set.limits); n <= inlineStatuses {
		statuses = raw[:n]
	} else {
		statuses = make([]script.Status, n)
	}
	allowed, _, err := set.plan.Decode(reply, statuses)
	if err != nil {
		return Result{}, err
	}
	res := Result{Allowed: allowed}
	res.d, res.Statuses = newDecision(len(set.limits))
	decider := -1
	for i, lim := range set.limits {
		v := statuses[i]
		s := Status{
			Limit:      lim,
			Remaining:  v.Remaining,
			RetryAfter: time.Duration(v.RetryAfter) * time.Microsecond,
			ResetAfter: time.Duration(v.ResetAfter) * time.Microsecond,
		}
		if names != nil {
			s.Level = names[set.levels[i]]
		}
		res.Statuses[i] = s
		if lim.Shadow && decider >= 0 {
			continue
		}
		if decider < 0 || set.limits[decider].Shadow {
			decider = i
			continue
		}
		d := res.Statuses[decider]
		if res.Allowed && s.Remaining < d.Remaining || !res.Allowed && s.RetryAfter > d.RetryAfter {
			decider = i
		}
	}
	d := res.Statuses[decider]
	res.Limit, res.Remaining, res.RetryAfter, res.ResetAfter = d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter
	return res, nil
}

// Reset forgets every request identity made: it deletes the identity's
// exact log and the stepped logs of the steps of l's own limits (a stepped
// log of another step, used by AllowLimits, is left to expire). Errors wrap
// ErrUnavailable or ErrInvalidKey.
func (l *Limiter) Reset(ctx context.Context, identity string) error {
	tag, err := hashTag(identity)
	if err != nil {
		return err
	}
	// The exact log always, which AllowLimits may have written even when
	// l's own limits are all stepped.
	stem := logKey(l.cfg.prefix, tag)
	keys := keysFor([]string{stem}, &l.own)
	if log := stem + stepSuffix(0); !slices.Contains(keys, log) {
		keys = append(keys, log)
	}
	if l.deny != nil {
		l.deny.forget(identity)
	}
	err = l.rt.Run(ctx, func(ctx context.Context) error {
		return script.Reset.Run(ctx, l.client, keys).Err()
	})
	if err != nil {
		return fmt.Errorf("%w: reset script: %w", ErrUnavailable, err)
	}
	return nil
}

// keysFor returns the keys a decision under set takes, one per part of its
// plan: the exact, stepped or in-flight log of the part's level, whose
// logs' keys start with stems[level].
func keysFor(stems []string, set *limitSet) []string {
	parts := set.plan.Parts()
	keys := make([]string, len(parts))
	for i, p := range parts {
		keys[i] = stems[p.Level] + set.suffixes[i]
	}
	return keys
}

// clockNow returns the deny cache's time: WithClock's clock, else wall, the
// local monotonic clock read at wall.
func (l *Limiter) clockNow(wall time.Time) time.Time {
	if l.cfg.clock != nil {
		return l.cfg.clock()
	}
	return wall
}

// now returns the script's time argument: empty for Redis TIME.
func (l *Limiter) now() string {
	if l.cfg.clock == nil {
		return ""
	}
	return strconv.FormatInt(l.cfg.clock().UnixMicro(), 10)
}

// isNil reports whether client is nil, or a nil pointer to one of
// go-redis's clients, which a nil check of the interface misses.
func isNil(client redis.Scripter) bool {
	switch c := client.(type) {
	case nil:
		return true
	case *redis.Client:
		return c == nil
	case *redis.ClusterClient:
		return c == nil
	case *redis.Ring:
		return c == nil
	}
	return false
}

// fallback returns the FailurePolicy's Result for a Redis failure of the
// request of cost n with id ("" to peek) under set, whose levels count the
// logs of stems, named names.
func (l *Limiter) fallback(stems, names []string, n int, id string, set *limitSet, cause error) (Result, error) {
	res := Result{Allowed: l.cfg.policy == FailOpen, Limit: set.limits[0], Fallback: true}
	if l.local != nil {
		res = l.local.decide(stems, names, n, id, set, time.Now())
	} else if !res.Allowed {
		res.RetryAfter = time.Second
	}
	return res, fmt.Errorf("%w (%v): %w", ErrUnavailable, l.cfg.policy, cause)
}

// observe applies shadow mode to a decision, reports it to the observer
// and returns it.
func (l *Limiter) observe(ctx context.Context, identity string, n int, start time.Time, res Result, err error) (Result, error) {
	l.outage.observe(ctx, res, err)
	res = l.shadowed(res, err)
	if l.cfg.observe != nil {
		l.cfg.observe(ctx, Observation{Identity: identity, Cost: n, Result: res, Err: err, Latency: time.Since(start)})
	}
	return res, err
}

type requestIDKey struct{}

// ContextWithRequestID returns a copy of ctx that makes AllowN record the
// request under id, so that an application which retries a call whose
// outcome it does not know (a timeout, a fail-open fallback) is counted
// once: pass the same context, or one with the same id, to each attempt of
// one logical request. The attempts must also carry the same identity and
// cost. Without it every call gets a fresh random id, which already makes
// go-redis's own retries safe.
//
// A stepped limit (see Limit.Step) keeps an id for the shorter of its
// window and 15 minutes after the admission: a retry after that counts
// again.
//
// The id must be unique per logical request across every server sharing
// the limit, such as a request id your service generates. Never take it
// from a client unchecked: a client repeating one id would be admitted
// again and again without being counted. The id may hold any bytes; it is
// reduced to 8 bytes by SHA-256.
func ContextWithRequestID(ctx context.Context, id string) context.Context {
	sum := sha256.Sum256([]byte(id))
	return context.WithValue(ctx, requestIDKey{}, string(sum[:8]))
}

// requestID returns the request id ContextWithRequestID put in ctx, or a
// new random one.
func requestID(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		return id
	}
	return newRequestID()
}

// newRequestID returns 8 random bytes. Members of one key are compared only
// with the members of that key still in its window, so 64 bits make a
// collision negligible (below 1e-7 for a key holding a million requests).
//
// The ids are cut from batches of random bytes, so that an id costs no
// allocation of its own (see requestid.go).
func newRequestID() string {
	return requestIDs.next()
}
