package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// scriptCounter is a go-redis hook counting the scripts a client runs in
// Redis, alone or in pipelines: the limiter sends through the client, so
// its hooks see every command.
type scriptCounter struct{ n atomic.Int64 }

func (c *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.count(cmd, err)
		return err
	}
}

func (c *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.count(cmd, cmd.Err())
		}
		return err
	}
}

// count counts cmd if it ran a script: an EVALSHA answered NOSCRIPT is
// followed by an EVAL, which counts.
func (c *scriptCounter) count(cmd redis.Cmder, err error) {
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		return
	}
	switch cmd.Name() {
	case "eval", "evalsha":
		c.n.Add(1)
	}
}

// newScriptCounter adds a script counter to rdb's hooks.
func newScriptCounter(rdb redis.UniversalClient) *scriptCounter {
	c := &scriptCounter{}
	rdb.AddHook(c)
	return c
}

func (c *scriptCounter) load() int64 { return c.n.Load() }

// countingClient returns a client of its own on the test server, and the
// counter of the scripts it sends.
func countingClient(t *testing.T) (*redis.Client, *scriptCounter) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Client(t).Options().Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, newScriptCounter(rdb)
}

// TestDenyCacheFlood denies an identity, then floods it with 10,000 calls
// from 16 goroutines: none of them may reach Redis, and each must be the
// denial with its RetryAfter counting down. Standalone and Cluster.
func TestDenyCacheFlood(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		calls := newScriptCounter(rdb)
		denyCacheFlood(t, rdb, calls)
	})
}

func denyCacheFlood(t *testing.T, rdb redis.UniversalClient, calls *scriptCounter) {
	var cached atomic.Int64
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(3), slidelimit.WithLimits(slidelimit.PerHour(100)),
		slidelimit.WithObserver(func(_ context.Context, o slidelimit.Observation) {
			if o.Result.Cached {
				cached.Add(1)
			}
		}))
	for range 3 {
		if res := allow(t, lim, "flood"); !res.Allowed {
			t.Fatalf("Allow(flood) = %+v, want allowed", res)
		}
	}
	first := allow(t, lim, "flood")
	if first.Allowed || first.Cached || first.RetryAfter <= 0 {
		t.Fatalf("4th Allow(flood) = %+v, want denied by Redis with a RetryAfter", first)
	}
	before := calls.load()
	if before < 4 {
		t.Fatalf("the counter saw %d scripts for 4 decisions: it cannot see the limiter's calls", before)
	}

	const flood, goroutines = 10_000, 16
	var wg sync.WaitGroup
	var bad atomic.Value
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := first.RetryAfter
			for range flood / goroutines {
				res, err := lim.Allow(t.Context(), "flood")
				switch {
				case err != nil:
					bad.CompareAndSwap(nil, err)
				case res.Allowed || !res.Cached || res.Remaining != 0 || res.Limit != first.Limit || len(res.Statuses) != 2:
					bad.CompareAndSwap(nil, errors.New("want a cached denial of 0 remaining under 3/1m, got "+resultString(res)))
				case res.RetryAfter <= 0 || res.RetryAfter > last:
					bad.CompareAndSwap(nil, errors.New("RetryAfter must count down from the denial's, got "+resultString(res)))
				case res.Statuses[0].RetryAfter > first.Statuses[0].RetryAfter || res.Statuses[1].Remaining != 97:
					bad.CompareAndSwap(nil, errors.New("statuses must be the denial's, counted down, got "+resultString(res)))
				default:
					last = res.RetryAfter
				}
			}
		}()
	}
	wg.Wait()
	if err := bad.Load(); err != nil {
		t.Fatal(err)
	}
	if n := calls.load() - before; n != 0 {
		t.Errorf("a flood of %d calls within the RetryAfter sent %d scripts to Redis, want 0", flood, n)
	}
	if got := cached.Load(); got != flood {
		t.Errorf("observer saw %d cached results, want %d", got, flood)
	}
}

// TestDenyCacheOneCallPerRetryAfter floods an identity of 1 per 50 ms for
// a while from one goroutine: after a denial by Redis with RetryAfter r, no
// call may reach Redis until r has passed.
func TestDenyCacheOneCallPerRetryAfter(t *testing.T) {
	rdb, calls := countingClient(t)
	lim, _ := newLimiter(t, rdb, slidelimit.Per(1, 50*time.Millisecond))
	var admitted, redisDenied, cachedDenied int
	var quietUntil time.Time // the last Redis denial's start plus its RetryAfter
	deadline := time.Now().Add(400 * time.Millisecond)
	for time.Now().Before(deadline) {
		before := calls.load()
		start := time.Now()
		res := allow(t, lim, "knock")
		end := time.Now()
		if calls.load() != before && end.Before(quietUntil) {
			t.Fatalf("a call reached Redis %v before the last denial's RetryAfter passed", quietUntil.Sub(end))
		}
		switch {
		case res.Allowed:
			admitted++
		case res.Cached:
			cachedDenied++
		default:
			redisDenied++
			quietUntil = start.Add(res.RetryAfter)
		}
	}
	t.Logf("%d admitted, %d denied by Redis, %d denied from the cache, %d scripts sent", admitted, redisDenied, cachedDenied, calls.load())
	if got, want := calls.load(), int64(admitted+redisDenied); got != want {
		t.Errorf("scripts sent = %d, want %d (admissions plus Redis denials)", got, want)
	}
	if admitted < 2 || cachedDenied == 0 {
		t.Errorf("want several windows and cached denials, got %d admitted, %d cached", admitted, cachedDenied)
	}
}

// TestDenyCacheExactness checks what the cache may answer: only costs at
// least the denied one, never calls with a caller's request id, and nothing
// after a Refund or Reset through the limiter, or when turned off.
func TestDenyCacheExactness(t *testing.T) {
	ctx := context.Background()
	t.Run("cost", func(t *testing.T) {
		rdb, calls := countingClient(t)
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(5))
		if res, _ := lim.AllowN(ctx, "c", 3); !res.Allowed {
			t.Fatalf("AllowN(3) = %+v, want allowed", res)
		}
		if res, _ := lim.AllowN(ctx, "c", 3); res.Allowed || res.Cached {
			t.Fatalf("AllowN(3) = %+v, want denied by Redis", res)
		}
		if res, _ := lim.AllowN(ctx, "c", 4); res.Allowed || !res.Cached {
			t.Fatalf("AllowN(4) after AllowN(3) was denied = %+v, want a cached denial", res)
		}
		before := calls.load()
		if res, _ := lim.AllowN(ctx, "c", 2); !res.Allowed || res.Cached {
			t.Fatalf("AllowN(2) after AllowN(3) was denied = %+v, want admitted by Redis", res)
		}
		if res, _ := lim.Peek(ctx, "c"); res.Allowed || res.Cached {
			t.Fatalf("Peek = %+v, want denied by Redis", res)
		}
		if res, _ := lim.Allow(ctx, "c"); res.Allowed || !res.Cached {
			t.Fatalf("Allow after Peek was denied = %+v, want a cached denial", res)
		}
		if n := calls.load() - before; n != 2 {
			t.Errorf("scripts sent = %d, want 2", n)
		}
	})
	t.Run("request id", func(t *testing.T) {
		rdb, _ := countingClient(t)
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1))
		retry := slidelimit.ContextWithRequestID(ctx, "order-7")
		if res, _ := lim.Allow(retry, "i"); !res.Allowed {
			t.Fatalf("Allow(order-7) = %+v, want allowed", res)
		}
		if res, _ := lim.Allow(ctx, "i"); res.Allowed || res.Cached {
			t.Fatalf("Allow = %+v, want denied by Redis", res)
		}
		if res, _ := lim.Allow(retry, "i"); !res.Allowed || res.Cached {
			t.Fatalf("retried Allow(order-7) = %+v, want Redis to admit it again, as it was", res)
		}
	})
	t.Run("refund and reset", func(t *testing.T) {
		rdb, _ := countingClient(t)
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1))
		admitted := allow(t, lim, "r")
		if res := allow(t, lim, "r"); res.Allowed || res.Cached {
			t.Fatalf("Allow = %+v, want denied by Redis", res)
		}
		if err := lim.Refund(ctx, admitted); err != nil {
			t.Fatal(err)
		}
		if res := allow(t, lim, "r"); !res.Allowed {
			t.Fatalf("Allow after Refund = %+v, want admitted", res)
		}
		if res := allow(t, lim, "r"); res.Allowed || res.Cached {
			t.Fatalf("Allow = %+v, want denied by Redis", res)
		}
		if err := lim.Reset(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		if res := allow(t, lim, "r"); !res.Allowed {
			t.Fatalf("Allow after Reset = %+v, want admitted", res)
		}
	})
	t.Run("off", func(t *testing.T) {
		rdb, calls := countingClient(t)
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithDenyCache(0))
		for range 5 {
			if res := allow(t, lim, "o"); res.Cached {
				t.Fatalf("Allow with WithDenyCache(0) = %+v, want no cached result", res)
			}
		}
		if n := calls.load(); n != 5 {
			t.Errorf("scripts sent = %d, want 5", n)
		}
	})
	t.Run("clock", func(t *testing.T) {
		rdb, _ := countingClient(t)
		var mu sync.Mutex
		now := time.Now()
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithClock(clock))
		allow(t, lim, "k")
		if res := allow(t, lim, "k"); res.Allowed || res.Cached || res.RetryAfter != time.Minute {
			t.Fatalf("Allow = %+v, want denied by Redis for a minute", res)
		}
		mu.Lock()
		now = now.Add(59 * time.Second)
		mu.Unlock()
		if res := allow(t, lim, "k"); res.Allowed || !res.Cached || res.RetryAfter != time.Second {
			t.Fatalf("Allow 59 s later on the limiter's clock = %+v, want a cached denial for 1s", res)
		}
		mu.Lock()
		now = now.Add(time.Second)
		mu.Unlock()
		if res := allow(t, lim, "k"); !res.Allowed {
			t.Fatalf("Allow a minute later on the limiter's clock = %+v, want admitted", res)
		}
	})
}

func TestWithDenyCacheRejectsNegative(t *testing.T) {
	_, err := slidelimit.New(redistest.Client(t), slidelimit.PerMinute(1), slidelimit.WithDenyCache(-1))
	if !errors.Is(err, slidelimit.ErrInvalidOption) {
		t.Errorf("New(WithDenyCache(-1)) error = %v, want ErrInvalidOption", err)
	}
}

// resultString formats the fields of a Result the cache tests check.
func resultString(r slidelimit.Result) string {
	return fmt.Sprintf("Allowed=%v Cached=%v Remaining=%d RetryAfter=%v Statuses=%+v", r.Allowed, r.Cached, r.Remaining, r.RetryAfter, r.Statuses)
}

// TestDenyCacheLeavesInFlightDenialsToRedis: a denial by an in-flight
// limit is not remembered, so the request after a release is admitted at
// once rather than denied by the cache until the lease would have ended.
func TestDenyCacheLeavesInFlightDenialsToRedis(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.InFlight(1, time.Minute)) // the default deny cache
	ctx := t.Context()
	held := allow(t, lim, "w")
	if res := allow(t, lim, "w"); res.Allowed || res.Cached {
		t.Fatalf("a second request in flight = %+v, want denied by Redis", res)
	}
	if res := allow(t, lim, "w"); res.Allowed || res.Cached {
		t.Fatalf("a third request in flight = %+v, want denied by Redis, not the cache", res)
	}
	if err := lim.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	if res := allow(t, lim, "w"); !res.Allowed {
		t.Errorf("a request after the release = %+v, want admitted", res)
	}
}

// TestARefundClearsTheRefundingLimitersDenial: limiter b is denied and
// remembers it; a refund through b of a request limiter a admitted gives a
// unit back, so b's next call asks Redis and is admitted, not denied from
// b's cache until the denial's RetryAfter (a minute).
func TestARefundClearsTheRefundingLimitersDenial(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	newLim := func() *slidelimit.Limiter {
		lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1), slidelimit.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return lim
	}
	a, b := newLim(), newLim()
	res, err := a.Allow(ctx, "k")
	if err != nil || !res.Allowed {
		t.Fatalf("a.Allow = %+v, %v; want admitted", res, err)
	}
	if res, err := b.Allow(ctx, "k"); err != nil || res.Allowed {
		t.Fatalf("b.Allow = %+v, %v; want denied", res, err)
	}
	if err := b.Refund(ctx, res); err != nil {
		t.Fatalf("b.Refund: %v", err)
	}
	if res, err := b.Allow(ctx, "k"); err != nil || !res.Allowed || res.Cached {
		t.Errorf("b.Allow after b refunded a's admission = allowed %v, cached %v, %v; want admitted by Redis", res.Allowed, res.Cached, err)
	}
}
