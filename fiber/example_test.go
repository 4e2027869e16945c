package fiberlimit_test

import (
	"bufio"
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
	"github.com/slidelimit/slidelimit/core/httplimit"
	fiberlimit "github.com/slidelimit/slidelimit/fiber"
)

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
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
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
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
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
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

// Limits per plan from one limiter: each request is held to the limits of
// its user's plan, counted on the user's one log.
func ExampleConfig_limits() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(60).Named("free"))
	if err != nil {
		panic(err)
	}
	plans := map[string][]slidelimit.Limit{
		"pro": {slidelimit.PerMinute(600).Named("pro"), slidelimit.PerSecond(20)},
	}

	app := fiber.New()
	app.Use(func(c *fiber.Ctx) error {
		// An authentication middleware would find the user and plan here.
		c.Locals("user", "u-2")
		c.Locals("plan", "pro")
		return c.Next()
	})
	app.Use(fiberlimit.New(lim, fiberlimit.Config{
		KeyGenerator: fiberlimit.KeyByLocals("user"),
		Limits: func(c *fiber.Ctx) []slidelimit.Limit {
			plan, _ := c.Locals("plan").(string)
			return plans[plan] // nil: the limiter's own, free
		},
	}))
	app.Get("/ping", func(c *fiber.Ctx) error { return c.SendString("pong") })

	resp, err := app.Test(httptest.NewRequest(http.MethodGet, "/ping", nil), -1)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit-Policy"))
	// Output: 200 "pro";q=600;w=60, "20/1s";q=20;w=1
}

// An LLM endpoint: each request is admitted at its estimate, 100 tokens,
// and settled to the tokens its response says it used, from a JSON body
// or at the end of a stream of Server-Sent Events.
func ExampleConfig_settle() {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDIS_ADDR"), ContextTimeoutEnabled: true})
	defer rdb.Close()

	lim, err := slidelimit.New(rdb, slidelimit.PerMinute(1000).Named("tpm"),
		slidelimit.WithLimits(slidelimit.InFlight(4, time.Minute).Named("concurrent")),
		slidelimit.WithPrefix("example:fiberlimit:settle:"))
	if err != nil {
		panic(err)
	}
	_ = lim.Reset(context.Background(), slidelimit.IPIdentity("0.0.0.0", 0)) // app.Test's client

	app := fiber.New()
	app.Use(fiberlimit.New(lim, fiberlimit.Config{
		Cost:   func(*fiber.Ctx) int { return 100 }, // the request's max_tokens
		Settle: httplimit.TotalTokens,               // usage.total_tokens, of a JSON body or an SSE stream
	}))
	app.Post("/v1/chat/completions", func(c *fiber.Ctx) error {
		if c.Query("stream") == "" {
			return c.JSON(fiber.Map{"choices": []any{}, "usage": fiber.Map{"total_tokens": 21}})
		}
		c.Set(fiber.HeaderContentType, "text/event-stream")
		c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
			fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n")
			_ = w.Flush()
			fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"total_tokens\":30}}\n\ndata: [DONE]\n\n")
		})
		return nil
	})

	for _, target := range []string{"/v1/chat/completions", "/v1/chat/completions?stream=1", "/v1/chat/completions"} {
		resp, err := app.Test(httptest.NewRequest(http.MethodPost, target, nil), -1)
		if err != nil {
			panic(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("RateLimit"))
	}
	// Output:
	// 200 "tpm";r=900;t=60
	// 200 "tpm";r=879;t=60
	// 200 "tpm";r=849;t=60
}
