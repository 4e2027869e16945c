package slidelimit_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// TestInFlightDenialsSayWhenAPlaceFrees: eight holders of InFlight(8,
// 2*time.Minute) each hold their place for 80 to 120 % of a hold time h
// and give it back, and a new request takes it; a request denied at a
// random moment between releases is told a RetryAfter near the time until
// a place actually frees, not the two minutes of a lease: over 200
// denials, their median ratio and the ratio of their sums are within 2×.
// (One denial alone cannot be: the time until the next release from a
// random moment runs from 0 to the time between releases.)
func TestInFlightDenialsSayWhenAPlaceFrees(t *testing.T) {
	rdb := redistest.Client(t)
	for _, h := range []time.Duration{100 * time.Millisecond, time.Second, 8 * time.Second} {
		t.Run(h.String(), func(t *testing.T) {
			clock := newClock(0)
			lim, _ := newLimiter(t, rdb, slidelimit.InFlight(8, 2*time.Minute), slidelimit.WithClock(clock.Now), slidelimit.WithDenyCache(0))
			ctx := t.Context()
			rng := rand.New(rand.NewPCG(uint64(h), 7))
			type holder struct {
				until time.Time
				res   slidelimit.Result
			}
			hold := func() time.Duration { return time.Duration(float64(h) * (0.8 + 0.4*rng.Float64())) }
			var held []holder
			for i := range 8 { // staggered, as a steady stream would be
				held = append(held, holder{clock.Now().Add(h * time.Duration(i+1) / 8), allowNOK(t, lim, "k", 1)})
			}
			var ratios []float64
			var sumR, sumA time.Duration
			for i := range 216 { // the first 16 releases teach it the holds
				warm := i >= 16
				slices.SortFunc(held, func(a, b holder) int { return a.until.Compare(b.until) })
				next := held[0].until.Sub(clock.Now())
				// A denied request somewhere before the next release.
				probe := time.Duration(rng.Float64() * float64(next))
				clock.Add(probe)
				res, err := lim.Allow(ctx, "k")
				if err != nil || res.Allowed {
					t.Fatalf("Allow with 8 held = %+v, %v; want denied", res, err)
				}
				actual := next - probe
				if warm && res.RetryAfter > time.Minute {
					t.Errorf("RetryAfter = %v, a place freed %v later: the lease's end, not when a place is expected to free", res.RetryAfter, actual)
				}
				if warm && actual > 0 {
					ratios = append(ratios, float64(res.RetryAfter)/float64(actual))
					sumR, sumA = sumR+res.RetryAfter, sumA+actual
				}
				clock.Add(actual)
				if err := lim.Release(ctx, held[0].res); err != nil {
					t.Fatal(err)
				}
				held[0] = holder{clock.Now().Add(hold()), allowNOK(t, lim, "k", 1)}
			}
			slices.Sort(ratios)
			median, overall := ratios[len(ratios)/2], float64(sumR)/float64(sumA)
			t.Logf("hold %v: RetryAfter ÷ the time until a place freed, over %d denials: median %.2f (10th percentile %.2f, 90th %.2f), sums %.2f (mean RetryAfter %v, mean time until a place freed %v)",
				h, len(ratios), median, ratios[len(ratios)/10], ratios[len(ratios)*9/10], overall, sumR/time.Duration(len(ratios)), sumA/time.Duration(len(ratios)))
			if median < 0.5 || median > 2 || overall < 0.5 || overall > 2 {
				t.Errorf("hold %v: RetryAfter ÷ the time until a place freed: median %.2f, sums %.2f; want both within 0.5..2", h, median, overall)
			}
		})
	}
}

// TestAnUnreadableHoldEstimateNeverFailsADecision: an in-flight log whose
// estimate of a hold is not one the script wrote still decides, and a
// release starts the estimate over.
func TestAnUnreadableHoldEstimateNeverFailsADecision(t *testing.T) {
	rdb := redistest.Client(t)
	limit := slidelimit.InFlight(1, time.Minute)
	lim, prefix := newLimiter(t, rdb, limit, slidelimit.WithDenyCache(0))
	ctx := t.Context()
	held := allowNOK(t, lim, "k", 1)
	key, err := slidelimit.Key(prefix, "k", limit)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, key, redis.Z{Score: -1, Member: "#hgarbage"}).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := lim.Allow(ctx, "k")
	if err != nil || res.Allowed || res.RetryAfter <= 50*time.Second {
		t.Fatalf("Allow beside an unreadable estimate = %+v, %v; want denied until the lease's end", res, err)
	}
	if err := lim.Release(ctx, held); err != nil {
		t.Fatalf("Release beside an unreadable estimate = %v", err)
	}
	allowNOK(t, lim, "k", 1)
}
