package slidelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
)

func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// Three requests in any 10 seconds, shared by every process on this Redis.
	lim, err := slidelimit.New(rdb, slidelimit.Per(3, 10*time.Second))
	if err != nil {
		panic(err) // an invalid limit or option
	}
	_ = lim.Reset(ctx, "user:42") // start this example from a clean slate

	for range 4 {
		res, err := lim.Allow(ctx, "user:42")
		if err != nil {
			fmt.Println("redis failed, decided by the failure policy:", err)
		}
		if res.Allowed {
			fmt.Println("allowed, remaining", res.Remaining)
		} else {
			fmt.Println("denied, retry within", res.RetryAfter.Round(10*time.Second))
		}
	}
	// Output:
	// allowed, remaining 2
	// allowed, remaining 1
	// allowed, remaining 0
	// denied, retry within 10s
}

func ExampleWithLimits() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// A burst limit and a daily quota, decided together: a request counts
	// under both or under neither.
	lim, err := slidelimit.New(rdb, slidelimit.PerSecond(2).Named("burst"),
		slidelimit.WithLimits(slidelimit.PerDay(1000).Named("daily")))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(ctx, "api-key:7f3a")

	for range 3 {
		res, _ := lim.Allow(ctx, "api-key:7f3a")
		fmt.Printf("allowed=%v decided by %s; daily left %d\n", res.Allowed, res.Limit, res.Statuses[1].Remaining)
	}
	// Output:
	// allowed=true decided by burst; daily left 999
	// allowed=true decided by burst; daily left 998
	// allowed=false decided by burst; daily left 998
}

func ExampleLimiter_Refund() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(10))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(ctx, "upload:alice")

	// An upload of 4 units that then fails need not count.
	res, _ := lim.AllowN(ctx, "upload:alice", 4)
	fmt.Println("after the upload:", res.Remaining)
	if err := lim.Refund(ctx, res); err != nil {
		fmt.Println(err)
	}
	res, _ = lim.Peek(ctx, "upload:alice")
	fmt.Println("after the refund:", res.Remaining)
	// Output:
	// after the upload: 6
	// after the refund: 10
}

func ExampleHeaders_Write() {
	limit := slidelimit.Per(5, 10*time.Second)
	res := slidelimit.Result{
		Limit: limit, RetryAfter: 7200 * time.Millisecond, ResetAfter: 9 * time.Second,
		Statuses: []slidelimit.Status{{Limit: limit, RetryAfter: 7200 * time.Millisecond, ResetAfter: 9 * time.Second}},
	}
	slidelimit.Headers{}.Write(res, func(name, value string) {
		fmt.Printf("%s: %s\n", name, value)
	})
	// Output:
	// RateLimit-Policy: "5/10s";q=5;w=10
	// RateLimit: "5/10s";r=0;t=8
	// X-Ratelimit-Limit: 5
	// X-Ratelimit-Remaining: 0
	// X-Ratelimit-Reset: 8
	// Retry-After: 8
}

func ExampleKey() {
	for _, identity := range []string{"user:42", "a}b{c", "\x00\n"} {
		key, _ := slidelimit.Key(slidelimit.DefaultPrefix, identity, slidelimit.PerMinute(100))
		fmt.Println(key)
	}
	// Output:
	// slidelimit:{user:42}:#0
	// slidelimit:{a%7Db%7Bc}:#0
	// slidelimit:{%00%0A}:#0
}

func ExampleIPIdentity() {
	fmt.Println(slidelimit.IPIdentity("203.0.113.9", 0))
	fmt.Println(slidelimit.IPIdentity("2001:db8:5:6:7:8:9:a", 0))
	fmt.Println(slidelimit.JoinIdentities("POST /login", slidelimit.IPIdentity("203.0.113.9", 0)))
	// Output:
	// ip:203.0.113.9
	// ip:2001:db8:5:6::/64
	// POST /login|ip:203.0.113.9
}

// Find the client behind a load balancer at 10.0.0.0/8 that appends its
// line to X-Forwarded-For, after one the client forged.
func ExampleClientIP() {
	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	ip := slidelimit.ClientIP{TrustedProxies: proxies}
	header := func(name string) []string {
		if name == slidelimit.HeaderXForwardedFor {
			return []string{"192.0.2.1", "::ffff:198.51.100.7, 10.0.0.2"} // forged, then the proxies'
		}
		return nil
	}
	fmt.Println(ip.Identity(netip.MustParseAddr("10.1.2.3"), header))    // from the balancer
	fmt.Println(ip.Identity(netip.MustParseAddr("203.0.113.9"), header)) // straight from a client
	// Output:
	// ip:198.51.100.7 <nil>
	// ip:203.0.113.9 <nil>
}

// Key by an API key without putting it in Redis in clear.
func ExampleHeaderIdentity() {
	fmt.Println(slidelimit.HeaderIdentity("X-API-Key", "k-123"))
	fmt.Println(slidelimit.HeaderIdentity("x-api-key", "k-123")) // gRPC metadata: the same identity
	fmt.Println(slidelimit.HeaderIdentity("X-API-Key", "k-123", slidelimit.Readable()))
	// Output:
	// header:x-api-key:sha256:NgWp5DWNpDAvis6kHw9Szg
	// header:x-api-key:sha256:NgWp5DWNpDAvis6kHw9Szg
	// header:x-api-key:clear:k-123
}

// While Redis fails, FailLocal decides in each process on its share of the
// quota: with three replicas of a service, each admits at most 3 of "10 per
// minute" per identity, so the fleet admits at most 9.
func ExampleFailLocal() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // no Redis here
	defer rdb.Close()
	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(10),
		slidelimit.WithFailurePolicy(slidelimit.FailLocal), slidelimit.WithReplicas(3))
	if err != nil {
		panic(err)
	}
	for range 4 {
		res, err := lim.Allow(context.Background(), "user:42")
		fmt.Println(res.Allowed, res.Fallback, errors.Is(err, slidelimit.ErrUnavailable))
	}
	// Output:
	// true true true
	// true true true
	// true true true
	// false true true
}

// Per-tenant plans, read per request (from a token claim or a database),
// without a Limiter per plan: every plan counts the tenant's one log, so a
// tenant moved from one plan to another keeps its count.
func ExampleLimiter_AllowLimits() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(60)) // for calls without a plan
	if err != nil {
		panic(err)
	}
	plans := map[string][]slidelimit.Limit{
		"free": {slidelimit.PerMinute(2).Named("free")},
		"pro":  {slidelimit.PerMinute(100).Named("pro"), slidelimit.PerDay(1000).Named("pro-daily")},
	}
	_ = lim.Reset(ctx, "tenant:acme")

	for _, plan := range []string{"free", "free", "free", "pro"} {
		res, err := lim.AllowLimits(ctx, "tenant:acme", 1, plans[plan]...)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(plan, res.Allowed, res.Limit, res.Remaining)
	}
	// Output:
	// free true free 1
	// free true free 0
	// free false free 0
	// pro true pro 97
}

// A limit above MaxExactQuota is counted in steps of Window/1440 unless
// given a step of its own; Resolution reports the step, 0 for exact.
func ExampleLimit_Resolution() {
	fmt.Println(slidelimit.PerMinute(100).Resolution())
	fmt.Println(slidelimit.PerDay(100_000).Resolution())
	fmt.Println(slidelimit.PerHour(5000).Resolution())
	fmt.Println(slidelimit.PerHour(500).Stepped(time.Minute).Resolution())
	// Output:
	// 0s
	// 1m0s
	// 2.5s
	// 1m0s
}
