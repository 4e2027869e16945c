package slidelimit_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	"github.com/slidelimit/slidelimit/core/redistest"
)

// newLimiter returns a limiter on rdb with a prefix of its own.
func newLimiter(t *testing.T, rdb redis.Scripter, limit slidelimit.Limit, opts ...slidelimit.Option) (*slidelimit.Limiter, string) {
	t.Helper()
	prefix := redistest.Prefix(t)
	opts = append([]slidelimit.Option{slidelimit.WithPrefix(prefix), slidelimit.WithTimeout(5 * time.Second)}, opts...)
	lim, err := slidelimit.New(rdb, limit, opts...)
	if err != nil {
		t.Fatalf("New(%v) = %v", limit, err)
	}
	return lim, prefix
}

// allow calls Allow and fails the test on an error.
func allow(t *testing.T, lim *slidelimit.Limiter, identity string) slidelimit.Result {
	t.Helper()
	res, err := lim.Allow(t.Context(), identity)
	if err != nil {
		t.Fatalf("Allow(%q) error = %v", identity, err)
	}
	return res
}

// redisNow reads Redis's clock, which the limiter uses.
func redisNow(t *testing.T, rdb redis.Cmdable) time.Time {
	t.Helper()
	now, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

// oneAtATime runs f against a standalone Redis, then against Redis
// Cluster, then both again through clients with ContextTimeoutEnabled,
// not in parallel.
func oneAtATime(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) { f(t, redistest.Client(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, redistest.ClusterClient(t)) })
	// A client that gives up at a context's deadline has its round trips
	// made on the goroutine that sends them, without trip.wait's watch.
	t.Run("standalone/ContextTimeoutEnabled", func(t *testing.T) { f(t, timeoutClient(t)) })
	t.Run("cluster/ContextTimeoutEnabled", func(t *testing.T) { f(t, timeoutClusterClient(t)) })
}

// timeoutClient returns a client of the test Redis, like redistest.Client's
// but with ContextTimeoutEnabled.
func timeoutClient(t *testing.T) *redis.Client {
	opts := *redistest.Client(t).Options()
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// timeoutClusterClient returns a client of the test Redis Cluster, like
// redistest.ClusterClient's but with ContextTimeoutEnabled.
func timeoutClusterClient(t *testing.T) *redis.ClusterClient {
	opts := *redistest.ClusterClient(t).Options()
	opts.ContextTimeoutEnabled = true
	rdb := redis.NewClusterClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// clients runs f against a standalone Redis and against Redis Cluster.
func clients(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		f(t, redistest.Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		f(t, redistest.ClusterClient(t))
	})
}

func TestNewRejectsBadInput(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = rdb.Close() })
	tests := []struct {
		name   string
		client redis.Scripter
		limit  slidelimit.Limit
		opts   []slidelimit.Option
		want   error
	}{
		{"nil client", nil, slidelimit.PerMinute(1), nil, slidelimit.ErrInvalidOption},
		{"nil *redis.Client", (*redis.Client)(nil), slidelimit.PerMinute(1), nil, slidelimit.ErrInvalidOption},
		{"nil *redis.ClusterClient", (*redis.ClusterClient)(nil), slidelimit.PerMinute(1), nil, slidelimit.ErrInvalidOption},
		{"nil *redis.Ring", (*redis.Ring)(nil), slidelimit.PerMinute(1), nil, slidelimit.ErrInvalidOption},
		{"zero limit", rdb, slidelimit.Limit{}, nil, slidelimit.ErrInvalidLimit},
		{"negative quota", rdb, slidelimit.PerMinute(-5), nil, slidelimit.ErrInvalidLimit},
		{"oversized quota", rdb, slidelimit.PerMinute(slidelimit.MaxQuota + 1), nil, slidelimit.ErrInvalidLimit},
		{"sub-millisecond window", rdb, slidelimit.Per(1, time.Microsecond), nil, slidelimit.ErrInvalidLimit},
		{"bad extra limit", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithLimits(slidelimit.PerHour(0))}, slidelimit.ErrInvalidLimit},
		{"duplicate limits", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithLimits(slidelimit.PerMinute(1))}, slidelimit.ErrInvalidLimit},
		{"duplicate names", rdb, slidelimit.PerMinute(1).Named("x"), []slidelimit.Option{slidelimit.WithLimits(slidelimit.PerHour(9).Named("x"))}, slidelimit.ErrInvalidLimit},
		{"prefix with brace", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithPrefix("a{")}, slidelimit.ErrInvalidOption},
		{"prefix with space", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithPrefix("a b")}, slidelimit.ErrInvalidOption},
		{"long prefix", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithPrefix(strings.Repeat("p", 65))}, slidelimit.ErrInvalidOption},
		{"negative timeout", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithTimeout(-1)}, slidelimit.ErrInvalidOption},
		{"unknown policy", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithFailurePolicy(7)}, slidelimit.ErrInvalidOption},
		{"nil clock", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithClock(nil)}, slidelimit.ErrInvalidOption},
		{"negative breaker", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithBreaker(-1, time.Second)}, slidelimit.ErrInvalidOption},
		{"breaker without cooldown", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithBreaker(3, 0)}, slidelimit.ErrInvalidOption},
		{"zero replicas", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithReplicas(0)}, slidelimit.ErrInvalidOption},
		{"zero local capacity", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithLocalCapacity(0)}, slidelimit.ErrInvalidOption},
		{"nil observer", rdb, slidelimit.PerMinute(1), []slidelimit.Option{slidelimit.WithObserver(nil)}, slidelimit.ErrInvalidOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim, err := slidelimit.New(tt.client, tt.limit, tt.opts...)
			if !errors.Is(err, tt.want) || lim != nil {
				t.Fatalf("New() = %v, %v, want nil, %v", lim, err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "slidelimit: ") {
				t.Errorf("error %q does not start with the package name", err)
			}
		})
	}
}

func TestAllowAdmitsQuotaThenDenies(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		limit := slidelimit.Per(5, 10*time.Second)
		lim, _ := newLimiter(t, rdb, limit)
		for i := 1; i <= 5; i++ {
			res := allow(t, lim, "client")
			if !res.Allowed || res.Remaining != 5-i || res.RetryAfter != 0 || res.Limit != limit || res.Fallback {
				t.Fatalf("Allow #%d = %+v, want allowed with %d remaining", i, res, 5-i)
			}
			if res.ResetAfter <= 9*time.Second || res.ResetAfter > 10*time.Second {
				t.Errorf("Allow #%d ResetAfter = %v, want just under 10s", i, res.ResetAfter)
			}
		}
		res := allow(t, lim, "client")
		if res.Allowed || res.Remaining != 0 || res.RetryAfter <= 0 || res.RetryAfter > 10*time.Second {
			t.Fatalf("Allow #6 = %+v, want denied with 0 remaining and 0 < RetryAfter <= 10s", res)
		}
		if len(res.Statuses) != 1 || res.Statuses[0].RetryAfter != res.RetryAfter {
			t.Errorf("Allow #6 Statuses = %+v, want one status matching the result", res.Statuses)
		}
	})
}

func TestAllowNCosts(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, prefix := newLimiter(t, rdb, slidelimit.PerMinute(10))
		ctx := t.Context()
		steps := []struct {
			n         int
			allowed   bool
			remaining int
		}{{4, true, 6}, {6, true, 0}, {1, false, 0}}
		for _, s := range steps {
			res, err := lim.AllowN(ctx, "k", s.n)
			if err != nil || res.Allowed != s.allowed || res.Remaining != s.remaining {
				t.Fatalf("AllowN(%d) = %+v, %v, want allowed=%v remaining=%d", s.n, res, err, s.allowed, s.remaining)
			}
		}
		key, _ := slidelimit.Key(prefix, "k", slidelimit.PerMinute(10))
		if n := keyUnits(t, rdb, key); n != 10 {
			t.Errorf("ZCARD = %d, want 10 members for costs 4 and 6", n)
		}
	})
}

func TestAllowRejectsBadInput(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(10), slidelimit.WithLimits(slidelimit.PerSecond(3)))
	ctx := t.Context()
	for _, n := range []int{0, -1, 4, 1 << 40} {
		res, err := lim.AllowN(ctx, "k", n)
		if !errors.Is(err, slidelimit.ErrInvalidCost) || res.Allowed || res.Fallback {
			t.Errorf("AllowN(%d) = %+v, %v, want not allowed, ErrInvalidCost", n, res, err)
		}
	}
	res, err := lim.Allow(ctx, "")
	if !errors.Is(err, slidelimit.ErrInvalidKey) || res.Allowed || res.Fallback {
		t.Errorf("Allow(\"\") = %+v, %v, want not allowed, ErrInvalidKey", res, err)
	}
	if _, err := lim.Peek(ctx, ""); !errors.Is(err, slidelimit.ErrInvalidKey) {
		t.Errorf("Peek(\"\") error = %v, want ErrInvalidKey", err)
	}
	if err := lim.Reset(ctx, ""); !errors.Is(err, slidelimit.ErrInvalidKey) {
		t.Errorf("Reset(\"\") error = %v, want ErrInvalidKey", err)
	}
}

// TestHostileIdentities runs identities that could break a naive key
// scheme through Redis, on Cluster too where a stray brace would move the
// hash slot and fail the script with CROSSSLOT.
func TestHostileIdentities(t *testing.T) {
	hostile := []string{
		"{}", "}", "{", "a}b", "{a}", "}{", "%7B%7D", "#", "a:b:c", "\x00", "\x00\x01\xfe\xff",
		"line\nbreak\r\n", " ", "é✓", strings.Repeat("x", 1<<16), strings.Repeat("{}", 5000),
	}
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(1), slidelimit.WithLimits(slidelimit.PerHour(5)))
		for _, id := range hostile {
			if res := allow(t, lim, id); !res.Allowed {
				t.Errorf("Allow(%.20q) #1 = %+v, want allowed: identities must not share keys", id, res)
			}
		}
		for _, id := range hostile {
			if res := allow(t, lim, id); res.Allowed {
				t.Errorf("Allow(%.20q) #2 = %+v, want denied", id, res)
			}
		}
	})
}

func TestIdentitiesAreIsolated(t *testing.T) {
	rdb := redistest.Client(t)
	lim, _ := newLimiter(t, rdb, slidelimit.PerMinute(2))
	for range 2 {
		allow(t, lim, "alice")
	}
	if res := allow(t, lim, "alice"); res.Allowed {
		t.Fatalf("Allow(alice) #3 = %+v, want denied", res)
	}
	if res := allow(t, lim, "bob"); !res.Allowed || res.Remaining != 1 {
		t.Fatalf("Allow(bob) = %+v, want allowed with 1 remaining", res)
	}
	// A limiter with another limit keeps its own count for the same identity.
	other, err := slidelimit.New(rdb, slidelimit.PerMinute(3), slidelimit.WithPrefix(strings.TrimSuffix(redistest.Prefix(t), ":")+":"))
	if err != nil {
		t.Fatal(err)
	}
	if res := allow(t, other, "alice"); !res.Allowed {
		t.Fatalf("other limit Allow(alice) = %+v, want allowed", res)
	}
}

// TestDeniedRequestsAreNotRecorded floods one identity and checks that the
// set never holds more than the quota, and that after each admission the
// key lives at least the window, so that nothing it counts expires, and at
// most two (the record's span; see allow.lua's retain).
func TestDeniedRequestsAreNotRecorded(t *testing.T) {
	rdb := redistest.Client(t)
	limit := slidelimit.Per(5, 2*time.Second)
	lim, prefix := newLimiter(t, rdb, limit)
	key, _ := slidelimit.Key(prefix, "flood", limit)
	ctx := t.Context()
	admitted := 0
	for i := range 200 {
		before := time.Now()
		res := allow(t, lim, "flood")
		if res.Allowed {
			admitted++
			pttl := rdb.PTTL(ctx, key).Val()
			least := limit.Window - time.Since(before) - time.Millisecond // PTTL rounds down
			if most := 2*limit.Window + 2*time.Millisecond; pttl < least || pttl > most {
				t.Fatalf("after admit #%d PTTL = %v, want in [%v, %v]", admitted, pttl, least, most)
			}
		}
		if n := keyUnits(t, rdb, key); n > 5 {
			t.Fatalf("after call %d ZCARD = %d, want at most 5", i, n)
		}
	}
	if admitted != 5 {
		t.Fatalf("admitted %d of 200, want 5", admitted)
	}
}

func TestIdleKeysExpire(t *testing.T) {
	rdb := redistest.Client(t)
	limit := slidelimit.Per(3, 50*time.Millisecond)
	lim, prefix := newLimiter(t, rdb, limit, slidelimit.WithLimits(slidelimit.Per(10, 80*time.Millisecond)))
	allow(t, lim, "idle")
	k1, _ := slidelimit.Key(prefix, "idle", limit)
	k2, _ := slidelimit.Key(prefix, "idle", slidelimit.Per(10, 80*time.Millisecond))
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Exists(t.Context(), k1, k2).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("keys %q, %q still exist 5s after an 80ms window", k1, k2)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestShortWindowKeepsLongerWindowsExpiry checks that a caller with a
// short window, admitting on an identity whose log a longer window keeps,
// never shortens the log's life below what the longer window counts: the
// longer window's admissions between renewals send no PEXPIRE and rely on
// it. The log must outlive the short caller's window by the long one's,
// and its units admitted later must still count when the short caller's
// admission is a long window old.
func TestShortWindowKeepsLongerWindowsExpiry(t *testing.T) {
	rdb := redistest.Client(t)
	const window = 2 * time.Second
	long, prefix := newLimiter(t, rdb, slidelimit.Per(4, window), slidelimit.WithDenyCache(0))
	short, err := slidelimit.New(rdb, slidelimit.Per(100, 100*time.Millisecond), slidelimit.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	// A stall of the host between the steps can make one attempt say
	// nothing; a fresh identity tries again.
	for attempt := range 3 {
		identity := fmt.Sprintf("tenant-%d", attempt)
		start := time.Now()
		allow(t, long, identity) // renews the record: the log lives two windows
		allow(t, short, identity)
		shortDone := time.Now()
		time.Sleep(time.Until(start.Add(window / 2)))
		secondAt := time.Now()
		for range 2 {
			if res := allow(t, long, identity); !res.Allowed {
				t.Fatalf("long limit denied %+v with two units in its window", res)
			}
		}
		// Had the short caller set the log to live one long window from its
		// admission, the log would be gone by now.
		time.Sleep(time.Until(shortDone.Add(window + window/4)))
		checkAt := time.Now()
		res := allow(t, long, identity)
		checked := time.Now()
		if checkAt.Sub(shortDone) < window+50*time.Millisecond || checked.Sub(secondAt) > window-50*time.Millisecond {
			t.Logf("attempt %d: the host stalled between the steps; again", attempt)
			continue
		}
		if !res.Allowed || res.Remaining != 1 {
			t.Fatalf("a long window after the short caller's admission: %+v, want allowed with 1 remaining (2 units of the last %v counted)", res, window)
		}
		return
	}
	t.Fatal("the host stalled in every attempt")
}

// TestRefundedLogKeepsItsExpiry checks that a log whose last unit was
// refunded holds no unit and still expires, and that after an admission it
// lives one to two of its longest window: for one limit and for two.
func TestRefundedLogKeepsItsExpiry(t *testing.T) {
	rdb := redistest.Client(t)
	limit := slidelimit.PerMinute(5)
	for _, more := range [][]slidelimit.Limit{nil, {slidelimit.PerHour(50)}} {
		lim, prefix := newLimiter(t, rdb, limit, slidelimit.WithLimits(more...))
		ctx := t.Context()
		key, _ := slidelimit.Key(prefix, "emptied", limit)
		longest := limit.Window
		if more != nil {
			longest = time.Hour
		}
		first := allow(t, lim, "emptied")
		if err := lim.Refund(ctx, first); err != nil {
			t.Fatal(err)
		}
		if n := keyUnits(t, rdb, key); n != 0 {
			t.Fatalf("limits %v: the log holds %d units after its only one was refunded, want 0", more, n)
		}
		if pttl := rdb.PTTL(ctx, key).Val(); pttl <= 0 || pttl > 2*longest {
			t.Fatalf("limits %v: the refunded log has PTTL %v, want it to expire within two windows of %v", more, pttl, longest)
		}
		allow(t, lim, "emptied")
		if pttl := rdb.PTTL(ctx, key).Val(); pttl < longest || pttl > 2*longest {
			t.Fatalf("limits %v: the log has PTTL %v after an admission, want one to two windows of %v", more, pttl, longest)
		}
	}
}

// TestWindowSlides admits one request, then two more later, and checks that
// when the first leaves the window exactly one slot reopens, at the time
// RetryAfter predicted by Redis's clock.
func TestWindowSlides(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		const window, gap = 600 * time.Millisecond, 200 * time.Millisecond
		lim, _ := newLimiter(t, rdb, slidelimit.Per(3, window))
		// Redis times the first request somewhere in [t0a, t0b].
		t0a := redisNow(t, rdb)
		allow(t, lim, "s")
		t0b := redisNow(t, rdb)
		for redisNow(t, rdb).Sub(t0a) < gap {
			time.Sleep(2 * time.Millisecond)
		}
		allow(t, lim, "s")
		allow(t, lim, "s")
		before := redisNow(t, rdb)
		denied := allow(t, lim, "s")
		after := redisNow(t, rdb)
		if denied.Allowed {
			t.Fatalf("Allow #4 = %+v, want denied", denied)
		}
		// The first request leaves the window at its time plus the window;
		// the denial, timed in [before, after], must predict exactly that.
		if before.Add(denied.RetryAfter).After(t0b.Add(window)) || after.Add(denied.RetryAfter).Before(t0a.Add(window)) {
			t.Errorf("RetryAfter = %v predicts a reopening in [%v, %v] after t0, which misses the first request leaving in [%v, %v]",
				denied.RetryAfter, before.Add(denied.RetryAfter).Sub(t0a), after.Add(denied.RetryAfter).Sub(t0a), window, t0b.Add(window).Sub(t0a))
		}
		// Poll until one slot reopens; it must not be before the prediction.
		deadline := time.Now().Add(5 * time.Second)
		var res slidelimit.Result
		for {
			res = allow(t, lim, "s")
			if res.Allowed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no slot reopened within 5s; last %+v", res)
			}
			time.Sleep(time.Millisecond)
		}
		reopened := redisNow(t, rdb)
		if reopened.Before(t0a.Add(window)) {
			t.Errorf("slot reopened %v after the first request, before the window of %v passed", reopened.Sub(t0a), window)
		}
		if res.Remaining != 0 {
			t.Errorf("after the reopening Remaining = %d, want 0: exactly one slot reopens", res.Remaining)
		}
		if res := allow(t, lim, "s"); res.Allowed {
			t.Errorf("second Allow after one slot reopened = %+v, want denied", res)
		}
	})
}

func TestMultiLimitIsAtomic(t *testing.T) {
	clients(t, func(t *testing.T, rdb redis.UniversalClient) {
		tight, loose := slidelimit.Per(3, 10*time.Second), slidelimit.PerMinute(5)
		lim, prefix := newLimiter(t, rdb, loose, slidelimit.WithLimits(tight))
		ctx := t.Context()
		kTight, _ := slidelimit.Key(prefix, "m", tight)
		kLoose, _ := slidelimit.Key(prefix, "m", loose)
		for i := 1; i <= 3; i++ {
			res := allow(t, lim, "m")
			if !res.Allowed || res.Limit != tight || res.Remaining != 3-i {
				t.Fatalf("Allow #%d = %+v, want allowed, decided by %v with %d left", i, res, tight, 3-i)
			}
		}
		before := [2][]string{rdb.ZRangeByScore(ctx, kTight, &redis.ZRangeBy{Min: "0", Max: "+inf"}).Val(), rdb.ZRangeByScore(ctx, kLoose, &redis.ZRangeBy{Min: "0", Max: "+inf"}).Val()}
		res := allow(t, lim, "m")
		if res.Allowed || res.Limit != tight {
			t.Fatalf("Allow #4 = %+v, want denied by %v", res, tight)
		}
		if got := res.Statuses; len(got) != 2 || got[0].Limit != loose || got[0].Remaining != 2 || got[0].RetryAfter != 0 || got[1].RetryAfter == 0 {
			t.Errorf("Allow #4 Statuses = %+v, want the loose limit with 2 left and only the tight one denying", got)
		}
		after := [2][]string{rdb.ZRangeByScore(ctx, kTight, &redis.ZRangeBy{Min: "0", Max: "+inf"}).Val(), rdb.ZRangeByScore(ctx, kLoose, &redis.ZRangeBy{Min: "0", Max: "+inf"}).Val()}
		for i := range before {
			if strings.Join(before[i], ",") != strings.Join(after[i], ",") || len(after[i]) != 3 {
				t.Errorf("set %d changed on a denial: %q -> %q", i, before[i], after[i])
			}
		}
		// A cost the tight limit cannot hold right now, for a fresh identity
		// on the loose side, is also all or nothing.
		res, err := lim.AllowN(ctx, "m2", 3)
		if err != nil || !res.Allowed {
			t.Fatalf("AllowN(m2, 3) = %+v, %v, want allowed", res, err)
		}
		if res, _ := lim.AllowN(ctx, "m2", 2); res.Allowed {
			t.Fatalf("AllowN(m2, 2) = %+v, want denied", res)
		}
		k2, _ := slidelimit.Key(prefix, "m2", loose)
		if n := keyUnits(t, rdb, k2); n != 3 {
			t.Errorf("loose set holds %d after a denied AllowN, want 3", n)
		}
	})
}
