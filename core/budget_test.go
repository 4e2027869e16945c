package slidelimit_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// allowN is AllowN that fails the test on an error.
func allowNOK(t *testing.T, lim *slidelimit.Limiter, identity string, n int) slidelimit.Result {
	t.Helper()
	res, err := lim.AllowN(t.Context(), identity, n)
	if err != nil {
		t.Fatalf("AllowN(%q, %d) = %v", identity, n, err)
	}
	return res
}

// peekRemaining returns what Peek says is left under each limit.
func peekRemaining(t *testing.T, lim *slidelimit.Limiter, identity string) []int {
	t.Helper()
	res, err := lim.Peek(t.Context(), identity)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, s := range res.Statuses {
		out = append(out, s.Remaining)
	}
	return out
}

// TestSettleCorrectsTheEstimate reserves estimates and settles actual
// costs: fewer units give the rest back, more record the excess, which
// stands over the quota until it leaves; a second settle to the same cost
// changes nothing; exact and stepped limits alike.
func TestSettleCorrectsTheEstimate(t *testing.T) {
	for _, limit := range []slidelimit.Limit{slidelimit.PerMinute(100), slidelimit.PerMinute(100).Stepped(time.Second)} {
		t.Run(limit.String()+"/"+limit.Resolution().String(), func(t *testing.T) {
			clients(t, func(t *testing.T, rdb redis.UniversalClient) {
				lim, _ := newLimiter(t, rdb, limit)
				ctx := t.Context()
				a := allowNOK(t, lim, "llm", 60)
				if err := lim.Settle(ctx, a, 20); err != nil {
					t.Fatal(err)
				}
				if got := peekRemaining(t, lim, "llm"); got[0] != 80 {
					t.Fatalf("after settling 60 to 20, Remaining = %d, want 80", got[0])
				}
				if err := lim.Settle(ctx, a, 20); err != nil { // retried
					t.Fatal(err)
				}
				if got := peekRemaining(t, lim, "llm"); got[0] != 80 {
					t.Fatalf("after settling to 20 twice, Remaining = %d, want 80", got[0])
				}
				b := allowNOK(t, lim, "llm", 50)
				if err := lim.Settle(ctx, b, 70); err != nil {
					t.Fatal(err)
				}
				if got := peekRemaining(t, lim, "llm"); got[0] != 10 {
					t.Fatalf("after settling 50 up to 70, Remaining = %d, want 10", got[0])
				}
				if err := lim.Refund(ctx, b); err != nil {
					t.Fatal(err)
				}
				if got := peekRemaining(t, lim, "llm"); got[0] != 80 {
					t.Fatalf("after refunding the second request, Remaining = %d, want 80", got[0])
				}
				c := allowNOK(t, lim, "llm", 50)
				if err := lim.Settle(ctx, c, 130); err != nil {
					t.Fatal(err)
				}
				// 20 + 130 = 150 in a window of 100: denied, with a retry
				// for when the excess leaves.
				res, err := lim.AllowN(ctx, "llm", 1)
				if err != nil || res.Allowed || res.Remaining != 0 || res.RetryAfter <= 0 {
					t.Fatalf("a window 50 over its quota = %+v, %v; want denied with a RetryAfter", res, err)
				}
				if err := lim.Settle(ctx, a, -1); !errors.Is(err, slidelimit.ErrInvalidCost) {
					t.Errorf("Settle(-1) = %v, want ErrInvalidCost", err)
				}
			})
		})
	}
}

// TestInFlightHoldsPlaces: an in-flight limit admits as many requests as
// it has places; a release frees one; a lease that ends frees one by
// itself; Renew keeps a place, and tells when a lease ended already.
func TestInFlightHoldsPlaces(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.InFlight(2, time.Minute), slidelimit.WithDenyCache(0))
		ctx := t.Context()
		a, b := allow(t, lim, "w"), allow(t, lim, "w")
		if !a.Allowed || !b.Allowed {
			t.Fatalf("two requests under 2 in flight = %v, %v; want both admitted", a.Allowed, b.Allowed)
		}
		if res := allow(t, lim, "w"); res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > time.Minute {
			t.Fatalf("a third = %+v, want denied until a lease ends at the latest", res)
		}
		if err := lim.Release(ctx, a); err != nil {
			t.Fatal(err)
		}
		c := allow(t, lim, "w")
		if !c.Allowed {
			t.Fatalf("a request after a release = %+v, want admitted", c)
		}
		if err := lim.Renew(ctx, b); err != nil {
			t.Errorf("Renew(a held place) = %v, want nil", err)
		}
		if err := lim.Release(ctx, a); err != nil { // twice
			t.Fatal(err)
		}
		if res := allow(t, lim, "w"); res.Allowed {
			t.Fatalf("a request with 2 of 2 held = %+v, want denied: a second release frees nothing", res)
		}

		short, _ := newLimiter(t, rdb, slidelimit.InFlight(1, 50*time.Millisecond), slidelimit.WithDenyCache(0))
		held := allow(t, short, "s")
		if !held.Allowed {
			t.Fatal("the first request under 1 in flight was denied")
		}
		deadline := time.Now().Add(10 * time.Second)
		for !allow(t, short, "s").Allowed {
			if time.Now().After(deadline) {
				t.Fatal("a lease of 50 ms still held its place after 10 s")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := short.Renew(ctx, held); !errors.Is(err, slidelimit.ErrLeaseEnded) {
			t.Errorf("Renew of a lease that ended = %v, want ErrLeaseEnded", err)
		}
	})
}

// TestInFlightAndRatesDecideTogether: requests per minute, tokens per
// minute and requests in flight in one decision, all or nothing: a denial
// by any takes nothing from the others.
func TestInFlightAndRatesDecideTogether(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		rpm, tpm, inflight := slidelimit.PerMinute(10).Named("rpm").ForRequests(), slidelimit.PerMinute(5000).Named("tpm"),
			slidelimit.InFlight(1, time.Minute).Named("inflight")
		lim, _ := newLimiter(t, rdb, rpm, slidelimit.WithLimits(tpm, inflight), slidelimit.WithDenyCache(0))
		ctx := t.Context()
		first := allowNOK(t, lim, "k", 1000)
		if !first.Allowed {
			t.Fatalf("the first request = %+v, want admitted", first)
		}
		second := allowNOK(t, lim, "k", 1000)
		if second.Allowed || second.Limit != inflight {
			t.Fatalf("a second in flight = %+v, want denied by %v", second, inflight)
		}
		if got := peekRemaining(t, lim, "k"); got[0] != 9 || got[1] != 4000 {
			t.Fatalf("after a denial by the in-flight limit, Remaining = %v, want 9 and 4000: it took nothing", got)
		}
		if err := lim.Settle(ctx, first, 300); err != nil {
			t.Fatal(err)
		}
		if got := peekRemaining(t, lim, "k"); got[0] != 9 || got[1] != 4700 || got[2] != 1 {
			t.Fatalf("after settling to 300 with the release, Remaining = %v, want 9, 4700 and 1", got)
		}
	})
}

// TestAShadowLimitChangesNothingButItsReport: a plan with a shadow limit
// gives the same decisions and header fields as the plan without it, and
// the observer hears of the shadow's would-be denials.
func TestAShadowLimitChangesNothingButItsReport(t *testing.T) {
	rdb := redistest.Client(t)
	enforced := slidelimit.PerMinute(5).Named("enforced")
	shadow := slidelimit.PerMinute(2).Named("tighter").Shadowed()
	var denied []string
	with, _ := newLimiter(t, rdb, enforced, slidelimit.WithLimits(shadow), slidelimit.WithDenyCache(0),
		slidelimit.WithObserver(func(_ context.Context, o slidelimit.Observation) {
			for _, l := range o.ShadowDenied() {
				denied = append(denied, l.String())
			}
		}))
	without, _ := newLimiter(t, rdb, enforced, slidelimit.WithDenyCache(0))
	for i := range 7 {
		a, b := allow(t, with, "s"), allow(t, without, "s")
		ha, hb := http.Header{}, http.Header{}
		slidelimit.Headers{}.SetHeader(a, ha)
		slidelimit.Headers{}.SetHeader(b, hb)
		if a.Allowed != b.Allowed || a.Remaining != b.Remaining || a.Limit != b.Limit {
			t.Fatalf("request %d: with a shadow limit %+v, without %+v; want the same decision", i, a, b)
		}
		for _, f := range []string{slidelimit.FieldRateLimitPolicy, slidelimit.FieldRateLimit, slidelimit.FieldRetryAfter, slidelimit.FieldXRateLimitRemaining} {
			if ha.Get(f) != hb.Get(f) {
				t.Fatalf("request %d: %s = %q with a shadow limit, %q without", i, f, ha.Get(f), hb.Get(f))
			}
		}
	}
	// The shadow of 2 would have denied requests 3 to 5; 6 and 7 the
	// enforced limit denied, whatever the shadow says, and they count as
	// no shadow denial.
	if len(denied) != 3 {
		t.Errorf("the observer heard of %d shadow denials (%v), want 3: requests 3 to 5", len(denied), denied)
	}
}

// TestATreeDecidesAllOrNothing: three levels of a tenant in one decision;
// a denial at any level takes nothing at the others, each level's count
// is exact, and a refund gives back at every level.
func TestATreeDecidesAllOrNothing(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1000), slidelimit.WithDenyCache(0))
		ctx := t.Context()
		tree := func(key string) []slidelimit.Level {
			return []slidelimit.Level{
				{Limits: []slidelimit.Limit{slidelimit.PerMinute(10).Named("org")}},
				{Identity: "team:a", Limits: []slidelimit.Limit{slidelimit.PerMinute(6).Named("team")}},
				{Identity: key, Limits: []slidelimit.Limit{slidelimit.PerMinute(4).Named("key")}},
			}
		}
		var last slidelimit.Result
		for i := range 5 {
			res, err := lim.AllowTree(ctx, "org:acme", 1, tree("key:1")...)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed != (i < 4) {
				t.Fatalf("request %d of key 1 = %+v, want admitted %v", i, res, i < 4)
			}
			if i == 4 && (res.Limit.Name != "key" || res.Statuses[2].Level != "key:1") {
				t.Fatalf("the fifth request of key 1 = %+v, want denied by the key's level", res)
			}
			if i == 0 {
				last = res
			}
		}
		for i := range 3 {
			res, err := lim.AllowTree(ctx, "org:acme", 1, tree("key:2")...)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed != (i < 2) {
				t.Fatalf("request %d of key 2 = %+v, want admitted %v (the team holds 6)", i, res, i < 2)
			}
		}
		// The tenant's own count: 6 of the org's 10, shared with its plain calls.
		res, err := lim.PeekLimits(ctx, "org:acme", slidelimit.PerMinute(10).Named("org"))
		if err != nil || res.Remaining != 4 {
			t.Fatalf("the org's own log after 6 admissions = %+v, %v; want 4 left", res, err)
		}
		if err := lim.Refund(ctx, last); err != nil {
			t.Fatal(err)
		}
		res, err = lim.AllowTree(ctx, "org:acme", 1, tree("key:2")...)
		if err != nil || !res.Allowed {
			t.Fatalf("after a refund at every level, a request of key 2 = %+v, %v; want admitted", res, err)
		}
		if _, err := lim.AllowTree(ctx, "org:acme", 1); !errors.Is(err, slidelimit.ErrInvalidLimit) {
			t.Errorf("AllowTree with no level = %v, want ErrInvalidLimit", err)
		}
	})
}

// TestExactLogsTakeAnyCostAsOneMember: an exact limit takes any cost its
// quota allows, each request one member of its log whatever its cost, at
// every level of a tree; a settle of any correction is one call and ends
// exact.
func TestExactLogsTakeAnyCostAsOneMember(t *testing.T) {
	rdb := redistest.Client(t)
	lim, prefix := newLimiter(t, rdb, slidelimit.PerMinute(1000), slidelimit.WithDenyCache(0))
	ctx := t.Context()
	big := allowNOK(t, lim, "big", 900)
	if got := peekRemaining(t, lim, "big"); got[0] != 100 {
		t.Fatalf("after AllowN(900) under 1000/min, Remaining = %d, want 100", got[0])
	}
	key, err := slidelimit.Key(prefix, "big", slidelimit.PerMinute(1000))
	if err != nil {
		t.Fatal(err)
	}
	if n := rdb.ZCard(ctx, key).Val(); n != 3 {
		t.Errorf("ZCARD of the exact log after one request of 900 = %d, want 3 (its record, the request and its cost)", n)
	}
	if res, err := lim.AllowN(ctx, "big", 101); err != nil || res.Allowed {
		t.Errorf("AllowN(101) with 100 left = %+v, %v; want denied", res, err)
	}
	if err := lim.Settle(ctx, big, 1000); err != nil {
		t.Fatal(err)
	}
	if got := peekRemaining(t, lim, "big"); got[0] != 0 {
		t.Errorf("after settling 900 to 1000, Remaining = %d, want 0", got[0])
	}
	if _, err := lim.AllowN(ctx, "e", 1001); !errors.Is(err, slidelimit.ErrInvalidCost) {
		t.Errorf("AllowN(1001) under 1000/min = %v, want ErrInvalidCost", err)
	}
	two := []slidelimit.Level{
		{Limits: []slidelimit.Limit{slidelimit.PerMinute(1000).Named("org")}},
		{Identity: "team", Limits: []slidelimit.Limit{slidelimit.PerMinute(1000).Named("team")}},
	}
	if res, err := lim.AllowTree(ctx, "t", 600, two...); err != nil || !res.Allowed {
		t.Errorf("AllowTree of two exact levels, cost 600 = %+v, %v; want admitted", res, err)
	}
	if res, err := lim.AllowTree(ctx, "t", 401, two...); err != nil || res.Allowed {
		t.Errorf("AllowTree of cost 401 with 400 left at both levels = %+v, %v; want denied", res, err)
	}
	res := allowNOK(t, lim, "e", 1)
	if err := lim.Settle(ctx, res, 700); err != nil {
		t.Fatal(err)
	}
	if got := peekRemaining(t, lim, "e"); got[0] != 300 {
		t.Fatalf("after settling 1 to 700, Remaining = %d, want 300", got[0])
	}
	if err := lim.Settle(ctx, res, 2); err != nil {
		t.Fatal(err)
	}
	if got := peekRemaining(t, lim, "e"); got[0] != 998 {
		t.Fatalf("after settling 700 back to 2, Remaining = %d, want 998", got[0])
	}
}

// TestAShadowLimitBelowTheCost: a shadow limit whose quota is below a
// request's cost would deny it whatever its window holds; the request is
// decided by the enforced limit alone, and the shadow reported as a
// would-be denial with a RetryAfter of its window (before the fix, the
// script read the log from the wrong end and failed the call).
func TestAShadowLimitBelowTheCost(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		shadow := slidelimit.PerMinute(2).Named("tighter").Shadowed()
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(100), slidelimit.WithLimits(shadow), slidelimit.WithDenyCache(0))
		for i := range 3 {
			res, err := lim.AllowN(t.Context(), "s", 5)
			if err != nil || !res.Allowed {
				t.Fatalf("AllowN(5) #%d under 100/min and a shadow of 2/min = %+v, %v; want admitted", i+1, res, err)
			}
			for _, st := range res.Statuses {
				if st.Limit.Name == "tighter" && st.RetryAfter != time.Minute {
					t.Errorf("AllowN(5) #%d: the shadow's RetryAfter = %v, want its window", i+1, st.RetryAfter)
				}
			}
		}
	})
}

// lostReplies is a go-redis hook that runs each script call it is armed
// for and then loses its reply, as a connection cut after Redis answered
// does: the command ran, the caller hears an error.
type lostReplies struct{ armed atomic.Int32 }

func (h *lostReplies) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && err == nil && h.armed.Add(-1) >= 0 {
			cmd.SetErr(errors.New("test: reply lost"))
			return cmd.Err()
		}
		return err
	}
}

func (h *lostReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestSettleLandsOnItsCostAfterALostReply: a Settle whose script ran but
// whose reply was lost leaves the request at either its old cost or the
// target; each later Settle lands on the cost it names, exact and stepped
// alike (issue 46).
func TestSettleLandsOnItsCostAfterALostReply(t *testing.T) {
	for _, limit := range []slidelimit.Limit{slidelimit.PerMinute(250), slidelimit.PerMinute(250).Stepped(time.Second)} {
		t.Run(limit.String()+"/"+limit.Resolution().String(), func(t *testing.T) {
			clients(t, func(t *testing.T, rdb redis.UniversalClient) {
				hook := &lostReplies{}
				hook.armed.Store(-1)
				rdb.AddHook(hook)
				lim, _ := newLimiter(t, rdb, limit, slidelimit.WithDenyCache(0))
				ctx := t.Context()
				a := allowNOK(t, lim, "lost", 200)
				hook.armed.Store(1)
				if err := lim.Settle(ctx, a, 50); !errors.Is(err, slidelimit.ErrUnavailable) {
					t.Fatalf("Settle(to 50) with its reply lost = %v, want ErrUnavailable", err)
				}
				if got := peekRemaining(t, lim, "lost"); got[0] != 200 {
					t.Fatalf("after the settle to 50 ran, Remaining = %d, want 200", got[0])
				}
				for _, to := range []int{150, 120, 10, 180, 180} {
					if err := lim.Settle(ctx, a, to); err != nil {
						t.Fatalf("Settle(to %d) = %v", to, err)
					}
					if got := peekRemaining(t, lim, "lost"); got[0] != 250-to {
						t.Fatalf("after Settle(to %d), Remaining = %d, want %d", to, got[0], 250-to)
					}
				}
				// A lost reply on the way up, then down past where it began.
				hook.armed.Store(1)
				if err := lim.Settle(ctx, a, 240); !errors.Is(err, slidelimit.ErrUnavailable) {
					t.Fatalf("Settle(to 240) with its reply lost = %v, want ErrUnavailable", err)
				}
				for _, to := range []int{100, 200} {
					if err := lim.Settle(ctx, a, to); err != nil {
						t.Fatalf("Settle(to %d) = %v", to, err)
					}
					if got := peekRemaining(t, lim, "lost"); got[0] != 250-to {
						t.Fatalf("after a lost settle to 240, Settle(to %d) left Remaining = %d, want %d", to, got[0], 250-to)
					}
				}
			})
		})
	}
}

// TestAShadowLeaseHoldsNoEnforcedPlace: a request's place in flight lasts
// the lease of its enforced in-flight limit, whatever the lease of a
// shadow one beside it: InFlight(1, 1s) with InFlight(10, 3s).Shadowed()
// frees a dead holder's place after 1 s, as InFlight(1, 1s) alone does
// (issue 46: it took 3 s), and Renew renews for the enforced lease.
func TestAShadowLeaseHoldsNoEnforcedPlace(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := newClock(0)
		advance := clock.Add
		enforced := slidelimit.InFlight(1, time.Second)
		shadow := slidelimit.InFlight(10, 3*time.Second).Shadowed().Named("rollout")
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(100), slidelimit.WithLimits(enforced, shadow),
			slidelimit.WithClock(clock.Now), slidelimit.WithDenyCache(0))
		ctx := t.Context()
		holder := allowNOK(t, lim, "dead", 1)
		if res, err := lim.Allow(ctx, "dead"); err != nil || res.Allowed || res.RetryAfter > time.Second {
			t.Fatalf("Allow while the place is held = %+v, %v; want a denial with RetryAfter at most the 1s lease", res, err)
		}
		advance(time.Second - time.Microsecond)
		if res, err := lim.Allow(ctx, "dead"); err != nil || res.Allowed {
			t.Fatalf("Allow 1µs before the lease ends = %+v, %v; want a denial", res, err)
		}
		advance(time.Microsecond)
		second := allowNOK(t, lim, "dead", 1) // the holder's 1 s lease has ended
		if err := lim.Renew(ctx, holder); !errors.Is(err, slidelimit.ErrLeaseEnded) {
			t.Fatalf("Renew of the ended holder = %v, want ErrLeaseEnded", err)
		}
		if err := lim.Renew(ctx, second); err != nil {
			t.Fatalf("Renew of the new holder = %v", err)
		}
		advance(time.Second - time.Microsecond)
		if res, err := lim.Allow(ctx, "dead"); err != nil || res.Allowed {
			t.Fatalf("Allow 1µs before the renewed lease ends = %+v, %v; want a denial", res, err)
		}
		advance(time.Microsecond)
		allowNOK(t, lim, "dead", 1)
	})
}

// TestShiftThroughARetrysResultMovesEveryUnit: a request settled to more
// units, then retried with its id (whose Result knows only the cost it was
// called with), is shifted whole: every unit the log holds of it moves,
// not only as many as the retry's cost (found by the model checker).
func TestShiftThroughARetrysResultMovesEveryUnit(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := newClock(0)
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(100), slidelimit.WithClock(clock.Now), slidelimit.WithDenyCache(0))
		ctx := slidelimit.ContextWithRequestID(t.Context(), "shifted")
		first, err := lim.AllowN(ctx, "s", 1)
		if err != nil || !first.Allowed {
			t.Fatalf("AllowN = %+v, %v; want admitted", first, err)
		}
		if err := lim.Settle(t.Context(), first, 4); err != nil {
			t.Fatal(err)
		}
		retry, err := lim.AllowN(ctx, "s", 1)
		if err != nil || !retry.Allowed {
			t.Fatalf("the retry = %+v, %v; want admitted", retry, err)
		}
		if err := lim.Shift(t.Context(), retry, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		// A minute and 5 s on, all 4 units still count, 10 s later.
		clock.Add(time.Minute + 5*time.Second)
		if got := peekRemaining(t, lim, "s"); got[0] != 96 {
			t.Fatalf("65 s after the admission shifted 10 s, Remaining = %d, want 96: every unit moved", got[0])
		}
	})
}

// TestASettleOfAnyCorrectionIsOneScriptCall: settling 20,000 units to
// 5,000 under a stepped limit, and 900 to 1 under an exact one, each take
// one script call and land exactly.
func TestASettleOfAnyCorrectionIsOneScriptCall(t *testing.T) {
	counter := &scriptCounter{}
	rdb := redistest.Client(t)
	rdb.AddHook(counter)
	for _, c := range []struct {
		limit      slidelimit.Limit
		cost, to   int
		wantRemain int
	}{
		{slidelimit.PerMinute(100_000), 20_000, 5_000, 95_000},
		{slidelimit.PerMinute(1000), 900, 1, 999},
	} {
		t.Run(c.limit.String(), func(t *testing.T) {
			lim, _ := newLimiter(t, rdb, c.limit, slidelimit.WithDenyCache(0))
			res := allowNOK(t, lim, "big", c.cost)
			before := counter.n.Load()
			if err := lim.Settle(t.Context(), res, c.to); err != nil {
				t.Fatal(err)
			}
			if n := counter.n.Load() - before; n != 1 {
				t.Errorf("Settle(%d → %d) ran %d script calls, want 1", c.cost, c.to, n)
			}
			if got := peekRemaining(t, lim, "big"); got[0] != c.wantRemain {
				t.Errorf("after Settle(%d → %d), Remaining = %d, want %d", c.cost, c.to, got[0], c.wantRemain)
			}
		})
	}
}

// TestQuotasOfBillionsAdmitAndSettle: a daily budget of 5,000,000,000
// units (a stepped log, counting each step in 48 bits) admits 4,000,000,000
// at once, denies past the quota, and settles exactly both in the newest
// step and in an older one (BITFIELD on the ring).
func TestQuotasOfBillionsAdmitAndSettle(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := newClock(time.Minute)
		lim, _ := newLimiter(t, rdb, slidelimit.PerDay(5_000_000_000), slidelimit.WithClock(clock.Now), slidelimit.WithDenyCache(0))
		ctx := t.Context()
		big := allowNOK(t, lim, "org", 4_000_000_000)
		if got := peekRemaining(t, lim, "org"); got[0] != 1_000_000_000 {
			t.Fatalf("after AllowN(4e9) under 5e9/day, Remaining = %d, want 1e9", got[0])
		}
		if res, err := lim.AllowN(ctx, "org", 1_000_000_001); err != nil || res.Allowed {
			t.Fatalf("AllowN(1e9+1) with 1e9 left = %+v, %v; want denied", res, err)
		}
		if err := lim.Settle(ctx, big, 4_500_000_000); err != nil {
			t.Fatal(err)
		}
		if got := peekRemaining(t, lim, "org"); got[0] != 500_000_000 {
			t.Fatalf("after settling 4e9 to 4.5e9 in its step, Remaining = %d, want 5e8", got[0])
		}
		clock.Add(time.Minute) // a newer step: the first now counts in the ring
		small := allowNOK(t, lim, "org", 300_000_000)
		if err := lim.Settle(ctx, big, 1_000_000_000); err != nil {
			t.Fatal(err)
		}
		if got := peekRemaining(t, lim, "org"); got[0] != 3_700_000_000 {
			t.Fatalf("after settling the older 4.5e9 to 1e9, Remaining = %d, want 3.7e9", got[0])
		}
		if err := lim.Refund(ctx, small); err != nil {
			t.Fatal(err)
		}
		if got := peekRemaining(t, lim, "org"); got[0] != 4_000_000_000 {
			t.Fatalf("after refunding 3e8, Remaining = %d, want 4e9", got[0])
		}
	})
}

// TestASettleReachesBackByTime: a stepped log keeps its requests' ids for
// the shorter of its window and 15 minutes, whatever the identity admits
// meanwhile. An organisation's request settles exactly after 10,000 more
// admissions; a day's budget settles one 14 minutes old; a Settle or
// Refund of one 17 minutes old, whose units still count, is
// ErrPastHorizon, never a silent nil, while its exact limit takes the
// correction.
func TestASettleReachesBackByTime(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(100_000), slidelimit.WithDenyCache(0))
		ctx := t.Context()
		old := allowNOK(t, lim, "org", 10)
		var wg sync.WaitGroup
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 10_000 / 16 {
					if res, err := lim.Allow(ctx, "org"); err != nil || !res.Allowed {
						t.Errorf("Allow = %+v, %v; want admitted", res, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := lim.Settle(ctx, old, 2); err != nil {
			t.Fatalf("Settle after 10,000 admissions = %v, want nil", err)
		}
		if got := peekRemaining(t, lim, "org"); got[0] != 100_000-10_002 {
			t.Fatalf("after it, Remaining = %d, want %d", got[0], 100_000-10_002)
		}
	})
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		clock := newClock(time.Minute)
		lim, _ := newLimiter(t, rdb, slidelimit.PerDay(5_000_000), slidelimit.WithLimits(slidelimit.PerHour(1000).Named("exact")),
			slidelimit.WithClock(clock.Now), slidelimit.WithDenyCache(0))
		ctx := t.Context()
		old := allowNOK(t, lim, "org", 10)
		clock.Add(14 * time.Minute)
		if err := lim.Settle(ctx, old, 20); err != nil {
			t.Fatalf("Settle 14 minutes later = %v, want nil", err)
		}
		clock.Add(3 * time.Minute)
		recent := allowNOK(t, lim, "org", 1) // it sweeps the ids older than the horizon
		err := lim.Settle(ctx, old, 2)
		if !errors.Is(err, slidelimit.ErrPastHorizon) {
			t.Fatalf("Settle 17 minutes later = %v, want ErrPastHorizon", err)
		}
		if got := peekRemaining(t, lim, "org"); got[0] != 5_000_000-21 || got[1] != 1000-3 {
			t.Errorf("after it, Remaining = %v, want the stepped limit at %d (it kept 20) and the exact one at %d (it took 2)", got, 5_000_000-21, 1000-3)
		}
		if err := lim.Refund(ctx, old); !errors.Is(err, slidelimit.ErrPastHorizon) {
			t.Errorf("Refund of it = %v, want ErrPastHorizon", err)
		}
		if err := lim.Refund(ctx, old); err != nil {
			t.Errorf("a second Refund = %v, want nil: it was refunded where it could be", err)
		}
		if err := lim.Settle(ctx, recent, 5); err != nil {
			t.Errorf("Settle of the newest = %v, want nil", err)
		}
	})
}
