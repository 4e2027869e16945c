package slidelimit_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

func TestPeekRecordsNothing(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(2))
	ctx := t.Context()
	for range 5 {
		res, err := lim.Peek(ctx, "p")
		if err != nil || !res.Allowed || res.Remaining != 2 {
			t.Fatalf("Peek on a fresh identity = %+v, %v, want allowed with 2 remaining", res, err)
		}
	}
	allow(t, lim, "p")
	allow(t, lim, "p")
	res, err := lim.Peek(ctx, "p")
	if err != nil || res.Allowed || res.Remaining != 0 || res.RetryAfter <= 0 {
		t.Fatalf("Peek on a full identity = %+v, %v, want denied with a RetryAfter", res, err)
	}
}

func TestRefund(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(5), slidelimit.WithLimits(slidelimit.PerHour(50)))
		ctx := t.Context()
		first, err := lim.AllowN(ctx, "r", 3)
		if err != nil || !first.Allowed {
			t.Fatalf("AllowN(3) = %+v, %v", first, err)
		}
		second := allow(t, lim, "r")
		for range 2 { // the second refund of the same request changes nothing
			if err := lim.Refund(ctx, first); err != nil {
				t.Fatalf("Refund = %v", err)
			}
			res, _ := lim.Peek(ctx, "r")
			if res.Remaining != 4 || res.Statuses[1].Remaining != 49 {
				t.Fatalf("after refunding cost 3, Peek = %+v, want 4 and 49 remaining", res)
			}
		}
		denied, _ := lim.AllowN(ctx, "r", 5)
		if denied.Allowed {
			t.Fatalf("AllowN(5) = %+v, want denied", denied)
		}
		if err := lim.Refund(ctx, denied); err != nil {
			t.Fatalf("Refund(denied) = %v, want nil", err)
		}
		if res, _ := lim.Peek(ctx, "r"); res.Remaining != 4 {
			t.Fatalf("refunding a denial changed the count: %+v", res)
		}
		if err := lim.Refund(ctx, second); err != nil {
			t.Fatal(err)
		}
		if res, _ := lim.Peek(ctx, "r"); res.Remaining != 5 {
			t.Fatalf("after refunding everything, Peek = %+v, want 5 remaining", res)
		}
	})
}

// TestRefundThroughAnotherLimiter checks that a Result is refunded where
// it was recorded, whichever limiter on the client refunds it.
func TestRefundThroughAnotherLimiter(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(2), slidelimit.WithLimits(slidelimit.PerHour(5).Named("hourly")))
	other, _ := newLimiter(t, rdb, slidelimit.PerSecond(1))
	res := allow(t, lim, "r")
	allow(t, other, "r")
	if err := other.Refund(t.Context(), res); err != nil {
		t.Fatalf("Refund = %v", err)
	}
	if got, _ := lim.Peek(t.Context(), "r"); got.Remaining != 2 || got.Statuses[1].Remaining != 5 {
		t.Errorf("after another limiter refunded the request, Peek = %+v, want 2 and 5 remaining", got)
	}
	if got, _ := other.Peek(t.Context(), "r"); got.Allowed {
		t.Errorf("the refunding limiter's own count changed: Peek = %+v, want denied", got)
	}
}

func TestReset(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithLimits(slidelimit.PerHour(10)))
	allow(t, lim, "x")
	allow(t, lim, "y")
	if err := lim.Reset(t.Context(), "x"); err != nil {
		t.Fatalf("Reset = %v", err)
	}
	if res := allow(t, lim, "x"); !res.Allowed || res.Statuses[1].Remaining != 9 {
		t.Fatalf("Allow(x) after Reset = %+v, want allowed with a fresh hourly count", res)
	}
	if res := allow(t, lim, "y"); res.Allowed {
		t.Fatalf("Allow(y) = %+v: Reset(x) must not touch y", res)
	}
}

// TestScriptReloadsAfterFlush checks EVALSHA falls back to EVAL when Redis
// has forgotten the script.
func TestScriptReloadsAfterFlush(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(3))
	allow(t, lim, "f")
	if err := rdb.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if res := allow(t, lim, "f"); !res.Allowed || res.Remaining != 1 {
		t.Fatalf("Allow after SCRIPT FLUSH = %+v, want allowed with 1 remaining", res)
	}
}

// TestRedisTimeIgnoresClientClocks shows why Redis TIME is the default: two
// limiters whose client clocks are ten seconds apart disagree in client-clock
// mode, while in Redis-TIME mode every client reads the same clock.
func TestRedisTimeIgnoresClientClocks(t *testing.T) {
	rdb := redistest.Client(t)
	limit := slidelimit.Per(1, time.Second)
	prefix := redistest.Prefix(t)
	skewed := func(d time.Duration, opts ...slidelimit.Option) *slidelimit.Limiter {
		opts = append(opts, slidelimit.WithPrefix(prefix), slidelimit.WithClock(func() time.Time { return time.Now().Add(d) }))
		lim, err := slidelimit.New(rdb, limit, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	ahead, behind := skewed(10*time.Second), skewed(0)
	allow(t, ahead, "c") // recorded ten seconds in the future
	res := allow(t, behind, "c")
	if res.Allowed || res.RetryAfter < 10*time.Second {
		t.Fatalf("client-clock mode: Allow on the correct clock = %+v, want denied for over 10s (the skew)", res)
	}

	// Redis-TIME mode: two limiters (two servers) share one clock, so the
	// second sees the first's request exactly one window long.
	shared := redistest.Prefix(t)
	a, errA := slidelimit.New(rdb, limit, slidelimit.WithPrefix(shared))
	b, errB := slidelimit.New(rdb, limit, slidelimit.WithPrefix(shared))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	start := redisNow(t, rdb)
	allow(t, a, "c")
	res = allow(t, b, "c")
	elapsed := redisNow(t, rdb).Sub(start)
	if res.Allowed || res.RetryAfter > time.Second || res.RetryAfter < time.Second-elapsed-time.Millisecond {
		t.Fatalf("Redis-TIME mode: Allow on the second limiter = %+v, want denied for the rest of one second by Redis's clock", res)
	}
}

func TestObserver(t *testing.T) {
	rdb := redistest.Client(t)
	var mu sync.Mutex
	var got []slidelimit.Observation
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithObserver(func(_ context.Context, o slidelimit.Observation) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, o)
	}))
	allow(t, lim, "o")
	allow(t, lim, "o")
	_, _ = lim.AllowN(t.Context(), "o", 0)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("observer saw %d decisions, want 3", len(got))
	}
	if o := got[0]; o.Identity != "o" || o.Cost != 1 || !o.Result.Allowed || o.Err != nil || o.Latency <= 0 {
		t.Errorf("first observation = %+v", o)
	}
	if o := got[1]; o.Result.Allowed || o.Err != nil {
		t.Errorf("second observation = %+v, want a denial without error", o)
	}
	if o := got[2]; !errors.Is(o.Err, slidelimit.ErrInvalidCost) {
		t.Errorf("third observation Err = %v, want ErrInvalidCost", o.Err)
	}
}

// policyLimiters starts a Redis server of the test's own and returns it,
// a client of it that does not retry, and two limiters of 1 per minute on
// it with a timeout of 200 ms: one fails open, the other closed.
func policyLimiters(t *testing.T) (srv *redistest.Server, rdb *redis.Client, open, closed *slidelimit.Limiter) {
	t.Helper()
	srv = redistest.StartServer(t)
	rdb = redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	open, _ = newLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithTimeout(200*time.Millisecond))
	closed, _ = newLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithTimeout(200*time.Millisecond),
		slidelimit.WithFailurePolicy(slidelimit.FailClosed))
	return srv, rdb, open, closed
}

func TestFailurePolicy(t *testing.T) {
	srv, _, open, closed := policyLimiters(t)
	allow(t, open, "f")
	allow(t, closed, "f")
	srv.Stop()

	ctx := t.Context()
	res, err := open.Allow(ctx, "f")
	if !errors.Is(err, slidelimit.ErrUnavailable) || !res.Allowed || !res.Fallback || res.Statuses != nil {
		t.Errorf("fail-open Allow with Redis down = %+v, %v, want allowed fallback and ErrUnavailable", res, err)
	}
	if f := fields(slidelimit.Headers{}, res); f != "" {
		t.Errorf("fail-open headers = %q, want none", f)
	}
	res, err = closed.Allow(ctx, "f")
	if !errors.Is(err, slidelimit.ErrUnavailable) || res.Allowed || !res.Fallback || res.RetryAfter != time.Second {
		t.Errorf("fail-closed Allow with Redis down = %+v, %v, want denied fallback with RetryAfter 1s", res, err)
	}
	if f := fields(slidelimit.Headers{}, res); f != "Retry-After: 1\n" {
		t.Errorf("fail-closed headers = %q, want Retry-After only", f)
	}
	if err := open.Refund(ctx, res); err != nil {
		t.Errorf("Refund(fallback) = %v, want nil: there is nothing to refund", err)
	}
	if err := open.Reset(ctx, "f"); !errors.Is(err, slidelimit.ErrUnavailable) {
		t.Errorf("Reset with Redis down = %v, want ErrUnavailable", err)
	}

	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err = closed.Allow(ctx, "f")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no decision from Redis 5s after it restarted: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !res.Allowed || res.Fallback {
		t.Fatalf("first Allow after restart = %+v, want a real admit (the restarted Redis is empty)", res)
	}
}

// TestContextWithRequestID retries one logical request, as an application
// does after a timeout, and checks it counts once.
func TestContextWithRequestID(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(3))
	first := slidelimit.ContextWithRequestID(t.Context(), "req-1")
	for i := range 3 {
		res, err := lim.Allow(first, "u")
		if err != nil || !res.Allowed || res.Remaining != 2 {
			t.Fatalf("attempt %d of req-1 = %+v, %v, want allowed with 2 remaining", i+1, res, err)
		}
	}
	second := slidelimit.ContextWithRequestID(t.Context(), "req-2")
	if res, err := lim.Allow(second, "u"); err != nil || res.Remaining != 1 {
		t.Fatalf("req-2 = %+v, %v, want 1 remaining", res, err)
	}
	if res := allow(t, lim, "u"); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("a request without an id = %+v, want allowed with 0 remaining", res)
	}
}
