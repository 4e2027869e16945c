package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// policies is every FailurePolicy with the decision it makes without Redis.
// policyCase is a failure policy and whether it admits.
type policyCase struct {
	policy  slidelimit.FailurePolicy
	allowed bool
}

var policies = []policyCase{
	{slidelimit.FailOpen, true},
	{slidelimit.FailClosed, false},
}

// TestRedisDown kills a private Redis under a limiter. Every call then
// returns the failure policy's decision, marked Fallback, with an error
// wrapping ErrUnavailable, and headers that claim no quota; nothing panics.
// When Redis comes back, decisions come from Redis again, consistent with
// what the restarted, empty server holds.
func TestRedisDown(t *testing.T) {
	const quota = 5
	limit := slidelimit.PerMinute(quota)
	for _, p := range policies {
		t.Run(p.policy.String(), func(t *testing.T) {
			t.Parallel()
			srv := redistest.StartServer(t)
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			t.Cleanup(func() { _ = rdb.Close() })
			prefix := redistest.Prefix(t)
			const identity = "down"
			lim := newLimiter(t, rdb, prefix, limit,
				slidelimit.WithTimeout(500*time.Millisecond), slidelimit.WithFailurePolicy(p.policy))

			first, err := lim.Allow(t.Context(), identity)
			if err != nil || !first.Allowed || first.Fallback {
				t.Fatalf("Allow(%q) with Redis up = %+v, %v; want admitted by Redis", identity, first, err)
			}

			srv.Stop()
			calls := []struct {
				name string
				call func(context.Context) (slidelimit.Result, error)
			}{
				{"Allow", func(ctx context.Context) (slidelimit.Result, error) { return lim.Allow(ctx, identity) }},
				{"AllowN(2)", func(ctx context.Context) (slidelimit.Result, error) { return lim.AllowN(ctx, identity, 2) }},
				{"Peek", func(ctx context.Context) (slidelimit.Result, error) { return lim.Peek(ctx, identity) }},
			}
			for _, c := range calls {
				res, err := c.call(t.Context())
				if !errors.Is(err, slidelimit.ErrUnavailable) {
					t.Errorf("%s(%q) with Redis down: err = %v, want one wrapping ErrUnavailable", c.name, identity, err)
				}
				if res.Allowed != p.allowed || !res.Fallback {
					t.Errorf("%s(%q) with Redis down = {Allowed: %v, Fallback: %v}, want {Allowed: %v, Fallback: true}",
						c.name, identity, res.Allowed, res.Fallback, p.allowed)
				}
				got := map[string]string{}
				slidelimit.Headers{}.Write(res, func(name, value string) { got[name] = value })
				want := map[string]string{}
				if !p.allowed {
					want[slidelimit.FieldRetryAfter] = "1"
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("headers of %s's fallback = %v, want %v", c.name, got, want)
				}
			}
			if err := lim.Refund(t.Context(), first); !errors.Is(err, slidelimit.ErrUnavailable) {
				t.Errorf("Refund with Redis down = %v, want an error wrapping ErrUnavailable", err)
			}
			if err := lim.Reset(t.Context(), identity); !errors.Is(err, slidelimit.ErrUnavailable) {
				t.Errorf("Reset(%q) with Redis down = %v, want an error wrapping ErrUnavailable", identity, err)
			}

			srv.Restart()
			res := awaitRedisDecision(t, lim, identity)
			if !res.Allowed || len(res.Statuses) != 1 {
				t.Fatalf("Allow(%q) after restart = %+v, want admitted with one status", identity, res)
			}
			// The restarted server is empty; whatever it holds now is what
			// Remaining must account for.
			if got := zcard(t, rdb, prefix, identity, limit); int(got) != quota-res.Remaining {
				t.Errorf("after restart: ZCARD = %d but Remaining = %d, want ZCARD = %d", got, res.Remaining, quota-res.Remaining)
			}
		})
	}
}

// TestRedisHung pauses a private Redis (CLIENT PAUSE), so that it accepts
// commands but does not answer them. A call then returns the failure
// policy's decision once the limiter's timeout passes, instead of waiting
// for Redis; when the pause ends, decisions come from Redis again.
//
// It runs with and without go-redis's ContextTimeoutEnabled: without it
// go-redis ignores the context's deadline while it waits for a reply, and
// the limiter must stop waiting by itself.
func TestRedisHung(t *testing.T) {
	limit := slidelimit.PerMinute(5)
	for _, p := range policies {
		for _, ctxTimeout := range []bool{true, false} {
			name := p.policy.String() + "/ContextTimeoutEnabled=" + strconv.FormatBool(ctxTimeout)
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				hung(t, p, ctxTimeout, limit)
			})
		}
	}
}

// hung runs TestRedisHung for one policy and client setting.
func hung(t *testing.T, p policyCase, ctxTimeout bool, limit slidelimit.Limit) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: ctxTimeout})
	t.Cleanup(func() { _ = rdb.Close() })
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = admin.Close() })
	const identity = "hung"
	lim := newLimiter(t, rdb, redistest.Prefix(t), limit,
		slidelimit.WithTimeout(100*time.Millisecond), slidelimit.WithFailurePolicy(p.policy))
	if _, err := lim.Allow(t.Context(), identity); err != nil {
		t.Fatalf("Allow(%q) with Redis up = %v", identity, err)
	}

	// Until the pause ends, Redis holds every command it receives.
	if err := admin.Do(t.Context(), "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
		t.Fatalf("CLIENT PAUSE: %v", err)
	}
	res, err := lim.Allow(t.Context(), identity)
	if !errors.Is(err, slidelimit.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Allow(%q) with Redis paused: err = %v, want one wrapping ErrUnavailable and context.DeadlineExceeded", identity, err)
	}
	if res.Allowed != p.allowed || !res.Fallback {
		t.Errorf("Allow(%q) with Redis paused = {Allowed: %v, Fallback: %v}, want {Allowed: %v, Fallback: true}",
			identity, res.Allowed, res.Fallback, p.allowed)
	}

	// The pause ends by itself (CLIENT UNPAUSE would wait for it too).
	awaitRedisDecision(t, lim, identity)
}

// awaitRedisDecision calls Allow until Redis, not the failure policy,
// decides, and returns that decision. It fails the test after 15 seconds.
func awaitRedisDecision(t *testing.T, lim *slidelimit.Limiter, identity string) slidelimit.Result {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err := lim.Allow(t.Context(), identity)
		if err == nil && !res.Fallback {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("Allow(%q) = %+v, %v 15s after Redis came back, want a decision from Redis", identity, res, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
