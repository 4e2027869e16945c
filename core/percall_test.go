package slidelimit_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// allowLimits calls AllowLimits and fails the test on an error.
func allowLimits(t *testing.T, lim *slidelimit.Limiter, identity string, n int, limits ...slidelimit.Limit) slidelimit.Result {
	t.Helper()
	res, err := lim.AllowLimits(t.Context(), identity, n, limits...)
	if err != nil {
		t.Fatalf("AllowLimits(%q, %d, %v) error = %v", identity, n, limits, err)
	}
	return res
}

// logSize returns the units identity's exact log holds (see keyUnits).
func logSize(t *testing.T, rdb redis.Cmdable, prefix, identity string) int64 {
	t.Helper()
	key, err := slidelimit.Key(prefix, identity, slidelimit.Limit{})
	if err != nil {
		t.Fatal(err)
	}
	return keyUnits(t, rdb, key)
}

// keyUnits returns the units the exact log key holds.
func keyUnits(t *testing.T, rdb redis.Cmdable, key string) int64 {
	t.Helper()
	return redistest.ExactLogUnits(t, rdb, key)
}

// TestAllowLimitsPerCall decides calls of one identity under plans given
// per call: each plan counts every unit the others admitted, the Statuses
// follow the call's limits, and a refund takes back what its call added.
func TestAllowLimitsPerCall(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, prefix := newLimiter(t, rdb, slidelimit.PerMinute(1000))
		free, pro := slidelimit.PerMinute(3).Named("free"), slidelimit.PerMinute(10).Named("pro")
		burst := slidelimit.Per(6, 30*time.Second)
		for i := 1; i <= 3; i++ {
			if res := allowLimits(t, lim, "tenant", 1, free); !res.Allowed || res.Remaining != 3-i || res.Limit != free {
				t.Fatalf("AllowLimits(free) #%d = %+v, want allowed by free with %d left", i, res, 3-i)
			}
		}
		if res := allowLimits(t, lim, "tenant", 1, free); res.Allowed || res.RetryAfter <= 0 {
			t.Fatalf("AllowLimits(free) #4 = %+v, want denied with a RetryAfter", res)
		}
		// The same tenant on the pro plan: its 3 units count.
		res := allowLimits(t, lim, "tenant", 2, pro, burst)
		if !res.Allowed || len(res.Statuses) != 2 || res.Statuses[0].Limit != pro || res.Statuses[0].Remaining != 5 ||
			res.Statuses[1].Limit != burst || res.Statuses[1].Remaining != 1 || res.Limit != burst {
			t.Fatalf("AllowLimits(pro, burst) = %+v, want allowed, pro with 5 left, burst with 1 left and deciding", res)
		}
		if n := logSize(t, rdb, prefix, "tenant"); n != 5 {
			t.Errorf("log holds %d members, want 5: a request is recorded once, whatever its limits", n)
		}
		// The limiter's own limit counts them too.
		if res := allow(t, lim, "tenant"); !res.Allowed || res.Remaining != 994 {
			t.Errorf("Allow under the limiter's own limit = %+v, want allowed with 994 left", res)
		}
		if err := lim.Refund(t.Context(), res); err != nil {
			t.Fatal(err)
		}
		if n := logSize(t, rdb, prefix, "tenant"); n != 4 {
			t.Errorf("log holds %d members after refunding a cost-2 request, want 4", n)
		}
		if res, err := lim.PeekLimits(t.Context(), "tenant", free); err != nil || res.Allowed || res.Limit != free {
			t.Errorf("PeekLimits(free) = %+v, %v; want denied by free: 4 units are in its window", res, err)
		}
		if res, err := lim.PeekLimits(t.Context(), "tenant", pro); err != nil || !res.Allowed || res.Remaining != 6 {
			t.Errorf("PeekLimits(pro) = %+v, %v; want allowed with 6 left", res, err)
		}
	})
}

// TestAllowLimitsRejectsBadInput checks that limits given per call are
// validated at the call, as at construction, and that nothing is recorded.
func TestAllowLimitsRejectsBadInput(t *testing.T) {
	rdb := redistest.Client(t)
	lim, prefix := newLimiter(t, rdb, slidelimit.PerMinute(10))
	ctx := t.Context()
	for _, limits := range [][]slidelimit.Limit{
		{{}},
		{slidelimit.Per(0, time.Minute)},
		{slidelimit.Per(5, time.Microsecond)},
		{slidelimit.PerMinute(5), slidelimit.PerMinute(5)},
		{slidelimit.PerMinute(5).Named("a b")},
	} {
		res, err := lim.AllowLimits(ctx, "k", 1, limits...)
		if !errors.Is(err, slidelimit.ErrInvalidLimit) || res.Allowed || res.Fallback {
			t.Errorf("AllowLimits(%v) = %+v, %v; want not allowed, ErrInvalidLimit", limits, res, err)
		}
		if res, err := lim.PeekLimits(ctx, "k", limits...); !errors.Is(err, slidelimit.ErrInvalidLimit) || res.Allowed {
			t.Errorf("PeekLimits(%v) = %+v, %v; want not allowed, ErrInvalidLimit", limits, res, err)
		}
	}
	res, err := lim.AllowLimits(ctx, "k", 4, slidelimit.PerMinute(50), slidelimit.PerSecond(3))
	if !errors.Is(err, slidelimit.ErrInvalidCost) || res.Allowed {
		t.Errorf("AllowLimits(cost 4 under 3/s) = %+v, %v; want ErrInvalidCost", res, err)
	}
	if n := logSize(t, rdb, prefix, "k"); n != 0 {
		t.Errorf("log holds %d members after invalid calls, want 0", n)
	}
	// No limits: the limiter's own.
	if res := allowLimits(t, lim, "k", 1); !res.Allowed || res.Remaining != 9 || res.Limit != slidelimit.PerMinute(10) {
		t.Errorf("AllowLimits with no limits = %+v, want the limiter's own 10/1m with 9 left", res)
	}
}

// TestLimitChangesKeepTheCount changes an identity's limit between calls,
// as a plan change or a new deployment would: the new limit counts what
// was admitted under the old one.
func TestLimitChangesKeepTheCount(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, prefix := newLimiter(t, rdb, slidelimit.PerMinute(10))
		t.Run("lowered", func(t *testing.T) {
			const window = 1500 * time.Millisecond
			var res slidelimit.Result
			for range 4 { // 900 units, in four requests
				res = allowLimits(t, lim, "low", 225, slidelimit.Per(1000, window))
			}
			if !res.Allowed || res.Remaining != 100 {
				t.Fatalf("AllowLimits(225 of 1000) a fourth time = %+v, want allowed with 100 left", res)
			}
			lower := slidelimit.Per(100, window)
			res = allowLimits(t, lim, "low", 1, lower)
			if res.Allowed || res.Remaining != 0 || res.RetryAfter <= 0 || res.RetryAfter > window {
				t.Fatalf("AllowLimits(1 under 100) with 900 used = %+v, want denied until the 900 leave", res)
			}
			key, _ := slidelimit.Key(prefix, "low", lower)
			newest := func() time.Duration {
				m, err := rdb.ZRangeWithScores(t.Context(), key, -1, -1).Result()
				if err != nil || len(m) != 1 {
					t.Fatalf("ZRANGE %s -1 -1 = %v, %v", key, m, err)
				}
				return time.Duration(m[0].Score) * time.Microsecond
			}
			admitted900 := newest()
			deadline := time.Now().Add(10 * time.Second)
			for !allowLimits(t, lim, "low", 1, lower).Allowed {
				if time.Now().After(deadline) {
					t.Fatalf("still denied 10s after a %v window", window)
				}
				time.Sleep(20 * time.Millisecond)
			}
			// The admission came a whole window after the 900, by the
			// scores Redis gave them.
			if gap := newest() - admitted900; gap < window {
				t.Fatalf("admitted %v after the 900 under a %v window, want at least the window", gap, window)
			}
		})
		t.Run("raised", func(t *testing.T) {
			small := slidelimit.PerMinute(100)
			if res := allowLimits(t, lim, "high", 100, small); !res.Allowed || res.Remaining != 0 {
				t.Fatalf("AllowLimits(100 of 100) = %+v, want allowed", res)
			}
			if res := allowLimits(t, lim, "high", 1, small); res.Allowed {
				t.Fatalf("AllowLimits(101st of 100) = %+v, want denied", res)
			}
			if res := allowLimits(t, lim, "high", 1, slidelimit.PerMinute(1000)); !res.Allowed || res.Remaining != 899 {
				t.Fatalf("AllowLimits(1 under 1000) with 100 used = %+v, want allowed with 899 left", res)
			}
		})
		t.Run("window lengthened", func(t *testing.T) {
			if res := allowLimits(t, lim, "long", 5, slidelimit.PerSecond(5)); !res.Allowed {
				t.Fatalf("AllowLimits(5 of 5/s) = %+v, want allowed", res)
			}
			res := allowLimits(t, lim, "long", 1, slidelimit.PerMinute(5))
			if res.Allowed || res.RetryAfter < 50*time.Second || res.RetryAfter > time.Minute {
				t.Fatalf("AllowLimits(1 under 5/1m) with 5 admitted under 5/s = %+v, want denied for about a minute", res)
			}
		})
		t.Run("window shortened", func(t *testing.T) {
			if res := allowLimits(t, lim, "short", 5, slidelimit.PerMinute(5)); !res.Allowed {
				t.Fatalf("AllowLimits(5 of 5/1m) = %+v, want allowed", res)
			}
			short := slidelimit.Per(5, 200*time.Millisecond)
			res := allowLimits(t, lim, "short", 1, short)
			if res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > 200*time.Millisecond {
				t.Fatalf("AllowLimits(1 under 5/200ms) = %+v, want denied until the 5 leave 200ms", res)
			}
			time.Sleep(res.RetryAfter)
			res = allowLimits(t, lim, "short", 1, short)
			if !res.Allowed || res.Remaining != 4 {
				t.Fatalf("AllowLimits(1 under 5/200ms) after its RetryAfter = %+v, want allowed with 4 left", res)
			}
			// The minute-long limit still counts all six: the short
			// caller evicted nothing the longer one counts.
			if res := allowLimits(t, lim, "short", 1, slidelimit.PerMinute(6)); res.Allowed {
				t.Fatalf("AllowLimits(1 under 6/1m) with 6 admitted = %+v, want denied", res)
			}
		})
	})
}

// TestShortWindowKeepsLongHistory has a caller with a short window admit
// after another caller's long-window requests left that short window: the
// log keeps the long window's history (the retention record), so the long
// limit still counts its own requests and the short caller's.
func TestShortWindowKeepsLongHistory(t *testing.T) {
	// 1s is also a window whose digits in µs (1000000) start with the
	// short window's (100000): the record of one is not the other's.
	for _, long := range []slidelimit.Limit{slidelimit.PerMinute(6), slidelimit.Per(6, time.Second)} {
		t.Run(long.Window.String(), func(t *testing.T) {
			clients(t, func(t *testing.T, rdb redis.UniversalClient) {
				lim, prefix := newLimiter(t, rdb, slidelimit.PerMinute(10))
				short := slidelimit.Per(3, 100*time.Millisecond)
				if res := allowLimits(t, lim, "mix", 5, long); !res.Allowed {
					t.Fatalf("AllowLimits(5 under %v) = %+v, want allowed", long, res)
				}
				start := redisNow(t, rdb)
				for redisNow(t, rdb).Sub(start) < 150*time.Millisecond {
					time.Sleep(10 * time.Millisecond)
				}
				if res := allowLimits(t, lim, "mix", 1, short); !res.Allowed || res.Remaining != 2 {
					t.Fatalf("AllowLimits(1 under 3/100ms) 150ms later = %+v, want allowed with 2 left", res)
				}
				if n := logSize(t, rdb, prefix, "mix"); n != 6 {
					t.Errorf("log holds %d members, want 6: the short caller must not evict the long window's history", n)
				}
				if res := allowLimits(t, lim, "mix", 1, long); res.Allowed || res.Remaining != 0 {
					t.Errorf("AllowLimits(1 under %v) = %+v, want denied: 6 units are in its window", long, res)
				}
			})
		})
	}
}
