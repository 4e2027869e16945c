package slidelimit_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// fakeClock is a clock a test moves by hand, for WithClock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// newClock returns a fake clock at the start of a step of step µs, as
// Redis would store it: whole microseconds.
func newClock(step time.Duration) *fakeClock {
	now := time.Now().Truncate(time.Microsecond)
	if step > 0 {
		now = now.Truncate(step)
	}
	return &fakeClock{now: now}
}

func TestLimitResolution(t *testing.T) {
	tests := []struct {
		limit slidelimit.Limit
		want  time.Duration
	}{
		{slidelimit.PerMinute(100), 0},
		{slidelimit.PerDay(slidelimit.MaxExactQuota), 0},
		{slidelimit.PerDay(slidelimit.MaxExactQuota + 1), time.Minute},
		{slidelimit.PerDay(100_000), time.Minute},
		{slidelimit.PerHour(100_000), 2500 * time.Millisecond},
		{slidelimit.PerSecond(5000), slidelimit.MinStep},
		{slidelimit.PerMinute(10).Stepped(time.Second), time.Second},
	}
	for _, tt := range tests {
		if got := tt.limit.Resolution(); got != tt.want {
			t.Errorf("%v.Resolution() = %v, want %v", tt.limit, got, tt.want)
		}
	}
	for _, bad := range []slidelimit.Limit{
		slidelimit.PerMinute(10).Stepped(-time.Second),
		slidelimit.PerMinute(10).Stepped(time.Microsecond),
		slidelimit.PerMinute(10).Stepped(2 * time.Minute),
		slidelimit.PerDay(10).Stepped(time.Second),
	} {
		if err := bad.Validate(); !errors.Is(err, slidelimit.ErrInvalidLimit) {
			t.Errorf("%+v.Validate() = %v, want ErrInvalidLimit", bad, err)
		}
	}
}

// TestSteppedLimit runs a stepped limit through admissions, a denial whose
// RetryAfter ends at a step's edge, a retried call, a refund and a cost-N
// request that takes one bucket.
func TestSteppedLimit(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		const step = time.Second
		limit := slidelimit.Per(10, 10*time.Second).Stepped(step)
		clock := newClock(step)
		lim, prefix := newLimiter(t, rdb, limit, slidelimit.WithClock(clock.Now), slidelimit.WithDenyCache(0))
		ctx := t.Context()
		clock.Add(300 * time.Millisecond)
		res := allowN(ctx, t, lim, "s", 4)
		if !res.Allowed || res.Remaining != 6 || res.ResetAfter != 10*time.Second+700*time.Millisecond {
			t.Fatalf("AllowN(4) = %+v, want allowed, 6 left, reset at the end of its step + the window", res)
		}
		key, _ := slidelimit.Key(prefix, "s", limit)
		if total, buckets := steppedLog(t, rdb, key); total != 4 || buckets != 1 {
			t.Errorf("stepped log %s holds %d units in %d buckets, want 4 in 1: a cost-4 request takes one bucket", key, total, buckets)
		}
		clock.Add(2 * time.Second)
		idCtx := slidelimit.ContextWithRequestID(ctx, "req-1")
		for i := range 2 {
			res, err := lim.AllowN(idCtx, "s", 6)
			if err != nil || !res.Allowed || res.Remaining != 0 {
				t.Fatalf("attempt %d of a retried cost-6 request = %+v, %v, want allowed with 0 left", i+1, res, err)
			}
		}
		if total, _ := steppedLog(t, rdb, key); total != 10 {
			t.Fatalf("total = %d, want 10: a retried call counts once", total)
		}
		clock.Add(time.Second)
		res = allowN(ctx, t, lim, "s", 1)
		// The first bucket (4 units, step 0) leaves at 1s + 10s after its
		// start; now is 3.3s after it.
		if res.Allowed || res.RetryAfter != 11*time.Second-3300*time.Millisecond {
			t.Fatalf("AllowN(1) on a full window = %+v, want denied for 7.7s", res)
		}
		clock.Add(res.RetryAfter - time.Microsecond)
		if res := allowN(ctx, t, lim, "s", 1); res.Allowed {
			t.Fatalf("AllowN(1) a µs before RetryAfter = %+v, want denied", res)
		}
		clock.Add(time.Microsecond)
		ok := allowN(ctx, t, lim, "s", 4)
		if !ok.Allowed || ok.Remaining != 0 {
			t.Fatalf("AllowN(4) at RetryAfter = %+v, want allowed with 0 left", ok)
		}
		if err := lim.Refund(ctx, ok); err != nil {
			t.Fatal(err)
		}
		if err := lim.Refund(ctx, ok); err != nil {
			t.Fatal(err)
		}
		if res := allowN(ctx, t, lim, "s", 4); !res.Allowed || res.Remaining != 0 {
			t.Fatalf("AllowN(4) after a refund (made twice) = %+v, want allowed with 0 left", res)
		}
		if res := allowN(ctx, t, lim, "s", 1); res.Allowed {
			t.Fatalf("AllowN(1) = %+v, want denied: a second refund must take nothing", res)
		}
	})
}

// TestSteppedAndExactAreAtomic decides calls under an exact limit and a
// stepped one together: a denial by either records in neither.
func TestSteppedAndExactAreAtomic(t *testing.T) {
	rdb := redistest.Client(t)
	exact, stepped := slidelimit.Per(3, time.Minute), slidelimit.PerHour(5000)
	lim, prefix := newLimiter(t, rdb, exact, slidelimit.WithLimits(stepped), slidelimit.WithDenyCache(0))
	ctx := t.Context()
	for i := range 3 {
		if res := allowN(ctx, t, lim, "m", 1); !res.Allowed {
			t.Fatalf("Allow #%d = %+v, want allowed", i+1, res)
		}
	}
	if res := allowN(ctx, t, lim, "m", 1); res.Allowed || res.Limit != exact {
		t.Fatalf("Allow #4 = %+v, want denied by %v", res, exact)
	}
	key, _ := slidelimit.Key(prefix, "m", stepped)
	if total, _ := steppedLog(t, rdb, key); total != 3 {
		t.Errorf("stepped total = %d, want 3: a denied request records nothing", total)
	}
	if n := logSize(t, rdb, prefix, "m"); n != 3 {
		t.Errorf("exact log holds %d, want 3", n)
	}
	if err := lim.Reset(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key, key+":ids").Val(); n != 0 {
		t.Errorf("stepped log or its ids exist after Reset")
	}
}

// steppedLog decodes a stepped log (see internal/script/stepped.lua): the
// total its header holds, and how many of its buckets o..n count units:
// the ring's counts of o..n-1 that are not 0, and the newest bucket's,
// which the header holds.
func steppedLog(t *testing.T, rdb redis.Cmdable, key string) (total int64, buckets int) {
	t.Helper()
	raw, err := rdb.Get(t.Context(), key).Bytes()
	// A header of 56 bytes, padded to 60, then 1,444 6-byte counts.
	const ring = 60
	if err != nil || len(raw) != ring+6*1444 {
		t.Fatalf("GET %s = %d bytes, %v; want %d bytes of header, then 1,444 6-byte counts", key, len(raw), err, ring)
	}
	double := func(i int) int64 { return int64(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:]))) }
	o, n, total := double(0), double(1), double(2)
	sum := double(6) // p, the newest bucket's count
	if sum > 0 {
		buckets++
	}
	for b := o; b < n && total > 0; b++ { // the ring's buckets: o..n-1
		at := ring + 6*(b%1444)
		if c := int64(binary.BigEndian.Uint16(raw[at:]))<<32 | int64(binary.BigEndian.Uint32(raw[at+2:])); c > 0 {
			buckets++
			sum += c
		}
	}
	if sum != total {
		t.Fatalf("stepped log %s: header total %d, counts summing to %d", key, total, sum)
	}
	return total, buckets
}

func allowN(ctx context.Context, t *testing.T, lim *slidelimit.Limiter, identity string, n int) slidelimit.Result {
	t.Helper()
	res, err := lim.AllowN(ctx, identity, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d) error = %v", identity, n, err)
	}
	return res
}

// TestSteppedModelCheck drives a stepped limit with random arrivals and
// costs on a fake clock and checks each decision against in-memory models
// of the same history:
//   - never more than the quota in any window of the limit's length;
//   - each decision and RetryAfter are those of whole-step buckets;
//   - the time a denied request must wait exceeds an exact log's wait on
//     the same history by at most one step.
func TestSteppedModelCheck(t *testing.T) {
	rdb := redistest.Client(t)
	configs := []struct {
		quota        int
		window, step time.Duration
		maxGap       time.Duration
	}{
		{50, 10 * time.Second, time.Second, 700 * time.Millisecond},
		{40, time.Minute, 7 * time.Second, 4 * time.Second},
		{2000, time.Hour, 0, 5 * time.Second}, // the default: Window/1440
	}
	for _, cfg := range configs {
		limit := slidelimit.Per(cfg.quota, cfg.window).Stepped(cfg.step)
		step := limit.Resolution()
		t.Run(limit.String(), func(t *testing.T) {
			clock := newClock(0)
			lim, _ := newLimiter(t, rdb, limit, slidelimit.WithClock(clock.Now), slidelimit.WithDenyCache(0))
			start := clock.Now()
			rng := rand.New(rand.NewPCG(uint64(cfg.quota), 7))
			var hist []time.Duration // admitted units' times since start, in order
			maxCost := max(1, min(cfg.quota/8, 9))
			if cfg.quota > 1000 {
				maxCost = cfg.quota / 20
			}
			denials, worst := 0, time.Duration(0)
			for i := range 1500 {
				clock.Add(time.Duration(rng.Int64N(int64(cfg.maxGap))).Truncate(time.Microsecond))
				now := clock.Now().Sub(start)
				abs := clock.Now().UnixMicro()
				cost := 1 + rng.IntN(maxCost)
				res := allowN(t.Context(), t, lim, "model", cost)

				// The bucket model: units of step b count until
				// (b+1)·step + window.
				inBuckets, exactIn := 0, 0
				var exactTimes, bucketEnds []int64
				for _, u := range hist {
					uAbs := start.UnixMicro() + u.Microseconds()
					end := (uAbs/step.Microseconds()+1)*step.Microseconds() + cfg.window.Microseconds()
					if end > abs {
						inBuckets++
						bucketEnds = append(bucketEnds, end)
					}
					if uAbs > abs-cfg.window.Microseconds() {
						exactIn++
						exactTimes = append(exactTimes, uAbs+cfg.window.Microseconds())
					}
				}
				wantAllowed := inBuckets+cost <= cfg.quota
				if res.Allowed != wantAllowed {
					t.Fatalf("call %d at %v, cost %d: Allowed = %v, want %v (%d units in the counted steps, quota %d)",
						i, now, cost, res.Allowed, wantAllowed, inBuckets, cfg.quota)
				}
				if res.Allowed {
					for range cost {
						hist = append(hist, now)
					}
					// Never more than the quota in the window ending now.
					n := 0
					for _, u := range hist {
						if u > now-cfg.window {
							n++
						}
					}
					if n > cfg.quota {
						t.Fatalf("call %d at %v: %d units in the window ending now, quota %d", i, now, n, cfg.quota)
					}
					continue
				}
				denials++
				sort.Slice(bucketEnds, func(a, b int) bool { return bucketEnds[a] < bucketEnds[b] })
				k := inBuckets + cost - cfg.quota
				wantRetry := time.Duration(bucketEnds[k-1]-abs) * time.Microsecond
				if res.RetryAfter != wantRetry {
					t.Fatalf("call %d at %v, cost %d: RetryAfter = %v, want %v (the %d-th oldest counted step leaving)", i, now, cost, res.RetryAfter, wantRetry, k)
				}
				exactWait := time.Duration(0)
				if ke := exactIn + cost - cfg.quota; ke > 0 {
					sort.Slice(exactTimes, func(a, b int) bool { return exactTimes[a] < exactTimes[b] })
					exactWait = time.Duration(exactTimes[ke-1]-abs) * time.Microsecond
				}
				if extra := res.RetryAfter - exactWait; extra > step {
					t.Fatalf("call %d at %v: stepped wait %v, exact log's %v: %v longer, more than a step %v", i, now, res.RetryAfter, exactWait, extra, step)
				} else if extra > worst {
					worst = extra
				}
			}
			if denials == 0 || len(hist) == 0 {
				t.Fatalf("%d denials and %d admitted units: the run tested nothing", denials, len(hist))
			}
			t.Logf("%d units admitted, %d denials, longest added wait %v (step %v)", len(hist), denials, worst, step)
		})
	}
}

// TestSteppedLimitChanges changes a stepped limit between calls: a lower
// or higher quota and a shorter or longer window at the same step count
// what was admitted, and a short window's caller does not evict what a
// longer one counts.
func TestSteppedLimitChanges(t *testing.T) {
	rdb := redistest.Client(t)
	const step = time.Second
	clock := newClock(step)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(10), slidelimit.WithClock(clock.Now), slidelimit.WithDenyCache(0))
	per := func(q int, w time.Duration) slidelimit.Limit { return slidelimit.Per(q, w).Stepped(step) }

	// Lowered: 900 of 1,000 used, moved to 100.
	if res := allowLimits(t, lim, "low", 900, per(1000, time.Minute)); !res.Allowed {
		t.Fatalf("AllowLimits(900 of 1000) = %+v, want allowed", res)
	}
	res := allowLimits(t, lim, "low", 1, per(100, time.Minute))
	if res.Allowed || res.RetryAfter != time.Minute+step {
		t.Fatalf("AllowLimits(1 under 100) with 900 used = %+v, want denied until their step leaves, a minute and a step", res)
	}
	// Across MaxExactQuota, plans given one step keep the count: 900 of
	// 2,000 per day used, moved to 500 per day.
	day := func(q int) slidelimit.Limit { return slidelimit.PerDay(q).Stepped(time.Minute) }
	if res := allowLimits(t, lim, "plan", 900, day(2000)); !res.Allowed {
		t.Fatalf("AllowLimits(900 of 2000/day) = %+v, want allowed", res)
	}
	if res := allowLimits(t, lim, "plan", 1, day(500)); res.Allowed || res.Remaining != 0 {
		t.Fatalf("AllowLimits(1 under 500/day) with 900 used = %+v, want denied", res)
	}
	// Raised: 100 of 100 used, moved to 1,000.
	allowLimits(t, lim, "high", 100, per(100, time.Minute))
	if res := allowLimits(t, lim, "high", 1, per(1000, time.Minute)); !res.Allowed || res.Remaining != 899 {
		t.Fatalf("AllowLimits(1 under 1000) with 100 used = %+v, want allowed with 899 left", res)
	}
	// Shortened, then lengthened back: 5 units at 0s, 3 more at 5s.
	allowLimits(t, lim, "len", 5, per(10, time.Minute))
	clock.Add(5 * time.Second)
	allowLimits(t, lim, "len", 3, per(10, time.Minute))
	clock.Add(2 * time.Second)
	short := per(5, 3*time.Second)
	if res := allowLimits(t, lim, "len", 2, short); !res.Allowed || res.Remaining != 0 {
		t.Fatalf("AllowLimits(2 under 5/3s) = %+v, want allowed with 0 left: only the 3 of 5s are in its window", res)
	}
	if res := allowLimits(t, lim, "len", 1, short); res.Allowed || res.RetryAfter != 2*time.Second {
		t.Fatalf("AllowLimits(1 under 5/3s) = %+v, want denied until the step of 5s leaves, in 2s", res)
	}
	if res := allowLimits(t, lim, "len", 1, per(10, time.Minute)); res.Allowed || res.RetryAfter != time.Minute+step-7*time.Second {
		t.Fatalf("AllowLimits(1 under 10/1m) = %+v, want denied: all 10 units count, until the first step leaves", res)
	}
}
