package fiberlimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"
	slidelimit "github.com/slidelimit/slidelimit/core"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
)

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// Five requests in any 10 seconds per client IP, shared by every
	// instance of the service that uses this Redis.
	lim, err := slidelimit.New(rdb, slidelimit.Per(5, 10*time.Second), slidelimit.WithPrefix("example:fiberlimit:"))
	if err != nil {
		panic(err) // an invalid limit or option
	}
	// app.Test's client is 0.0.0.0; start from a clean slate.
	_ = lim.Reset(context.Background(), slidelimit.IPIdentity("0.0.0.0", 0))

	app := fiber.New()
	app.Use(fiberlimit.New(lim))
	app.Get("/ping", func(c *fiber.Ctx) error { return c.SendString("pong") })

	for range 6 {
		resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/ping", nil), -1)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"), resp.Header.Get("Content-Type"))
	}
	// Output:
	// 200 4 text/plain; charset=utf-8
	// 200 3 text/plain; charset=utf-8
	// 200 2 text/plain; charset=utf-8
	// 200 1 text/plain; charset=utf-8
	// 200 0 text/plain; charset=utf-8
	// 429 0 application/problem+json
}

func ExampleNew_config() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// A burst limit and an hourly quota, decided together.
	lim, err := slidelimit.New(rdb, slidelimit.PerSecond(10),
		slidelimit.WithLimits(slidelimit.PerHour(1000)),
		slidelimit.WithFailurePolicy(slidelimit.FailClosed))
	if err != nil {
		panic(err)
	}

	// Behind a load balancer at 10.0.0.0/8: believe its X-Forwarded-For,
	// and no one else's.
	proxies, err := slidelimit.ParseTrustedProxies("10.0.0.0/8")
	if err != nil {
		panic(err)
	}
	byIP := fiberlimit.ClientIP{TrustedProxies: proxies}.Key
	app := fiber.New()
	app.Use(fiberlimit.New(lim, fiberlimit.Config{
		// Health checks are never limited.
		Next: func(c *fiber.Ctx) bool { return c.Path() == "/healthz" },
		// Clients with an API key by the key, the others by IP.
		KeyGenerator: fiberlimit.FirstKey(fiberlimit.KeyByHeader("X-API-Key"), byIP),
		// Requests that fail do not use up the quota.
		SkipFailedRequests: true,
	}))
	fmt.Println("configured")
	// Output: configured
}

func ExampleJoinKeys() {
	// The key each request gets, shown by a handler; no Redis needed.
	key := fiberlimit.JoinKeys(fiberlimit.KeyByRoute, fiberlimit.KeyByIP)
	app := fiber.New()
	app.Get("/items/:id", func(c *fiber.Ctx) error { return c.SendString(key(c)) })

	resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/items/42", nil), -1)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(string(body))
	// Output: route:GET /items/:id|ip:0.0.0.0
}

func ExampleConfig_limiter() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR")})
	defer rdb.Close()

	// One limiter per plan, each validated once.
	free, err := slidelimit.New(rdb, slidelimit.PerMinute(60).Named("free"))
	if err != nil {
		panic(err)
	}
	pro, err := slidelimit.New(rdb, slidelimit.PerMinute(6000).Named("pro"))
	if err != nil {
		panic(err)
	}

	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		// An authentication middleware would find the user and plan here.
		c.Locals("user", "u-1")
		c.Locals("plan", "pro")
		return c.Next()
	})
	app.Use(fiberlimit.New(free, fiberlimit.Config{
		Limiter: func(c *fiber.Ctx) *slidelimit.Limiter {
			if c.Locals("plan") == "pro" {
				return pro
			}
			return nil // the free limiter given to New
		},
		KeyGenerator: fiberlimit.KeyByLocals("user"),
	}))
	app.Get("/ping", func(c *fiber.Ctx) error { return c.SendString("pong") })

	resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/ping", nil), -1)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	// Output: 200 "pro";q=6000;w=60
}
