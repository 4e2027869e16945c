package slidelimit_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// blackhole returns the address of a listener that accepts connections and
// never answers, as a Redis behind a dropped network path would.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// untilNot calls Allow until its error is not ErrCircuitOpen, and returns
// that call's result; it fails the test after 5 s.
func untilNot(t *testing.T, lim *slidelimit.Limiter, identity string) (slidelimit.Result, error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res, err := lim.Allow(t.Context(), identity)
		if !errors.Is(err, slidelimit.ErrCircuitOpen) {
			return res, err
		}
		if time.Now().After(deadline) {
			t.Fatalf("the circuit stayed open for 5s: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBreakerOpensProbesAndCloses kills Redis under a limiter: the breaker
// opens after the configured failures, answers at once while open, lets one
// probe through after the cooldown, and closes when Redis is back.
func TestBreakerOpensProbesAndCloses(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	var mu sync.Mutex
	var fallbacks int
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(100), slidelimit.WithTimeout(200*time.Millisecond),
		slidelimit.WithBreaker(3, 300*time.Millisecond),
		slidelimit.WithObserver(func(_ context.Context, o slidelimit.Observation) {
			mu.Lock()
			defer mu.Unlock()
			if o.Result.Fallback {
				fallbacks++
			}
		}))
	allow(t, lim, "b")
	srv.Stop()

	ctx := t.Context()
	for i := range 3 {
		res, err := lim.Allow(ctx, "b")
		if !errors.Is(err, slidelimit.ErrUnavailable) || errors.Is(err, slidelimit.ErrCircuitOpen) || !res.Fallback || !res.Allowed {
			t.Fatalf("failure %d with Redis down = %+v, %v, want a fail-open fallback wrapping ErrUnavailable, the circuit still closed", i+1, res, err)
		}
	}
	start := time.Now()
	for i := range 100 {
		res, err := lim.Allow(ctx, "b")
		if !errors.Is(err, slidelimit.ErrCircuitOpen) || !errors.Is(err, slidelimit.ErrUnavailable) || !res.Fallback || !res.Allowed {
			t.Fatalf("call %d with the circuit open = %+v, %v, want a fallback wrapping ErrCircuitOpen and ErrUnavailable", i+1, res, err)
		}
	}
	t.Logf("100 decisions with the circuit open took %v in all", time.Since(start))

	// Half-open with Redis still down: one probe goes to Redis, fails, and
	// opens the circuit again.
	if _, err := untilNot(t, lim, "b"); !errors.Is(err, slidelimit.ErrUnavailable) {
		t.Fatalf("the probe with Redis down = %v, want ErrUnavailable", err)
	}
	if _, err := lim.Allow(ctx, "b"); !errors.Is(err, slidelimit.ErrCircuitOpen) {
		t.Fatalf("the call after a failed probe = %v, want ErrCircuitOpen: the probe must reopen the circuit", err)
	}

	srv.Restart()
	restarted := time.Now()
	var res slidelimit.Result
	var err error
	for {
		res, err = untilNot(t, lim, "b")
		if err == nil {
			break
		}
		if time.Since(restarted) > 10*time.Second {
			t.Fatalf("no decision from Redis 10s after it restarted: %v", err)
		}
	}
	t.Logf("decisions came from Redis again %v after it restarted (cooldown 300ms)", time.Since(restarted))
	if !res.Allowed || res.Fallback {
		t.Fatalf("first decision after recovery = %+v, want a real admit", res)
	}
	for i := range 5 {
		if _, err := lim.Allow(ctx, "b"); err != nil {
			t.Fatalf("call %d after the circuit closed = %v, want no error", i+1, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fallbacks < 105 {
		t.Errorf("the observer saw %d fallbacks, want at least 105", fallbacks)
	}
}

// TestBlackholedRedisCostsTheTimeout points a limiter at a Redis that
// never answers: concurrent callers wait about the timeout, once, and then
// the open circuit answers at once.
func TestBlackholedRedisCostsTheTimeout(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: blackhole(t), MaxRetries: -1, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	timeout := 100 * time.Millisecond
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(5), slidelimit.WithTimeout(timeout),
		slidelimit.WithFailurePolicy(slidelimit.FailClosed))

	var mu sync.Mutex
	var slowest time.Duration
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			res, err := lim.Allow(t.Context(), "hole")
			d := time.Since(start)
			if !errors.Is(err, slidelimit.ErrUnavailable) || res.Allowed || !res.Fallback {
				t.Errorf("Allow on a blackholed Redis = %+v, %v, want a fail-closed fallback", res, err)
			}
			mu.Lock()
			defer mu.Unlock()
			slowest = max(slowest, d)
		}()
	}
	wg.Wait()
	t.Logf("200 concurrent calls on a blackholed Redis (timeout %v): the slowest took %v", timeout, slowest)
	// On a host with CPU to spare the slowest takes about the timeout; on a
	// saturated one up to a second more (see WithTimeout).
	if slowest > timeout+3*time.Second {
		t.Errorf("the slowest call took %v, want at most the timeout %v and the busy allowance", slowest, timeout)
	}

	// Sequential calls until the circuit opens, then calls that cost nothing.
	var open time.Duration
	var before []time.Duration
	for i := 0; ; i++ {
		start := time.Now()
		_, err := lim.Allow(t.Context(), "hole")
		if errors.Is(err, slidelimit.ErrCircuitOpen) {
			open = time.Since(start)
			break
		}
		before = append(before, time.Since(start).Round(time.Millisecond))
		if i > 20 {
			t.Fatalf("the circuit did not open after %d failed calls", i)
		}
	}
	t.Logf("sequential calls before the circuit opened took %v", before)
	t.Logf("a decision with the circuit open took %v", open)
	if open > timeout/2 {
		t.Errorf("a decision with the circuit open took %v, want far below the timeout", open)
	}
}

// TestFailLocal shares one identity among three limiters, as three
// processes would, each holding a third of the quota: with Redis down they
// admit at most the quota in all, and mark every decision Fallback.
func TestFailLocal(t *testing.T) {
	srv := redistest.StartServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	srv.Stop()

	const replicas, quota = 3, 10 // floor(10/3) = 3 each, 9 in all
	var mu sync.Mutex
	var observed, observedFallback int
	var lims []*slidelimit.Limiter
	for range replicas {
		lim, _ := newLimiter(t, rdb, slidelimit.Per(quota, time.Minute), slidelimit.WithTimeout(200*time.Millisecond),
			slidelimit.WithFailurePolicy(slidelimit.FailLocal), slidelimit.WithReplicas(replicas),
			slidelimit.WithObserver(func(_ context.Context, o slidelimit.Observation) {
				mu.Lock()
				defer mu.Unlock()
				observed++
				if o.Result.Fallback && errors.Is(o.Err, slidelimit.ErrUnavailable) {
					observedFallback++
				}
			}))
		lims = append(lims, lim)
	}
	var wg sync.WaitGroup
	admitted := make([]int, replicas)
	for i, lim := range lims {
		for range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := lim.Allow(t.Context(), "shared")
				if !errors.Is(err, slidelimit.ErrUnavailable) || !res.Fallback || !res.Local || len(res.Statuses) != 1 {
					t.Errorf("fail-local Allow with Redis down = %+v, %v, want a local fallback of the share's status, wrapping ErrUnavailable", res, err)
				}
				if !res.Allowed && res.RetryAfter <= 0 {
					t.Errorf("fail-local denial = %+v, want a RetryAfter", res)
				}
				if res.Allowed {
					mu.Lock()
					admitted[i]++
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	total := 0
	for i, n := range admitted {
		if n != quota/replicas {
			t.Errorf("limiter %d admitted %d with Redis down, want its share %d", i, n, quota/replicas)
		}
		total += n
	}
	if total > quota {
		t.Fatalf("%d limiters admitted %d in all with Redis down, want at most the quota %d", replicas, total, quota)
	}
	mu.Lock()
	defer mu.Unlock()
	if observed != 60 || observedFallback != 60 {
		t.Errorf("the observers saw %d decisions, %d of them fallbacks, want 60 and 60", observed, observedFallback)
	}
}
