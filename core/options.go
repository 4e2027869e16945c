package slidelimit

import (
	"context"
	"fmt"
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
)

// String returns "fail-open" or "fail-closed".
func (p FailurePolicy) String() string {
	switch p {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
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
// must be safe for concurrent use.
type Observer func(ctx context.Context, o Observation)

// Option configures a Limiter in New.
type Option func(*config) error

type config struct {
	limits  []Limit
	prefix  string
	timeout time.Duration
	policy  FailurePolicy
	clock   func() time.Time
	observe Observer
	deny    int // deny cache size
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

// WithTimeout bounds each call's Redis round trip, so that a slow or dead
// Redis costs a request at most d before the FailurePolicy decides. The
// default is DefaultTimeout; zero means no bound beyond the caller's context.
//
// The bound holds whatever the client's settings. With go-redis's
// ContextTimeoutEnabled the client itself gives up at the deadline;
// without it the limiter stops waiting and the abandoned command finishes
// within the client's ReadTimeout, holding a pooled connection until then.
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
		if p != FailOpen && p != FailClosed {
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

// WithObserver calls observe after every decision. The default observes
// nothing.
func WithObserver(observe Observer) Option {
	return func(c *config) error {
		if observe == nil {
			return fmt.Errorf("%w: nil observer", ErrInvalidOption)
		}
		c.observe = observe
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
// to the remaining RetryAfter longer than needed. Calls that carry an id from
// ContextWithRequestID always ask Redis, which knows whether an earlier
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
