package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// durableServer starts a private Redis that keeps its data across Stop and
// Restart (an append-only file synced on every write, in a directory of
// the test's): a Redis restarted by an outage, its windows intact.
// loggedLimiter returns a limiter of limit on rdb under a fresh prefix,
// with a timeout of 200 ms unless opts give another, logging to the
// records it returns, and the prefix.
func loggedLimiter(t *testing.T, rdb *redis.Client, limit slidelimit.Limit, opts ...slidelimit.Option) (*slidelimit.Limiter, string, *records) {
	t.Helper()
	prefix := redistest.Prefix(t)
	log := new(records)
	opts = append([]slidelimit.Option{slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(200 * time.Millisecond), slidelimit.WithLogger(slog.New(log))}, opts...)
	lim, err := slidelimit.New(rdb, limit, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return lim, prefix, log
}

func durableServer(t *testing.T) (*redistest.Server, *redis.Client) {
	t.Helper()
	srv := redistest.StartServer(t, "--appendonly", "yes", "--appendfsync", "always", "--dir", t.TempDir())
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return srv, rdb
}

// settledReport returns the counts of the last report of kept settlements
// log holds, and whether it holds one.
func settledReport(log *records) (landed, expired, dropped int64, ok bool) {
	msgs, args := log.taken()
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i] == "INFO slidelimit: the settlements Redis could not take are settled" {
			landed, _ = args[i]["landed"].(int64)
			expired, _ = args[i]["left_their_windows"].(int64)
			dropped, _ = args[i]["dropped"].(int64)
			return landed, expired, dropped, true
		}
	}
	return 0, 0, 0, false
}

// flush calls FlushSettlements with a deadline of 10 s, and fails t if it
// does not return nil.
func flush(t *testing.T, lim *slidelimit.Limiter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := lim.FlushSettlements(ctx); err != nil {
		t.Fatalf("FlushSettlements with Redis back = %v, want nil", err)
	}
}

// TestASettleThatFailsWhileRedisIsDownLandsWhenItIsBack: a Settle made
// while Redis is stopped fails with ErrUnavailable, and lands once Redis is
// back, by itself in the background or at once by FlushSettlements; it is
// counted once.
func TestASettleThatFailsWhileRedisIsDownLandsWhenItIsBack(t *testing.T) {
	for _, flushed := range []bool{false, true} {
		t.Run(fmt.Sprintf("flushed=%v", flushed), func(t *testing.T) {
			srv, rdb := durableServer(t)
			limit := slidelimit.PerMinute(100)
			lim, prefix, log := loggedLimiter(t, rdb, limit)
			key, _ := slidelimit.Key(prefix, "a", limit)
			res, err := lim.AllowN(t.Context(), "a", 10)
			if err != nil || !res.Allowed {
				t.Fatalf("AllowN(a, 10) = %v, %v; want admitted", res.Allowed, err)
			}
			srv.Stop()
			if err := lim.Settle(t.Context(), res, 3); !errors.Is(err, slidelimit.ErrUnavailable) {
				t.Fatalf("Settle(3) with Redis down = %v, want ErrUnavailable", err)
			}
			srv.Restart()
			if flushed {
				flush(t, lim)
			}
			deadline := time.Now().Add(10 * time.Second)
			for redistest.ExactLogUnits(t, rdb, key) != 3 {
				if time.Now().After(deadline) {
					t.Fatalf("the exact log holds %d units 10 s after Redis came back, want the settled 3", redistest.ExactLogUnits(t, rdb, key))
				}
				time.Sleep(10 * time.Millisecond)
			}
			flush(t, lim)
			if landed, expired, dropped, ok := settledReport(log); !ok || landed != 1 || expired != 0 || dropped != 0 {
				t.Errorf("report = %d landed, %d left their windows, %d dropped (logged %v), want 1, 0, 0", landed, expired, dropped, ok)
			}
		})
	}
}

// TestAReleaseThatFailsFreesItsPlaceAfterTheOutage: a Release made while
// Redis is stopped frees the place once Redis is back, long before the
// lease would have ended.
func TestAReleaseThatFailsFreesItsPlaceAfterTheOutage(t *testing.T) {
	srv, rdb := durableServer(t)
	lim, err := slidelimit.New(rdb, slidelimit.InFlight(1, time.Hour), slidelimit.WithPrefix(redistest.Prefix(t)),
		slidelimit.WithTimeout(200*time.Millisecond), slidelimit.WithFailurePolicy(slidelimit.FailClosed), slidelimit.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	res, err := lim.Allow(t.Context(), "a")
	if err != nil || !res.Allowed {
		t.Fatalf("Allow(a) = %v, %v; want admitted", res.Allowed, err)
	}
	srv.Stop()
	if err := lim.Release(t.Context(), res); !errors.Is(err, slidelimit.ErrUnavailable) {
		t.Fatalf("Release with Redis down = %v, want ErrUnavailable", err)
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := lim.Peek(t.Context(), "a")
		if err == nil && res.Remaining == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Peek(a) 10 s after Redis came back = %+v, %v; want the place freed (Remaining 1)", res, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestANewerSettlementSupersedesAKeptOne: of two settles of one request,
// the older is never the one that lands last: a newer one made during the
// outage replaces it, and a newer one that lands carries it.
func TestANewerSettlementSupersedesAKeptOne(t *testing.T) {
	srv, rdb := durableServer(t)
	limit := slidelimit.PerMinute(100)
	lim, prefix, log := loggedLimiter(t, rdb, limit)
	ctx := t.Context()
	key, _ := slidelimit.Key(prefix, "a", limit)
	first, _ := lim.AllowN(ctx, "a", 10)
	second, _ := lim.AllowN(ctx, "a", 10)
	if !first.Allowed || !second.Allowed {
		t.Fatal("AllowN(a, 10) twice: want both admitted")
	}
	srv.Stop()
	// first: settled to 5, then to 2, both during the outage.
	for _, n := range []int{5, 2} {
		if err := lim.Settle(ctx, first, n); !errors.Is(err, slidelimit.ErrUnavailable) {
			t.Fatalf("Settle(first, %d) with Redis down = %v, want ErrUnavailable", n, err)
		}
	}
	// second: settled to 8 during the outage, released after it (a
	// Release names no cost: it carries the kept 8).
	if err := lim.Settle(ctx, second, 8); !errors.Is(err, slidelimit.ErrUnavailable) {
		t.Fatalf("Settle(second, 8) with Redis down = %v, want ErrUnavailable", err)
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for lim.Release(ctx, second) != nil {
		if time.Now().After(deadline) {
			t.Fatal("Release(second) still fails 10 s after Redis came back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	flush(t, lim)
	if got := redistest.ExactLogUnits(t, rdb, key); got != 2+8 {
		t.Errorf("the exact log holds %d units, want 10: the first at its newer settle (2), the second at its kept one (8)", got)
	}
	if landed, _, _, ok := settledReport(log); !ok || landed != 2 {
		t.Errorf("report = %d landed (logged %v), want 2: one kept settlement per request", landed, ok)
	}
}

// TestAKeptSettlementIsDroppedOnceItsRequestLeftItsWindows: a settlement
// still kept when its request has left every window it counts in is not
// run, and is counted so.
func TestAKeptSettlementIsDroppedOnceItsRequestLeftItsWindows(t *testing.T) {
	srv, rdb := durableServer(t)
	var clock struct {
		sync.Mutex
		offset time.Duration
	}
	now := func() time.Time {
		clock.Lock()
		defer clock.Unlock()
		return time.Now().Add(clock.offset)
	}
	lim, _, log := loggedLimiter(t, rdb, slidelimit.PerSecond(10), slidelimit.WithClock(now))
	res, _ := lim.AllowN(t.Context(), "a", 4)
	srv.Stop()
	if err := lim.Refund(t.Context(), res); !errors.Is(err, slidelimit.ErrUnavailable) {
		t.Fatalf("Refund with Redis down = %v, want ErrUnavailable", err)
	}
	clock.Lock()
	clock.offset = 2 * time.Second // past the window of a second
	clock.Unlock()
	srv.Restart()
	flush(t, lim)
	if landed, expired, dropped, ok := settledReport(log); !ok || landed != 0 || expired != 1 || dropped != 0 {
		t.Errorf("report = %d landed, %d left their windows, %d dropped (logged %v), want 0, 1, 0", landed, expired, dropped, ok)
	}
}

// TestAtMostMaxReplaysAreKept: a limiter keeps at most 10,000 settlements;
// one more is dropped and counted, and the rest land.
func TestAtMostMaxReplaysAreKept(t *testing.T) {
	const kept = 10_000
	srv, rdb := durableServer(t)
	limit := slidelimit.PerHour(1000)
	lim, prefix, log := loggedLimiter(t, rdb, limit, slidelimit.WithTimeout(time.Second))
	ctx := t.Context()
	who := func(i int) string { return fmt.Sprintf("id%d", i%20) }
	results := make([]slidelimit.Result, kept+1)
	for i := range results {
		res, err := lim.Allow(ctx, who(i))
		if err != nil || !res.Allowed {
			t.Fatalf("Allow(%s) = %v, %v; want admitted", who(i), res.Allowed, err)
		}
		results[i] = res
	}
	srv.Stop()
	for i, res := range results {
		if err := lim.Refund(ctx, res); !errors.Is(err, slidelimit.ErrUnavailable) {
			t.Fatalf("Refund %d with Redis down = %v, want ErrUnavailable", i, err)
		}
	}
	srv.Restart()
	flush(t, lim)
	if landed, expired, dropped, ok := settledReport(log); !ok || landed != kept || expired != 0 || dropped != 1 {
		t.Errorf("report = %d landed, %d left their windows, %d dropped (logged %v), want %d, 0, 1", landed, expired, dropped, ok, kept)
	}
	// The dropped refund is the last one made: its request still counts.
	var units int64
	for i := range 20 {
		key, _ := slidelimit.Key(prefix, who(i), limit)
		units += redistest.ExactLogUnits(t, rdb, key)
	}
	if units != 1 {
		t.Errorf("the exact logs hold %d units after the refunds landed, want 1 (the dropped one's)", units)
	}
}

// TestFlushSettlementsGivesUpWithItsContext: while Redis stays down,
// FlushSettlements returns when its context ends, with an error wrapping
// ErrUnavailable and the context's.
func TestFlushSettlementsGivesUpWithItsContext(t *testing.T) {
	srv, rdb := durableServer(t)
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(100), slidelimit.WithPrefix(redistest.Prefix(t)),
		slidelimit.WithTimeout(100*time.Millisecond), slidelimit.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.FlushSettlements(t.Context()); err != nil {
		t.Fatalf("FlushSettlements with nothing kept = %v, want nil", err)
	}
	res, _ := lim.AllowN(t.Context(), "a", 3)
	srv.Stop()
	if err := lim.Refund(t.Context(), res); !errors.Is(err, slidelimit.ErrUnavailable) {
		t.Fatalf("Refund with Redis down = %v, want ErrUnavailable", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err = lim.FlushSettlements(ctx)
	if !errors.Is(err, slidelimit.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("FlushSettlements with Redis down = %v, want an error wrapping ErrUnavailable and DeadlineExceeded", err)
	}
	srv.Restart()
	flush(t, lim)
}
